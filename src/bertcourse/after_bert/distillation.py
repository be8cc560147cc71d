"""Knowledge distillation with DistilBERT's soft-target loss, and a small masked-LM demo of it (lesson 7).

A student learns from a teacher's whole output distribution, not only from the one right token: which
wrong answers the teacher finds plausible ("dark knowledge", Hinton et al. 2015) is information a hard
label does not carry. The loss, written once here:

    L = alpha * T^2 * KL( softmax(z_teacher / T) || softmax(z_student / T) ) + (1 - alpha) * CE(z_student, y)

The temperature T > 1 flattens both distributions so that the small probabilities count; the factor T^2
keeps the soft term's gradients the same size whatever T is (they shrink as 1/T^2 otherwise). DistilBERT
(Sanh et al. 2019) trains a 6-layer student of BERT-base with this soft term (T = 2) plus the masked-LM
loss and a cosine loss aligning the hidden states, its layers initialised from every other teacher layer.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from bertcourse.errors import BertcourseError
from bertcourse.masking import IGNORE_INDEX
from bertcourse.training.devices import to_device
from bertcourse.training.loop import LossLog, TrainStep
from bertcourse.training.optim import adamw, lr_factor
from bertcourse.training.packing import PackedData


class DistillationError(BertcourseError, ValueError):
    """Settings that make the loss meaningless (T <= 0, alpha outside [0, 1], mismatched logits)."""


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor | None = None,
                      temperature: float = 2.0, alpha: float = 0.5) -> torch.Tensor:
    """DistilBERT's soft-target loss on rows of logits [n, V]: alpha * T^2 * KL(teacher_T || student_T) +
    (1 - alpha) * cross-entropy with `labels` [n] (needed unless alpha = 1). Means over the n rows."""
    if temperature <= 0:
        raise DistillationError(f"temperature must be positive, got {temperature}")
    if not 0 <= alpha <= 1:
        raise DistillationError(f"alpha must lie in [0, 1], got {alpha}")
    if student_logits.shape != teacher_logits.shape:
        raise DistillationError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                                f"{tuple(teacher_logits.shape)} differ: both must be [n, V] for the same rows")
    log_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits.detach().float() / temperature, dim=-1)
    soft = F.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean") * temperature**2
    if alpha == 1:
        return alpha * soft
    if labels is None:
        raise DistillationError("labels are needed for the hard part of the loss (alpha < 1)")
    return alpha * soft + (1 - alpha) * F.cross_entropy(student_logits.float(), labels)


def student_from_teacher(teacher: torch.nn.Module, layers: Sequence[int]) -> torch.nn.Module:
    """A copy of `teacher` keeping only the blocks `layers` (DistilBERT's initialisation: the student
    starts from the teacher's embeddings, head and a subset of its layers)."""
    n_layers = len(teacher.blocks)
    if not layers or any(not 0 <= i < n_layers for i in layers):
        raise DistillationError(f"layers must name blocks of the teacher (0 to {n_layers - 1}), got {list(layers)}")
    student = copy.deepcopy(teacher)
    student.blocks = torch.nn.ModuleList(student.blocks[i] for i in layers)
    student.config = dataclasses.replace(student.config, n_layers=len(layers))
    return student.train()


def distil(student: torch.nn.Module, teacher: torch.nn.Module | None, objective: Any, data: PackedData, *,
           steps: int, batch_size: int, learning_rate: float, temperature: float = 2.0, alpha: float = 0.5,
           seed: int = 0, progress: bool = True, dtype: torch.dtype | None = None) -> list[float]:
    """Train `student` on masked-LM batches of `data` (`objective`: a `bertcourse.training.objectives.MaskedLM`) for
    `steps` steps with `distillation_loss` against `teacher`; with `teacher=None` on the hard labels only
    (the control). Both runs with one seed see the same batches and masks. `dtype`: what the forward passes
    autocast to (`devices.autocast_dtype`; None: fp32), fp16 with loss scaling (`loop.TrainStep`).
    Returns the loss per step."""
    from bertcourse.progress import progress_bar

    if teacher is not None:
        teacher.eval()
    device = next(student.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    order = torch.Generator().manual_seed(seed + 1)
    optimizer = adamw(student, learning_rate, weight_decay=0.01)
    warmup = max(1, steps // 10)
    train_step = TrainStep(optimizer, student.parameters(), device=device, dtype=dtype, grad_clip=1.0,
                           schedule=lambda step: lr_factor(step, warmup, steps))
    student.train()
    log = LossLog()  # read once at the end: no wait for the device every step
    desc = "distil" if teacher is not None else "hard labels"
    for _ in progress_bar(range(steps), desc=desc, disable=not progress):
        rows = torch.randint(len(data), (batch_size,), generator=order).tolist()
        batch = to_device(objective.batch(data, rows, generator), device)
        targets = batch["labels"][batch["labels"] != IGNORE_INDEX]
        with train_step.autocast():
            out = student(**batch)
            if teacher is None:
                loss = out.loss
            else:
                with torch.no_grad():
                    teacher_logits = teacher(**batch).logits
                loss = distillation_loss(out.logits, teacher_logits, targets, temperature, alpha)
        train_step.backward(loss)
        train_step.step()
        log.add(loss=loss)
    return log.read().get("loss", [])


__all__ = ["DistillationError", "distillation_loss", "student_from_teacher", "distil"]
