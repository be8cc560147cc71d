"""Held-out evaluation of a pretrained model: loss and accuracy over every target, each target's hit or
miss (for paired comparisons of two models), and the unigram baseline any model must beat.

Every function reads the targets from the batches' `labels` (the objective put them there, aligned with
the positions: `bertcourse.training.objectives`), in the order the model returns its logits (`labels != -100`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertcourse.masking import IGNORE_INDEX
from bertcourse.training.objectives import OBJECTIVES
from bertcourse.training.packing import PackedData
from bertcourse.training.ragged import Ragged

Batch = dict[str, torch.Tensor]


def targets_of(batch: Batch) -> torch.Tensor:
    """The batch's target tokens, flat, in the order of the model's logits rows."""
    labels = batch["labels"]
    return labels[labels != IGNORE_INDEX]


def _predictions(model: torch.nn.Module, batches: Sequence[Batch],
                 device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(logits [n, V], targets [n]) of each batch, computed in eval mode without gradients."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                batch = {k: v.to(device) for k, v in batch.items()}
                yield model(**batch).logits, targets_of(batch)
    finally:
        model.train(was_training)


def evaluate(model: torch.nn.Module, batches: Sequence[Batch], device: torch.device) -> dict:
    """Mean loss and accuracy over every target of the held-out batches (masked tokens for BERT, next
    tokens for GPT), weighted by target, not by batch."""
    total_loss, correct, count = 0.0, 0, 0
    for logits, targets in _predictions(model, batches, device):
        total_loss += F.cross_entropy(logits.float(), targets, reduction="sum").item()
        correct += int((logits.argmax(-1) == targets).sum())
        count += len(targets)
    return {"loss": total_loss / max(count, 1), "accuracy": correct / max(count, 1), "targets": count}


def target_hits(model: torch.nn.Module, batches: Sequence[Batch], device: torch.device | str = "cpu") -> torch.Tensor:
    """1.0 / 0.0 for every target of `batches`, in order: is the model's top prediction right?

    Two models scored on the same batches answer the same targets, so their hits can be compared pair by
    pair (a paired difference is far tighter than two separate accuracies).
    """
    predictions = _predictions(model, batches, torch.device(device))
    hits = [(logits.argmax(-1) == targets).cpu() for logits, targets in predictions]
    return torch.cat(hits).double() if hits else torch.zeros(0, dtype=torch.float64)


def unigram_baseline(
    train: PackedData,
    batches: Sequence[Batch],
    vocab_size: int,
    arch: str,
    special_ids: Sequence[int] = (),
) -> dict:
    """Loss and accuracy of a model that ignores the context and predicts by token frequency.

    It is the floor any pretrained model must beat: the loss is the entropy of the training unigram
    distribution measured on the held-out targets, the accuracy how often the most frequent token is
    right. Pass the tokenizer's `special_ids`: where `arch`'s objective never targets them (BERT's), they
    get no probability.
    """
    counts = torch.from_numpy(_token_counts(train, vocab_size)).double() + 1.0  # add-one: no target gets p = 0
    if not OBJECTIVES[arch].specials_are_targets and len(special_ids):
        counts[torch.tensor(list(special_ids))] = 0.0
    log_probs = (counts / counts.sum()).log()
    targets = torch.cat([targets_of(b) for b in batches])
    return {
        "loss": float(-log_probs[targets].mean()),
        "accuracy": float((targets == counts.argmax()).double().mean()),
        "targets": len(targets),
    }


def _token_counts(train: PackedData, vocab_size: int) -> np.ndarray:
    """How often each id occurs in the blocks, each block's first token ([CLS], never a target) left out;
    counted a few million tokens at a time (WikiText-103 is ~130M)."""
    blocks = Ragged.from_rows(train.blocks)
    firsts = blocks.values[blocks.offsets[:-1][blocks.lengths() > 0]]
    counts = -np.bincount(firsts, minlength=vocab_size)
    for start in range(0, blocks.n_values, 1 << 24):
        chunk = np.bincount(blocks.values[start : start + (1 << 24)], minlength=len(counts))
        if len(chunk) > len(counts):
            counts = np.pad(counts, (0, len(chunk) - len(counts)))
        counts += chunk
    return counts


__all__ = ["targets_of", "evaluate", "target_hits", "unigram_baseline"]
