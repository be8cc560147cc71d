"""Masked-language-model inputs: token-level and whole-word masking, the MLM loss and a batch collator.

These are the course's reference versions; lessons import them and the exercises ask students to write
their own. Everything is vectorised over the batch (no Python loop over tokens) and every random draw
comes from the `torch.Generator` passed in, so a seed reproduces a batch exactly, while calling again
with the same generator gives a fresh mask (dynamic masking, as in RoBERTa).

The BERT recipe: pick ~`select_prob` (15%) of the positions that are not special ([CLS], [SEP], [PAD],
...); the loss is computed at exactly those positions (label = original id, -100 elsewhere); of the
picked positions `mask_prob` (80%) show [MASK], `random_prob` (10%) show a random *regular* token and
the rest (10%) keep their token, so the model cannot learn that "only [MASK] positions matter", a
shortcut that would not transfer to fine-tuning where [MASK] never appears.

Conventions shared by every function here:
- `input_ids`: integer tensor `(batch, seq)`; never modified in place.
- special positions are never selected. They are `special_tokens_mask` (bool, True = special) when
  given, else the positions whose id is in `special_ids`; positions where `attention_mask == 0` are
  excluded as well.
- random replacements are drawn uniformly from the ids in `[0, vocab_size)` that are neither in
  `special_ids` nor `mask_token_id` (transformers draws from the whole vocabulary, specials included).
- a sequence that gets no position selected would contribute nothing to the loss; with
  `at_least_one=True` (the default) such a sequence gets one position chosen uniformly among its
  non-special positions instead. On 128-token sequences this almost never happens (0.85^126 ~ 1e-9); on
  a 10-token sentence it happens 20% of the time and raises the selected rate a little above 15%.
- probabilities default to BERT's recipe (`MaskingProbs`); the commands pass course.yml's `masking:`
  section (`course.masking`), and a test keeps the two equal.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertcourse.config import MaskingProbs
from bertcourse.errors import BertcourseError

IGNORE_INDEX = -100  # the label of positions outside the loss; torch's CrossEntropyLoss default


class MaskingError(BertcourseError, ValueError):
    """Inputs to a masking function that cannot be masked as asked (wrong shape, dtype, probability)."""


def masking_probs(
    select_prob: float | None = None, mask_prob: float | None = None, random_prob: float | None = None
) -> MaskingProbs:
    """The given probabilities, the missing ones BERT's (`MaskingProbs()`), validated."""
    recipe = MaskingProbs()
    select_prob = recipe.select_prob if select_prob is None else select_prob
    mask_prob = recipe.mask_prob if mask_prob is None else mask_prob
    random_prob = recipe.random_prob if random_prob is None else random_prob
    probs = MaskingProbs(float(select_prob), float(mask_prob), float(random_prob))
    if not 0 < probs.select_prob <= 1:
        raise MaskingError(f"select_prob must lie in (0, 1], got {probs.select_prob}")
    if probs.mask_prob < 0 or probs.random_prob < 0 or probs.mask_prob + probs.random_prob > 1 + 1e-12:
        raise MaskingError(
            f"mask_prob ({probs.mask_prob}) and random_prob ({probs.random_prob}) "
            "must be >= 0 and sum to <= 1"
        )
    return probs


# ----------------------------------------------------------------------------- token-level masking


