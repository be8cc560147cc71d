"""Held-out evaluation of a pretrained model: loss and accuracy over every target, each target's hit or
miss (for paired comparisons of two models), and the unigram baseline any model must beat.

BERT's held-out batches use the 80/10/10 recipe, so a tenth of its targets are shown unchanged at their own
position and are copied, not predicted: an accuracy over every target is inflated by them. Pass `mask_id` and
the same figures are given at the `[MASK]` positions alone (`mask_loss`, `mask_accuracy`, `mask_targets`): the
headline of masked-LM accuracy, to be read beside the unigram baseline at the same positions.

Every function reads the targets from the batches' `labels` (the objective put them there, aligned with
the positions: `bertcourse.training.objectives`), in the order the model returns its logits (`labels != -100`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

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


def shown_as_mask(batch: Batch, mask_id: int) -> torch.Tensor:
    """For every target of the batch (in `targets_of`'s order): True where the input held `[MASK]` (the 80%),
    False where it held a random token or the original one (the 10% + 10%)."""
    labels = batch["labels"]
    return batch["input_ids"][labels != IGNORE_INDEX] == mask_id


def target_blocks(batches: Sequence[Batch]) -> torch.Tensor:
    """The block (row of the batches, counted across them) of every target, in `targets_of`'s order: a block's
    targets share one context, so a paired test of two models resamples blocks, not targets
    (`stats.paired_sentence_bootstrap`)."""
    blocks, offset = [], 0
    for batch in batches:
        labels = batch["labels"]
        blocks.append((labels != IGNORE_INDEX).nonzero()[:, 0] + offset)
        offset += labels.shape[0]
    return torch.cat(blocks) if blocks else torch.zeros(0, dtype=torch.long)


def _predictions(model: torch.nn.Module, batches: Sequence[Batch],
                 device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor, Batch]]:
    """(logits [n, V], targets [n], the batch on `device`) of each batch, in eval mode without gradients."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                batch = {k: v.to(device) for k, v in batch.items()}
                yield model(**batch).logits, targets_of(batch), batch
    finally:
        model.train(was_training)


def evaluate(model: torch.nn.Module, batches: Sequence[Batch], device: torch.device,
             mask_id: int | None = None) -> dict:
    """Mean loss and accuracy over every target of the held-out batches (masked tokens for BERT, next
    tokens for GPT), weighted by target, not by batch; with `mask_id`, also over the `[MASK]` positions alone
    (`mask_loss`, `mask_accuracy`, `mask_targets`)."""
    total_loss, correct, count = 0.0, 0, 0
    mask_loss, mask_correct, mask_count = 0.0, 0, 0
    for logits, targets, batch in _predictions(model, batches, device):
        losses = F.cross_entropy(logits.float(), targets, reduction="none")
        hits = logits.argmax(-1) == targets
        total_loss += losses.sum().item()
        correct += int(hits.sum())
        count += len(targets)
        if mask_id is not None:
            masked = shown_as_mask(batch, mask_id)
            mask_loss += losses[masked].sum().item()
            mask_correct += int(hits[masked].sum())
            mask_count += int(masked.sum())
    result = {"loss": total_loss / max(count, 1), "accuracy": correct / max(count, 1), "targets": count}
    if mask_id is not None:
        result.update(mask_loss=mask_loss / max(mask_count, 1), mask_accuracy=mask_correct / max(mask_count, 1),
                      mask_targets=mask_count)
    return result


def target_losses(model: torch.nn.Module, batches: Sequence[Batch], device: torch.device | str = "cpu") -> torch.Tensor:
    """The cross-entropy of every target of `batches`, in order (their mean is `evaluate`'s loss; their spread
    gives the loss an interval)."""
    losses = [F.cross_entropy(logits.float(), targets, reduction="none").cpu()
              for logits, targets, _ in _predictions(model, batches, torch.device(device))]
    return torch.cat(losses).double() if losses else torch.zeros(0, dtype=torch.float64)


def target_hits(model: torch.nn.Module, batches: Sequence[Batch], device: torch.device | str = "cpu") -> torch.Tensor:
    """1.0 / 0.0 for every target of `batches`, in order: is the model's top prediction right?

    Two models scored on the same batches answer the same targets, so their hits can be compared pair by
    pair (a paired difference is far tighter than two separate accuracies).
    """
    predictions = _predictions(model, batches, torch.device(device))
    hits = [(logits.argmax(-1) == targets).cpu() for logits, targets, _ in predictions]
    return torch.cat(hits).double() if hits else torch.zeros(0, dtype=torch.float64)


def unigram_baseline(
    train: PackedData,
    batches: Sequence[Batch],
    vocab_size: int,
    arch: str,
    special_ids: Sequence[int] = (),
    mask_id: int | None = None,
) -> dict:
    """Loss and accuracy of a model that ignores the context and predicts by token frequency.

    It is the floor any pretrained model must beat: the loss is the entropy of the training unigram
    distribution measured on the held-out targets, the accuracy how often the most frequent token is
    right. Pass the tokenizer's `special_ids`: where `arch`'s objective never targets them (BERT's), they
    get no probability. With `mask_id`, the same over the `[MASK]` positions alone (as `evaluate`'s).
    """
    counts = torch.from_numpy(_token_counts(train, vocab_size)).double() + 1.0  # add-one: no target gets p = 0
    if not OBJECTIVES[arch].specials_are_targets and len(special_ids):
        counts[torch.tensor(list(special_ids))] = 0.0
    log_probs = (counts / counts.sum()).log()
    targets = torch.cat([targets_of(b) for b in batches])
    if mask_id is not None:
        targets = targets[torch.cat([shown_as_mask(b, mask_id) for b in batches])]
    return {
        "loss": float(-log_probs[targets].mean()),
        "accuracy": float((targets == counts.argmax()).double().mean()),
        "targets": len(targets),
    }


def heldout_figures(model: torch.nn.Module, objective: Any, train_sentences: Sequence[str],
                    heldout_sentences: Sequence[str], device: torch.device | str = "cpu") -> dict[str, Any]:
    """A pretrained model's held-out figures on the batches a pretraining run evaluates on (fixed masks): loss
    and accuracy over every target and, for a masking objective, at the `[MASK]` positions alone, each beside
    the unigram baseline (counted on the training sentences) at the same targets."""
    max_len = model.config.max_seq_len
    heldout = objective.heldout_batches(objective.pack(heldout_sentences, max_len)[0])
    tokenizer, arch = objective.tokenizer, objective.arch
    mask_id = tokenizer.mask_token_id if arch == "bert" else None
    figures = evaluate(model, heldout, torch.device(device), mask_id=mask_id)
    figures.update(target_name=objective.target_name, sentences=len(heldout_sentences))
    train = objective.pack(train_sentences, max_len)[0]
    specials = tokenizer.all_special_ids
    unigram = unigram_baseline(train, heldout, len(tokenizer), arch, specials)
    figures.update(unigram_loss=unigram["loss"], unigram_accuracy=unigram["accuracy"])
    if mask_id is not None:
        at_mask = unigram_baseline(train, heldout, len(tokenizer), arch, specials, mask_id=mask_id)
        figures.update(unigram_mask_loss=at_mask["loss"], unigram_mask_accuracy=at_mask["accuracy"])
    return figures


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


__all__ = ["targets_of", "shown_as_mask", "evaluate", "heldout_figures", "target_hits", "target_losses",
           "target_blocks", "unigram_baseline"]
