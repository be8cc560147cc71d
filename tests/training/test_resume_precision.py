"""Resumes that never crash and never slow down without a word: an fp16 step given no loss-scale state (a
checkpoint saved in fp32/bf16 or before the precision setting, resumed on a T4) starts a fresh scale, and a bf16
run resumed where bf16 is only emulated (a T4, faked here by its device properties) is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fake_gpu import fake_cuda

import bertcourse.training.devices as devices
from bertcourse.training.checkpoint import CheckpointError
from bertcourse.training.loop import TrainStep
from bertcourse.training.pretrain import _run_precision


def _step(dtype: torch.dtype | None) -> TrainStep:
    model = torch.nn.Linear(2, 1)
    return TrainStep(torch.optim.SGD(model.parameters(), lr=0.1), model.parameters(), device="cpu", dtype=dtype,
                     schedule=lambda s: 1.0)


def test_an_fp16_step_given_no_scale_starts_a_fresh_one():
    saved = _step(None).state_dict()  # an fp32 run's: the disabled scaler saves {}
    assert saved["scaler"] == {}
    with pytest.raises(RuntimeError, match="The source state dict is empty"):  # what torch does with it
        torch.amp.GradScaler("cpu").load_state_dict(saved["scaler"])
    for state in (saved, {"scheduler": saved["scheduler"]}, {}):  # fp32/bf16, and a checkpoint without "scaler"
        resumed = _step(torch.float16)
        resumed.load_state_dict(state)
        assert resumed.scaler.get_scale() == torch.amp.GradScaler("cpu").get_scale()  # the fresh 65536


def test_a_saved_scale_is_kept():
    first = _step(torch.float16)
    first.scaler.scale(torch.tensor(1.0))  # the scale exists from the first scaled loss on
    first.scaler.update(1024.0)
    resumed = _step(torch.float16)
    resumed.load_state_dict(first.state_dict())
    assert resumed.scaler.get_scale() == 1024.0


@pytest.fixture
def gpu(monkeypatch):
    """A faked CUDA device with these properties (torch's own bf16 check reads them)."""
    def fake(name: str, capability: tuple[int, int]) -> torch.device:
        return fake_cuda(monkeypatch, name, capability)
    return fake


def _saved(precision: str | None) -> dict:
    return {"settings": {} if precision is None else {"precision": precision}}


def test_a_bf16_run_resumed_on_a_t4_is_refused_in_one_line(gpu):
    device, path = gpu("Tesla T4", (7, 5)), Path("runs/x/checkpoint.pt")
    with pytest.raises(CheckpointError) as refused:
        _run_precision("auto", device, _saved("bf16"), path)
    message = str(refused.value)
    assert "\n" not in message and str(path) in message
    assert "started in bf16, which Tesla T4 only emulates" in message and "--precision bf16" in message
    assert _run_precision("bf16", device, _saved("bf16"), path) == "bf16"  # asked for: it goes on emulated
    assert _run_precision("auto", device, _saved(None), path) == "fp16"  # before the setting: fp16, scaled
    assert _run_precision("auto", device, _saved("fp32"), path) == "fp32"


def test_a_bf16_run_resumes_where_bf16_is_native(gpu):
    assert _run_precision("auto", gpu("NVIDIA A100-SXM4-40GB", (8, 0)), _saved("bf16"), Path("c.pt")) == "bf16"


@pytest.mark.parametrize("native", [True, False])
def test_on_the_cpu_a_bf16_run_resumes_only_where_it_is_native(native, monkeypatch):
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    if native:
        assert _run_precision("auto", cpu, _saved("bf16"), Path("c.pt")) == "bf16"
    else:
        with pytest.raises(CheckpointError, match="which this CPU only emulates"):
            _run_precision("auto", cpu, _saved("bf16"), Path("c.pt"))
