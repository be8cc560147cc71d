"""What each model learns to predict: one objective object per architecture owns its batches and targets.

- `MaskedLM` (BERT): every batch masked afresh (dynamic masking, RoBERTa) with BERT's 80/10/10 recipe;
  the targets are the original tokens at the selected positions, -100 everywhere else.
  `WholeWordMLM` selects whole words instead (`bertcourse.masking.whole_word_mask`).
- `NextToken` (GPT): the target of position t is the token at t + 1 (`next_token_labels`, the one place
  the shift is written); the last position and padding have none.

Both hand the model `labels` aligned with its positions, so a model computes its loss the same way for
either task, and the training loop calls `objective.batch(...)` and `objective.loss(...)` without asking
which architecture it trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from bertcourse.config import ARCHITECTURES, MaskingProbs
from bertcourse.errors import BertcourseError
from bertcourse.masking import IGNORE_INDEX, collate_for_mlm, pad_batch
from bertcourse.training.packing import PackedData, pack_sentences, tokenize, tokenize_prefix

EVAL_MASK_SEED = 1234  # the held-out masks are the same in every run and every evaluation

Batch = dict[str, torch.Tensor]


class ObjectiveError(BertcourseError):
    """An objective asked for something its architecture cannot do (e.g. whole-word masking for the GPT)."""


def next_token_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, S] -> [B, S]: labels[:, t] = input_ids[:, t + 1]; -100 at the last position and wherever the
    next position is padding. The GPT's shift, written once: position t is trained to predict token t + 1."""
    labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


class Objective:
    """The targets of one architecture: how a batch of packed rows becomes inputs and labels."""

    arch: ClassVar[str]  # the ModelConfig.arch this objective trains
    target_name: ClassVar[str]  # what a target is, for reports: "masked-token" or "next-token"
    specials_are_targets: ClassVar[bool]  # may [SEP] (and the other special tokens) be a target?
    uses_word_ids: ClassVar[bool] = False  # do its batches need each token's word id (PackedData.words)?
    whole_word_variant: ClassVar[type[Objective] | None] = None  # the same objective masking whole words

    def __init__(self, tokenizer: Any, masking: MaskingProbs | None = None):
        self.tokenizer = tokenizer
        self.masking = masking or MaskingProbs()  # the masking recipe (objectives that mask)

    def batch(self, data: PackedData, indices: Sequence[int], generator: torch.Generator) -> Batch:
        """The rows `indices` of `data` as a padded batch with `labels` (-100: no target there)."""
        raise NotImplementedError

    def loss(self, model: Any, batch: Batch) -> torch.Tensor:
        """The mean cross-entropy over the batch's targets (the model computes it from `labels`)."""
        return model(**batch).loss

    def pack(self, sentences: Sequence[str], max_seq_len: int, budget: int | None = None,
             progress: bool = False) -> tuple[PackedData, int]:
        """`sentences` (the first ones holding `budget` tokens, or all) tokenized and packed into blocks, with
        word ids when this objective needs them; and how many sentences went in."""
        tokenizer, words = self.tokenizer, self.uses_word_ids
        tokens = (tokenize(tokenizer, sentences, word_ids=words, progress=progress) if budget is None
                  else tokenize_prefix(tokenizer, sentences, budget, word_ids=words, progress=progress))
        packed = pack_sentences(tokens.ids, max_seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id,
                                tokens.word_ids)
        return packed, len(tokens)

    def heldout_batches(self, data: PackedData, batch_size: int = 64) -> list[Batch]:
        """`data` as batches whose random choices (masks) come from a fixed seed: the same every time."""
        generator = torch.Generator().manual_seed(EVAL_MASK_SEED)
        return [self.batch(data, range(start, min(start + batch_size, len(data))), generator)
                for start in range(0, len(data), batch_size)]


class MaskedLM(Objective):
    """BERT's masked language modelling with token-level masking, the masks drawn afresh per batch."""

    arch = "bert"
    target_name = "masked-token"
    specials_are_targets = False  # special tokens are never selected
    whole_word: ClassVar[bool] = False

    def batch(self, data: PackedData, indices: Sequence[int], generator: torch.Generator) -> Batch:
        """Masked rows with segment ids; `labels` hold the original tokens at the selected positions."""
        batch = collate_for_mlm(self._examples(data, indices), self.tokenizer, generator=generator,
                                whole_word=self.whole_word, **asdict(self.masking))
        batch["token_type_ids"] = pad_batch([data.segments[i] for i in indices], 0)[0]
        return batch

    def _examples(self, data: PackedData, indices: Sequence[int]) -> list[Any]:
        return [data.blocks[i] for i in indices]


class WholeWordMLM(MaskedLM):
    """BERT's masked language modelling selecting whole words (all pieces of a word, one decision each)."""

    whole_word = True
    uses_word_ids = True

    def _examples(self, data: PackedData, indices: Sequence[int]) -> list[Any]:
        if data.words is None:
            raise ObjectiveError("whole-word masking needs blocks packed with word ids "
                                 "(pack_sentences(..., word_ids=...))")
        return [{"input_ids": data.blocks[i], "word_ids": data.words[i]} for i in indices]


class NextToken(Objective):
    """The GPT's next-token prediction: every real token but the first is a target."""

    arch = "gpt"
    target_name = "next-token"
    specials_are_targets = True  # the token after a sentence is its [SEP]

    def batch(self, data: PackedData, indices: Sequence[int], generator: torch.Generator) -> Batch:
        """Padded rows (no random choice: `generator` is unused) with next-token labels."""
        input_ids, attention_mask = pad_batch([data.blocks[i] for i in indices], self.tokenizer.pad_token_id)
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "labels": next_token_labels(input_ids, attention_mask)}


MaskedLM.whole_word_variant = WholeWordMLM
OBJECTIVES: dict[str, type[Objective]] = {"bert": MaskedLM, "gpt": NextToken}  # by ModelConfig.arch


def objective_class(arch: str, *, whole_word: bool = False) -> type[Objective]:
    """The objective that trains `arch` ("bert" or "gpt"), masking whole words with `whole_word` (BERT only);
    a clear error for any other request, before anything is loaded."""
    if arch not in OBJECTIVES:
        raise ObjectiveError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    chosen = OBJECTIVES[arch]
    if whole_word:
        if chosen.whole_word_variant is None:
            raise ObjectiveError(f"--whole-word: whole-word masking is for BERT's masked LM (--arch bert); "
                                 f"the {arch} objective ({chosen.target_name} prediction) masks nothing")
        chosen = chosen.whole_word_variant
    return chosen


def objective_for(arch: str, tokenizer: Any, *, masking: MaskingProbs | None = None,
                  whole_word: bool = False) -> Objective:
    """An objective object for `arch` (see `objective_class`) with `tokenizer` and the masking recipe."""
    return objective_class(arch, whole_word=whole_word)(tokenizer, masking)


def eval_batches(data: PackedData, arch: str, tokenizer: Any, batch_size: int = 64,
                 masking: MaskingProbs | None = None) -> list[Batch]:
    """The held-out set as batches of `arch`'s objective, masks drawn once from a fixed seed."""
    return objective_for(arch, tokenizer, masking=masking).heldout_batches(data, batch_size)


__all__ = [
    "EVAL_MASK_SEED",
    "ObjectiveError",
    "next_token_labels",
    "Objective",
    "MaskedLM",
    "WholeWordMLM",
    "NextToken",
    "OBJECTIVES",
    "objective_class",
    "objective_for",
    "eval_batches",
]