def mask_tokens(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor | None = None,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    generator: torch.Generator | None = None,
    attention_mask: torch.Tensor | None = None,
    select_prob: float | None = None,
    mask_prob: float | None = None,
    random_prob: float | None = None,
    at_least_one: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's token-level masking of a batch. Returns `(inputs, labels)`, both int64 like `input_ids`.

    `labels` holds the original id at every selected position and -100 everywhere else, whatever the
    selected position's input became ([MASK], random or itself): the model must predict them all.
    """
    input_ids = _check_ids(input_ids)
    probs = masking_probs(select_prob, mask_prob, random_prob)
    candidates = _candidates(input_ids, special_tokens_mask, attention_mask, special_ids)

    # One uniform draw per position decides both whether it is selected (u < p) and, because u/p is
    # again uniform on [0, 1) given u < p, which of the three treatments it gets.
    p = probs.select_prob
    u = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    selected = candidates & (u < p)
    if at_least_one:
        empty = candidates.any(1) & ~selected.any(1)
        if bool(empty.any()):
            # each empty row: the candidate with the smallest draw (uniform over its candidates), with a
            # fresh uniform for its treatment
            pick = u.masked_fill(~candidates, 2.0).argmin(1, keepdim=True)
            forced = torch.zeros_like(selected).scatter_(1, pick, empty.unsqueeze(1))
            fresh = torch.rand(input_ids.shape[0], 1, generator=generator, device=input_ids.device)
            u = torch.where(forced, fresh * p, u)
            selected |= forced
    replace_mask = selected & (u < p * probs.mask_prob)
    replace_random = selected & ~replace_mask & (u < p * (probs.mask_prob + probs.random_prob))
    return _apply(input_ids, selected, replace_mask, replace_random, mask_token_id, vocab_size,
                  special_ids, generator)


def _apply(
    input_ids: torch.Tensor,
    selected: torch.Tensor,
    replace_mask: torch.Tensor,
    replace_random: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Build `(inputs, labels)` from the three decisions, drawing random ids only where needed."""
    labels = torch.where(selected, input_ids, IGNORE_INDEX)
    inputs = input_ids.masked_fill(replace_mask, mask_token_id)
    n_random = int(replace_random.sum())
    if n_random:
        regular = regular_token_ids(vocab_size, [*special_ids, mask_token_id], device=input_ids.device)
        draws = torch.randint(len(regular), (n_random,), generator=generator, device=input_ids.device)
        inputs[replace_random] = regular[draws]
    return inputs, labels


def regular_token_ids(vocab_size: int, special_ids: Sequence[int], device: Any = None) -> torch.Tensor:
    """The ids a random replacement may take: all of `[0, vocab_size)` except the special ones."""
    allowed = torch.ones(vocab_size, dtype=torch.bool, device=device)
    special = torch.as_tensor(list(special_ids), dtype=torch.long, device=device)
    allowed[special[(special >= 0) & (special < vocab_size)]] = False
    regular = allowed.nonzero().squeeze(1)
    if len(regular) == 0:
        raise MaskingError(f"every id below vocab_size={vocab_size} is special: none left to draw")
    return regular


def is_special(ids: torch.Tensor, special_ids: Sequence[int]) -> torch.Tensor:
    """Boolean tensor: which ids are in `special_ids` (a table lookup; torch.isin is ~20x slower here)."""
    special = torch.as_tensor(list(special_ids), dtype=torch.long, device=ids.device)
    if ids.numel() == 0 or special.numel() == 0:
        return torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    size = max(int(ids.max()), int(special.max())) + 1
    table = torch.zeros(size, dtype=torch.bool, device=ids.device)
    table[special[special >= 0]] = True
    return table[ids.clamp(min=0)] & (ids >= 0)


def _check_ids(input_ids: torch.Tensor) -> torch.Tensor:
    if not isinstance(input_ids, torch.Tensor):
        raise MaskingError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.dim() != 2:
        raise MaskingError(f"input_ids must have shape (batch, seq), got {tuple(input_ids.shape)}")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise MaskingError(f"input_ids must hold integer ids, got dtype {input_ids.dtype}")
    return input_ids.long()


def _candidates(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    special_ids: Sequence[int],
) -> torch.Tensor:
    """Positions that may be selected: not special and not padding."""
    if special_tokens_mask is not None:
        if special_tokens_mask.shape != input_ids.shape:
            raise MaskingError(
                f"special_tokens_mask has shape {tuple(special_tokens_mask.shape)}, "
                f"input_ids {tuple(input_ids.shape)}"
            )
        candidates = ~special_tokens_mask.bool()
    else:
        candidates = ~is_special(input_ids, special_ids)
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise MaskingError(
                f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids {tuple(input_ids.shape)}"
            )
        candidates = candidates & attention_mask.bool()
    return candidates


# ----------------------------------------------------------------------------- the loss


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the selected positions only (labels != -100).

    The mean is over selected positions, not over all positions: dividing by the batch's full size
    would shrink the loss (and the gradient) by the ~15% selection rate and make it depend on padding.
    A batch with no selected position gives 0 (with a graph), not NaN.
    """
    if logits.shape[:-1] != labels.shape:
        raise MaskingError(f"logits {tuple(logits.shape)} must be labels {tuple(labels.shape)} + (vocab,)")
    flat_logits = logits.reshape(-1, logits.size(-1)).float()
    total = F.cross_entropy(flat_logits, labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)


# ----------------------------------------------------------------------------- whole-word masking


def word_ids_tensor(word_ids: Sequence[Sequence[int | None]], seq_len: int | None = None) -> torch.Tensor:
    """Fast-tokenizer `word_ids()` lists (None for specials) -> a `(batch, seq)` tensor with -1, padded."""
    seq_len = seq_len if seq_len is not None else max((len(w) for w in word_ids), default=0)
    out = np.full((len(word_ids), seq_len), -1, dtype=np.int64)
    for row, ids in enumerate(word_ids):
        out[row, : len(ids)] = [-1 if w is None else w for w in ids]
    return torch.from_numpy(out)


def whole_word_mask(
    input_ids: torch.Tensor,
    word_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor | None = None,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    generator: torch.Generator | None = None,
    select_prob: float | None = None,
    mask_prob: float | None = None,
    random_prob: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-word masking: all WordPiece pieces of a word are selected together and treated alike.

    `word_ids` `(batch, seq)`: the fast tokenizer's `word_ids()` with -1 for specials and padding. A word
    is a maximal run of consecutive non-special positions sharing a word id (so the two halves of a
    sentence pair, whose word ids both restart at 0, stay separate words).

    Budget rule, per sequence with n non-special tokens: k = max(1, round(select_prob * n)). Words are
    visited in a uniformly random order and each is taken if it still fits (running total <= k); a word
    that does not fit is skipped and the next ones are tried (Google's rule), so the selection stops only
    when no remaining word fits. A sequence whose every word is longer than k gets the first word of
    the order anyway, so every sequence has a target. Each selected word then gets ONE 80/10/10
    decision shared by all its pieces ([MASK] for all, a random regular id for each, or all kept).
    Google's original code drew 80/10/10 per piece, so a "whole" word could come out half [MASK].
    """
    input_ids = _check_ids(input_ids)
    if word_ids.shape != input_ids.shape:
        raise MaskingError(f"word_ids has shape {tuple(word_ids.shape)}, input_ids {tuple(input_ids.shape)}")
    probs = masking_probs(select_prob, mask_prob, random_prob)
    device = input_ids.device
    valid = word_ids >= 0
    if special_tokens_mask is not None:
        valid &= ~special_tokens_mask.bool()
    valid &= ~is_special(input_ids, special_ids)

    # number the words of each row 0, 1, ... : a word starts where the word id changes or after a special
    previous = F.pad(word_ids[:, :-1], (1, 0), value=-1)
    previous_valid = F.pad(valid[:, :-1], (1, 0), value=False)
    starts = valid & ((word_ids != previous) | ~previous_valid)
    word_index = (starts.cumsum(1) - 1).clamp(min=0)
    batch, n_words = input_ids.shape[0], max(int(starts.sum(1).max()) if starts.numel() else 0, 1)
    lengths = torch.zeros(batch, n_words, dtype=torch.long, device=device)
    lengths.scatter_add_(1, word_index, valid.long())
    exists = lengths > 0

    # random order of the words (non-words last), running total of pieces in that order
    scores = torch.rand(batch, n_words, generator=generator, device=device)
    order = scores.masked_fill(~exists, 2.0).argsort(1)
    ordered_lengths = lengths.gather(1, order)
    remaining = (valid.sum(1) * probs.select_prob).round().clamp(min=1).unsqueeze(1)
    take = torch.zeros_like(exists)
    # Google's sequential "take it if it fits, else skip it" as a few passes over the whole batch: each
    # pass takes, in order, the words that still fit until the first one that does not; words longer
    # than what is left can never fit again and drop out. A pass per skipped word, not per token.
    while True:
        candidate = ~take & (ordered_lengths > 0) & (ordered_lengths <= remaining)
        if not bool(candidate.any()):
            break
        new = candidate & ((ordered_lengths * candidate).cumsum(1) <= remaining)
        take |= new
        remaining = remaining - (ordered_lengths * new).sum(1, keepdim=True)
    take[:, 0] |= ~take.any(1) & (ordered_lengths[:, 0] > 0)  # every word too long: take the first anyway
    word_selected = torch.zeros_like(take).scatter_(1, order, take)

    # one 80/10/10 decision per word, spread to its pieces
    u = torch.rand(batch, n_words, generator=generator, device=device)
    word_mask = word_selected & (u < probs.mask_prob)
    word_random = word_selected & ~word_mask & (u < probs.mask_prob + probs.random_prob)
    selected = valid & word_selected.gather(1, word_index)
    replace_mask = valid & word_mask.gather(1, word_index)
    replace_random = valid & word_random.gather(1, word_index)
    return _apply(input_ids, selected, replace_mask, replace_random, mask_token_id, vocab_size,
                  special_ids, generator)


# ----------------------------------------------------------------------------- collating a batch


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_value: int, pad_to_multiple_of: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad lists of ids into `(ids, attention_mask)` with one scatter, not one op per token."""
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    if len(sequences) == 0:
        raise MaskingError("cannot pad an empty list of sequences")
    width = int(lengths.max())
    if pad_to_multiple_of:
        width = math.ceil(width / pad_to_multiple_of) * pad_to_multiple_of
    flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=int(lengths.sum()))
    attention = np.arange(width) < lengths[:, None]
    ids = np.full((len(sequences), width), pad_value, dtype=np.int64)
    ids[attention] = flat
    return torch.from_numpy(ids), torch.from_numpy(attention.astype(np.int64))


def collate_for_mlm(
    examples: Sequence[Sequence[int] | Mapping[str, Any]],
    tokenizer: Any,
    *,
    generator: torch.Generator | None = None,
    whole_word: bool = False,
    pad_to_multiple_of: int | None = None,
    select_prob: float | None = None,
    mask_prob: float | None = None,
    random_prob: float | None = None,
) -> dict[str, torch.Tensor]:
    """Tokenized examples -> a padded, masked batch `{input_ids, attention_mask, labels}`.

    `examples`: lists of ids, or mappings with "input_ids" (and "word_ids", None/-1 for specials, when
    `whole_word=True`). `tokenizer` supplies `pad_token_id`, `mask_token_id`, `all_special_ids` and
    `len()`. Use it as a DataLoader `collate_fn` via `functools.partial`.
    """
    if len(examples) == 0:
        raise MaskingError("collate_for_mlm got an empty list of examples")
    is_mapping = isinstance(examples[0], Mapping)
    sequences = [e["input_ids"] for e in examples] if is_mapping else examples
    ids, attention_mask = pad_batch(sequences, tokenizer.pad_token_id, pad_to_multiple_of)
    common = dict(
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        special_ids=tokenizer.all_special_ids,
        generator=generator,
        select_prob=select_prob,
        mask_prob=mask_prob,
        random_prob=random_prob,
    )
    if whole_word:
        if not is_mapping or "word_ids" not in examples[0]:
            raise MaskingError("whole_word=True needs examples with a 'word_ids' list (tokenizer word_ids())")
        words = word_ids_tensor([e["word_ids"] for e in examples], ids.shape[1])
        inputs, labels = whole_word_mask(ids, words, attention_mask == 0, **common)
    else:
        inputs, labels = mask_tokens(ids, attention_mask=attention_mask, **common)
    return {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels}


# ----------------------------------------------------------------------------- measuring a masking


@dataclass(frozen=True)
class MaskingCounts:
    """What a masking did to a batch: counts out of the eligible (non-special) positions."""

    eligible: int
    selected: int
    masked: int  # selected and shown as [MASK]
    random: int  # selected and shown as another token
    kept: int  # selected and shown unchanged (includes the rare random draw equal to the original)
    special_selected: int  # should be 0
    random_special: int  # random replacements that are special ids; should be 0


def count_masking(
    original: torch.Tensor,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    special_ids: Sequence[int],
    mask_token_id: int,
    special_tokens_mask: torch.Tensor | None = None,
) -> MaskingCounts:
    """Tally the outcome of a masking, for the lessons' distribution plots and tests."""
    special = is_special(original, special_ids)
    if special_tokens_mask is not None:
        special |= special_tokens_mask.bool()
    selected = labels != IGNORE_INDEX
    masked = selected & (inputs == mask_token_id)
    changed = selected & ~masked & (inputs != original)
    special_input = is_special(inputs, special_ids)
    return MaskingCounts(
        eligible=int((~special).sum()),
        selected=int((selected & ~special).sum()),
        masked=int(masked.sum()),
        random=int(changed.sum()),
        kept=int((selected & (inputs == original)).sum()),
        special_selected=int((selected & special).sum()),
        random_special=int((changed & special_input).sum()),
    )
