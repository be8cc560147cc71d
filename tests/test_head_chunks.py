"""The GPT's head on CUDA in one chunk: the CPU's 16 MB chunks (kept for its allocator, see
`model.head_loss_in_chunks`) would multiply a GPU step's kernel launches. The GPU is faked by its properties."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import bertcourse.model as model_module
from bertcourse.config import ModelConfig
from bertcourse.course import load_course
from bertcourse.masking import IGNORE_INDEX
from bertcourse.model import GPT, LOGITS_CHUNK_BYTES, rows_per_chunk


@pytest.fixture
def t4(monkeypatch):
    """A faked T4's properties (15 GiB) as `torch.cuda.get_device_properties` answers them."""
    properties = SimpleNamespace(name="Tesla T4", major=7, minor=5, total_memory=15 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: properties)
    model_module._gpu_memory.cache_clear()
    yield properties
    model_module._gpu_memory.cache_clear()


def test_on_cuda_a_gpt_step_of_the_gpu_profile_is_one_chunk(t4):
    profile = load_course().profiles["gpu"]
    rows = profile.pretrain.batch_size * profile.model.max_seq_len  # every position is a target
    assert rows_per_chunk(profile.vocab_size, torch.device("cuda")) >= rows
    assert rows_per_chunk(profile.vocab_size, torch.device("cuda", 0)) * 4 * profile.vocab_size <= 2**30


def test_on_the_cpu_the_chunks_stay_as_they_were(t4):
    assert rows_per_chunk(8000, torch.device("cpu")) == LOGITS_CHUNK_BYTES // (4 * 8000)
    assert rows_per_chunk(10**9, torch.device("cpu")) == 1


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _step_ops(chunk_rows: int, monkeypatch) -> tuple[int, float]:
    monkeypatch.setattr(model_module, "rows_per_chunk", lambda vocab, device: chunk_rows)
    torch.manual_seed(0)
    gpt = GPT(ModelConfig(vocab_size=300, n_layers=1, d_model=32, n_heads=4, d_ff=64, max_seq_len=16).for_arch("gpt"))
    ids = torch.randint(5, 300, (8, 16))
    labels = torch.cat([ids[:, 1:], torch.full((8, 1), IGNORE_INDEX)], 1)
    with _Ops() as ops:
        loss = gpt(ids, torch.ones_like(ids), labels=labels).loss
        loss.backward()
    return ops.count, loss.detach().item()


def test_one_chunk_dispatches_far_fewer_ops_for_the_same_loss(monkeypatch):
    many, loss_many = _step_ops(8, monkeypatch)  # 120 targets: 15 chunks
    one, loss_one = _step_ops(10**6, monkeypatch)
    assert one < many / 2
    assert loss_one == pytest.approx(loss_many, rel=1e-5)
