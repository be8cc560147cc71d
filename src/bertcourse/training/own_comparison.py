"""The course's real models, ready for exercise 8's own comparison: the student's functions, not these, measure.

Exercise 8 runs the student's `sentence_losses`, `paired_interval`, `finetune_over_seeds` and `paired_seed_test` on
two real comparisons, in the student's notebook:

- lesson 2's two BERTs (token-level and whole-word masking, continuing the shipped BERT where it fits the profile:
  `lesson2_start`; the folders lesson 2 writes under runs/, `lesson2_folders`):
  `lesson2_test_batches` gives the held-out sentences with lesson 2's whole-word test masks (every target shown as
  [MASK], drawn once with seed 123, as lesson 2 draws them), and `mlm_logits` the scores each model gives them;
- the shipped BERT and GPT (`src/bertcourse/checkpoints/{bert,gpt}-cpu-long`): `shipped_maker` builds a fresh
  classifier on a copy of a shipped encoder (its head drawn from torch's global generator, as any new model's), and
  `sst2_label_budget` gives a small, balanced, fixed set of SST-2 labels in batches and the 872 validation sentences.

What is measured, and how, is the student's code; this module only loads and batches. The notebook trains lesson 2's
models itself when their folders are missing (with the course's own pretraining loop, which only the commands may
import: tests/test_architecture.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertcourse.classifier import DEFAULT_POOLING, SequenceClassifier
from bertcourse.data import column, load_sst2
from bertcourse.masking import collate_for_mlm
from bertcourse.run_folders import settings_folder
from bertcourse.training.checkpoint import CHECKPOINT_NAME, load_pretrained, load_shipped, matching_shipped
from bertcourse.training.finetune import sentence_rows

LESSON2_RUNS = {"token-level": "lesson02-token-level", "whole-word": "lesson02-whole-word"}
TEST_MASK_SEED = 123  # lesson 2's test masks: drawn once, the same for both models


def lesson2_start(tokenizer: Any, model_spec: Any) -> Path | None:
    """Where lesson 2's two BERTs start: the shipped BERT's folder where it reads `tokenizer`'s ids with the
    profile's shape (`model_spec`, the profile's `model`: the cpu profiles), else None (random weights)."""
    return matching_shipped("bert", tokenizer, model_spec.for_arch("bert", vocab_size=len(tokenizer)))


def lesson2_folders(profile: str, corpus: Any, start: Path | None) -> dict[str, Path]:
    """{masking: the run folder lesson 2 trains that model in} for `profile`, `corpus` and its start (lesson 2
    names the runs that continue the shipped BERT `...-continued`)."""
    suffix = "-continued" if start else ""
    return {name: settings_folder(run + suffix, profile, corpus) for name, run in LESSON2_RUNS.items()}


def lesson2_models(folders: dict[str, Path]) -> dict[str, nn.Module] | None:
    """Lesson 2's two models read from their checkpoints (eval mode), or None when either is missing."""
    paths = {name: Path(folder) / CHECKPOINT_NAME for name, folder in folders.items()}
    if not all(path.is_file() for path in paths.values()):
        return None
    return {name: load_pretrained(path)[0] for name, path in paths.items()}


def lesson2_test_batches(tokenizer: Any, sentences: list[str], max_seq_len: int, *, whole_word: bool = True,
                         size: int = 100) -> list[dict[str, torch.Tensor]]:
    """The held-out `sentences` with lesson 2's test masks (every target [MASK], seed 123), `size` per batch."""
    encoded = tokenizer(sentences, truncation=True, max_length=max_seq_len)
    examples = [{"input_ids": ids, "word_ids": encoded.word_ids(i)} for i, ids in enumerate(encoded["input_ids"])]
    test = collate_for_mlm(examples, tokenizer, whole_word=whole_word, mask_prob=1.0, random_prob=0.0,
                           generator=torch.Generator().manual_seed(TEST_MASK_SEED))
    return [{key: value[start:start + size] for key, value in test.items()}
            for start in range(0, len(examples), size)]


@torch.no_grad()
def mlm_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A masked LM's scores (batch, seq, vocab) at every position of a test batch, in float32."""
    model.eval()
    return model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()


class IdsClassifier(SequenceClassifier):
    """A `SequenceClassifier` called on padded token ids alone: `model(ids)` gives logits (batch, classes)."""

    def __init__(self, encoder: nn.Module, pad_id: int, pooling: str, dropout: float = 0.1):
        super().__init__(encoder, n_labels=2, pooling=pooling, dropout=dropout)
        self.pad_id = pad_id

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Token ids (batch, seq), right-padded with `pad_id` -> logits (batch, 2)."""
        mask = (input_ids != self.pad_id).long()
        return self.head(self.pool(input_ids, mask)).logits


def shipped_maker(arch: str, *, dropout: float = 0.1) -> tuple[Callable[[], nn.Module], Any]:
    """(make_model, tokenizer): `make_model()` builds a new classifier on a copy of the shipped `arch` encoder, its
    head drawn from torch's global generator (the shipped weights are read, and their hashes checked, once)."""
    encoder, tokenizer, _ = load_shipped(arch)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def make_model() -> nn.Module:
        return IdsClassifier(copy.deepcopy(encoder), pad_id, DEFAULT_POOLING[arch], dropout).eval()

    return make_model, tokenizer


def _padded(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad_id] * (width - len(row)) for row in rows])


def sst2_label_budget(tokenizer: Any, n_labels: int, *, batch_size: int = 16, max_seq_len: int = 64,
                      seed: int = 0, data_dir: str | Path | None = None,
                      course: Any = None) -> tuple[list[tuple[torch.Tensor, torch.Tensor]],
                                                   tuple[torch.Tensor, torch.Tensor]]:
    """(train_batches, eval_batch): `n_labels` SST-2 training sentences (half of each label, a fixed draw from
    `seed`) as right-padded (ids, labels) batches, and the 872 validation sentences as one (ids, labels)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    train = load_sst2("train", data_dir, course=course)
    validation = load_sst2("validation", data_dir, course=course)
    labels = np.array(column(train, "label"))
    rng = np.random.default_rng(seed)
    chosen = np.concatenate([rng.permutation(np.flatnonzero(labels == label))[: n_labels // 2] for label in (0, 1)])
    chosen = rng.permutation(chosen)
    sentences = column(train, "sentence")
    rows = sentence_rows(tokenizer, [sentences[i] for i in chosen], max_seq_len)
    train_batches = [(_padded(rows[start:start + batch_size], pad_id),
                      torch.tensor(labels[chosen[start:start + batch_size]]))
                     for start in range(0, len(rows), batch_size)]
    eval_rows = sentence_rows(tokenizer, column(validation, "sentence"), max_seq_len)
    return train_batches, (_padded(eval_rows, pad_id), torch.tensor(column(validation, "label")))


__all__ = ["IdsClassifier", "LESSON2_RUNS", "TEST_MASK_SEED", "lesson2_folders", "lesson2_models", "lesson2_start",
           "lesson2_test_batches", "mlm_logits", "shipped_maker", "sst2_label_budget"]
