"""Training a task head (lesson 4's tagger and reader, `bertcourse.heads`) through the course's one training step.

It lives with the training code, not beside the heads: a head is a model like any other, and its steps are
`bertcourse.training.loop.TrainStep`'s, the ones every loop of the course takes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from bertcourse.progress import progress_bar
from bertcourse.training.devices import autocast_dtype, to_device
from bertcourse.training.loop import LossLog, TrainStep


def train_head(model: nn.Module, batches: Sequence[dict[str, torch.Tensor]], steps: int, learning_rate: float,
               device: torch.device | str = "cpu", progress: bool = True, precision: str = "auto") -> list[float]:
    """`steps` AdamW steps over `batches` (cycled), each a dict of the model's forward arguments, labels
    included. Returns the loss of every step. Enough for a head's demonstration; real fine-tuning adds
    warm-up and decay (`bertcourse.training.optim`).

    The steps are the course's one training step (`bertcourse.training.loop.TrainStep`): `precision` means
    what it means for `bertcourse finetune` (on a T4 "auto" is fp16 with loss scaling), so a head trains
    on a GPU as fast as the lesson's fine-tuning does. The batches are moved to the device once (a lesson's
    few dozen are reused every epoch), and the losses are read once at the end, not once per step.
    """
    if steps < 1 or not batches:
        raise ValueError(f"need at least one step and one batch, got {steps} steps and {len(batches)} batches")
    trained = [p for p in model.parameters() if p.requires_grad]
    train_step = TrainStep(torch.optim.AdamW(trained, lr=learning_rate), trained, device=device,
                           dtype=autocast_dtype(device, precision), grad_clip=None)
    on_device = [to_device(batch, device) for batch in batches]
    log = LossLog()
    model.train()
    for step in progress_bar(range(steps), desc="training the head", disable=not progress):
        with train_step.autocast():
            loss = model(**on_device[step % len(on_device)]).loss
        train_step.backward(loss)
        train_step.step()
        log.add(loss=loss)
    model.eval()
    return log.read()["loss"]


__all__ = ["train_head"]
