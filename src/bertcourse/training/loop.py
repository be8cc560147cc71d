"""The optimizer step every training loop of the course takes, written once (the nanoGPT way: one loop body,
configured by the job).

Pretraining (`train.pretrain`), fine-tuning (`finetune`), lessons 6-7's runs (`after_bert.train`) and
distillation (`distillation.distil`) each keep their own loop (what a batch is, what the loss is, when to
evaluate) and take their steps through `TrainStep`:

    step = TrainStep(optimizer, model.parameters(), device=device, dtype=dtype, grad_clip=1.0, schedule=factor)
    with step.autocast():
        loss = model(**batch).loss
    step.backward(loss)
    step.step()

What it does that a plain `loss.backward(); optimizer.step()` does not:

- autocast to `dtype` (bf16 or fp16; None: fp32, no autocast);
- loss scaling for fp16 (`torch.amp.GradScaler`): fp16 holds nothing below ~6e-8, so small gradients
  underflow to zero unless the loss is multiplied up first; the scaler divides the gradients back before
  clipping (`unscale_`), skips a step whose gradients overflowed (inf/nan) and halves its scale then.
  bf16 has fp32's exponent range and fp32 needs none: the scaler is off for both, and the step is then
  exactly `backward`, `clip_grad_norm_`, `optimizer.step()`;
- gradient clipping on the unscaled gradients (clipping scaled ones would clip at `grad_clip` x scale);
- the learning-rate schedule, one scheduler step per optimizer step;
- gradient accumulation: `accumulate` micro-batches per optimizer step, each loss divided by it, so that
  the gradient is the mean over the micro-batches (the same as one batch of all their rows when each
  micro-batch's loss is a mean over equally many targets).

`LossLog` keeps the losses on the device and reads them only when the loop logs: `loss.item()` makes the
CPU wait for the GPU, and read every step before `backward()` it stalls the GPU's queue once per step.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch


class TrainStep:
    """Autocast, loss scaling (fp16), clipping after unscaling, the schedule and accumulation for one loop."""

    def __init__(self, optimizer: torch.optim.Optimizer, parameters: Iterable[torch.nn.Parameter], *,
                 device: torch.device | str, dtype: torch.dtype | None = None, grad_clip: float | None = 1.0,
                 schedule: Callable[[int], float] | None = None, accumulate: int = 1):
        """`parameters`: what is clipped (pass them in the order the loop clipped before: the norm is summed in
        that order). `schedule(step)`: the learning-rate factor of step 0, 1, ... (None: constant)."""
        if accumulate < 1:
            raise ValueError(f"accumulate must be at least 1, got {accumulate}")
        self.optimizer = optimizer
        self.parameters = list(parameters)
        self.device = torch.device(device)
        self.dtype = dtype
        self.grad_clip = grad_clip
        self.accumulate = accumulate
        self.schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule) if schedule is not None else None
        # fp16 only; torch's scaler runs on CUDA and on the CPU (it is disabled, a pass-through, elsewhere)
        scaled = dtype == torch.float16
        self.scaler = torch.amp.GradScaler(self.device.type if scaled else "cpu", enabled=scaled)
        self.micro = 0  # micro-batches backpropagated since the last optimizer step

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward pass's context: autocast to `dtype`, or nothing for fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate one micro-batch's loss (scaled for fp16; divided by `accumulate` when above 1)."""
        if self.micro == 0:
            self.optimizer.zero_grad(set_to_none=True)
        if self.accumulate > 1:
            loss = loss / self.accumulate
        self.scaler.scale(loss).backward()
        self.micro += 1

    @property
    def ready(self) -> bool:
        """Whether `accumulate` micro-batches have been backpropagated: time for `step()`."""
        return self.micro >= self.accumulate

    def step(self) -> None:
        """Unscale, clip, take the optimizer step (skipped by the scaler after an fp16 overflow), update the
        scale, advance the schedule."""
        if self.micro == 0:
            raise RuntimeError("step() before any backward(): there is no gradient to step with")
        self.scaler.unscale_(self.optimizer)
        if self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.schedule is not None:
            with warnings.catch_warnings():
                # a step the scaler skipped (fp16 overflow, typically the first few while the scale settles)
                # still advances the schedule, which counts the loop's steps; torch warns of that, as expected
                warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)` before", UserWarning)
                self.schedule.step()
        self.micro = 0

    @property
    def lr(self) -> float:
        """The learning rate of the next step (the first parameter group's)."""
        return self.optimizer.param_groups[0]["lr"]

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's and the scaler's state (the optimizer's is the caller's to save)."""
        return {"scheduler": self.schedule.state_dict() if self.schedule is not None else None,
                "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved. A state without a loss scale (saved by an fp32 or bf16 step, or
        before the scaler was saved) resumed in fp16 starts a fresh scale: torch's `load_state_dict({})`
        raises "The source state dict is empty", and the first few steps find the scale again anyway."""
        if self.schedule is not None and state.get("scheduler") is not None:
            self.schedule.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


class LossLog:
    """Per-step values (losses, token counts) kept as tensors on their device until the loop logs.

    `add(loss=..., tokens=...)` each step costs no wait; `read()` stacks each name's tensors and copies them
    to the CPU at once (one wait per log, not one per step), returning plain numbers per step, in order:
    exactly the values `.item()` would have given one by one.
    """

    def __init__(self) -> None:
        self.pending: dict[str, list[torch.Tensor]] = {}

    def add(self, **values: torch.Tensor | float | int) -> None:
        """Keep this step's values (a tensor is detached; a plain number is kept as it is)."""
        for name, value in values.items():
            kept = value.detach() if isinstance(value, torch.Tensor) else torch.tensor(value)
            self.pending.setdefault(name, []).append(kept)

    def __len__(self) -> int:
        return max((len(v) for v in self.pending.values()), default=0)

    def read(self) -> dict[str, list]:
        """The values added since the last read, by name, as Python numbers; the log is empty afterwards."""
        values = {name: torch.stack(tensors).tolist() for name, tensors in self.pending.items()}
        self.pending = {}
        return values


__all__ = ["LossLog", "TrainStep"]
