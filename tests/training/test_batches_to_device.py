"""Batches reach the device without a wait: one helper (`devices.to_device`) pins and sends them with
`non_blocking=True` on CUDA (faked here: the CPU has none), a plain `.to` elsewhere; SST-2's rows padded once
on the device give exactly the batches `pad_batch` gives; and no training loop moves a batch its own way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import bertcourse.training.loop as loop
from bertcourse.masking import pad_batch
from bertcourse.training.devices import DeviceRows, to_device
from bertcourse.training.task_heads import train_head

SRC = Path(__file__).resolve().parents[2] / "src" / "bertcourse"


@pytest.fixture
def fake_cuda(monkeypatch):
    """`Tensor.pin_memory` and `Tensor.to(cuda)` recorded instead of run; returns the record of calls."""
    calls: list[tuple] = []
    real_to = torch.Tensor.to

    def pin_memory(self):
        calls.append(("pin", self.data_ptr()))
        pinned = self.clone()
        pinned.pinned_for_test = True
        return pinned

    def to(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("device")
        if isinstance(target, torch.device | str) and torch.device(target).type == "cuda":
            calls.append(("to", getattr(self, "pinned_for_test", False), kwargs.get("non_blocking", False)))
            return self
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    return calls


def test_on_cuda_every_tensor_is_pinned_then_sent_without_a_wait(fake_cuda):
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "labels": torch.zeros(2, dtype=torch.long)}
    moved = to_device(batch, "cuda")
    assert set(moved) == set(batch)
    pins = [c for c in fake_cuda if c[0] == "pin"]
    sends = [c for c in fake_cuda if c[0] == "to"]
    assert len(pins) == 2 and sends == [("to", True, True)] * 2  # each copy from pinned memory, non-blocking
    fake_cuda.clear()
    to_device((torch.ones(1), torch.ones(1)), torch.device("cuda", 0))
    assert [c[0] for c in fake_cuda] == ["pin", "to", "pin", "to"]


def test_on_the_cpu_nothing_is_pinned(monkeypatch):
    def refuse(self):
        raise AssertionError("pin_memory called for a CPU batch")

    monkeypatch.setattr(torch.Tensor, "pin_memory", refuse)
    tensor = torch.arange(4)
    moved = to_device({"x": tensor}, "cpu")
    assert moved["x"] is tensor  # `.to` of a tensor already there: the same tensor, no copy
    assert to_device(tensor, torch.device("cpu")) is tensor


def test_rows_padded_once_give_exactly_the_batches_pad_batch_gives():
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(1, 50, (int(n),), generator=generator).tolist()
            for n in torch.randint(1, 12, (40,), generator=generator)]
    labels = torch.randint(0, 2, (40,), generator=generator)
    on_device = DeviceRows(rows, "cpu", labels=labels)
    assert len(on_device) == 40
    for index in ([3, 1, 4, 1, 5], [0], list(range(40)), [7, 9]):
        ids, attention = pad_batch([rows[i] for i in index], 0)
        batch = on_device.batch(index)
        assert torch.equal(batch["input_ids"], ids) and torch.equal(batch["attention_mask"], attention)
        assert torch.equal(batch["labels"], labels[index])
    with pytest.raises(ValueError, match="3 rows but 2 labels"):
        DeviceRows(rows[:3], "cpu", labels=labels[:2])


def test_rows_on_cuda_are_pinned_and_sent_once(fake_cuda):
    DeviceRows([[1, 2], [3]], "cuda", labels=torch.tensor([0, 1]))
    assert [c for c in fake_cuda if c[0] == "to"] == [("to", True, True)] * 3  # ids, mask, labels: once each


def test_no_training_code_moves_a_batch_its_own_way():
    """A dict of tensors sent with `.to(device...)` outside the helper would wait for the GPU again. The held-out
    evaluation (training/heldout.py) and the lesson 1 inspection helper are evaluation code, not yet moved."""
    pattern = re.compile(r"\{k: v\.to\(|non_blocking")
    allowed = {"training/devices.py", "training/heldout.py", "model_inspection.py"}
    found = [f"{path.relative_to(SRC)}:{number}" for path in sorted(SRC.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if pattern.search(line) and str(path.relative_to(SRC)) not in allowed]
    assert found == []


class _Recorded(loop.TrainStep):
    made: list[_Recorded] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0
        _Recorded.made.append(self)

    def step(self) -> None:
        self.steps += 1
        super().step()


def test_a_task_head_trains_through_the_shared_step_in_the_precision_asked(monkeypatch):
    """`task_heads.train_head` takes `loop.TrainStep`'s steps, autocast to the precision asked (bf16 on the CPU)."""
    from bertcourse.training import task_heads

    _Recorded.made = []
    monkeypatch.setattr(task_heads, "TrainStep", _Recorded)
    seen: list[torch.dtype | None] = []

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x, labels):
            seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
            logits = self.linear(x).float()
            return type("Out", (), {"loss": torch.nn.functional.cross_entropy(logits, labels)})()

    torch.manual_seed(0)
    x = torch.randn(16, 4)
    batches = [{"x": x, "labels": (x[:, 0] > 0).long()}]
    losses = train_head(Head(), batches, steps=5, learning_rate=0.1, progress=False, precision="bf16")
    assert len(_Recorded.made) == 1 and _Recorded.made[0].steps == 5
    assert seen == [torch.bfloat16] * 5 and len(losses) == 5 and all(isinstance(v, float) for v in losses)
    train_head(Head(), batches, steps=2, learning_rate=0.1, progress=False, precision="fp32")
    assert seen[5:] == [None, None]
