"""Hidden checks of ex02-whole-word-masking: the student's `whole_word_mask`.

The rule the exercise states, per row with n non-special tokens: budget k = max(1, round(select_prob * n));
words are taken in a uniformly random order while the covered total stays <= k (stopping at the first
word that does not fit, or skipping it and trying the next: both are accepted); every piece of a taken
word is labelled; each taken word gets ONE 80/10/10 decision for all its pieces.

The checks are properties that every correct implementation satisfies whatever the order of its random
draws; rates use exact binomial ranges with tails < 1e-8 and fixed seeds. The test rows have n in
{60, 80, 100, 120}, so k is an integer without rounding ties, and every word (1-4 pieces) fits the budget.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103  # bert-base-uncased's ids: the specials are not contiguous
SPECIAL = [PAD, UNK, CLS, SEP, MASK]
VOCAB = 30_522
IGNORE = -100
TAIL = 1e-8


def binomial_range(trials: int, p: float, tail: float = TAIL) -> tuple[int, int]:
    """[lo, hi] with P(X < lo) < tail and P(X > hi) < tail for X ~ Binomial(trials, p) (exact pmf)."""
    k = torch.arange(trials + 1, dtype=torch.float64)
    n = torch.tensor(float(trials), dtype=torch.float64)
    log_pmf = (torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
               + k * math.log(p) + (n - k) * math.log1p(-p))
    pmf = log_pmf.exp()
    lo = int((pmf.cumsum(0) < tail).sum())
    hi = trials - int((pmf.flip(0).cumsum(0) < tail).sum())
    return lo, hi


def rate_ok(successes: int, trials: int, p: float, slack: float = 0.0) -> bool:
    lo, hi = binomial_range(trials, p)
    return lo - slack * trials <= successes <= hi + slack * trials


def make_rows(rows: int, seed: int, vocab: int = VOCAB) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] pieces [SEP] [PAD]...: words of 1-4 pieces, n in {60, 80, 100, 120} non-special tokens."""
    rng = np.random.default_rng(seed)
    width = 122
    ids = np.full((rows, width), PAD, dtype=np.int64)
    word_ids = np.full((rows, width), -1, dtype=np.int64)
    for row in range(rows):
        n = 20 * int(rng.integers(3, 7))
        lengths = rng.integers(1, 5, size=n)
        words = np.repeat(np.arange(n), lengths)[:n]  # the last word is cut to make exactly n pieces
        ids[row, 0] = CLS
        ids[row, 1:n + 1] = rng.integers(MASK + 1, vocab, size=n)
        ids[row, n + 1] = SEP
        word_ids[row, 1:n + 1] = words
    return torch.from_numpy(ids), torch.from_numpy(word_ids)


def call_wwm(student, ids, word_ids, seed=0, generator=None, vocab_size=VOCAB, **probs):
    probs = {"select_prob": 0.15, "mask_prob": 0.8, "random_prob": 0.1, **probs}
    result = student.call(
        "whole_word_mask", ids, word_ids, mask_token_id=MASK, vocab_size=vocab_size, special_ids=SPECIAL,
        generator=generator if generator is not None else student.generator(seed), **probs,
    )
    assert isinstance(result, (tuple, list)) and len(result) == 2, "whole_word_mask must return (inputs, labels)"
    inputs, labels = result
    assert isinstance(inputs, torch.Tensor) and isinstance(labels, torch.Tensor), "returns two tensors"
    assert inputs.shape == ids.shape and labels.shape == ids.shape, "shapes differ from input_ids"
    return inputs.long(), labels.long()


def per_word(ids, word_ids, inputs, labels):
    """One row per word of the batch: (row, pieces, labelled pieces, [MASK] pieces, unchanged pieces)."""
    valid = word_ids >= 0
    rows = torch.arange(ids.shape[0]).unsqueeze(1).expand_as(ids)
    key = (rows * ids.shape[1] + word_ids.clamp(min=0))[valid]
    size = ids.shape[0] * ids.shape[1]

    def count(flags: torch.Tensor) -> torch.Tensor:
        return torch.bincount(key, weights=flags[valid].double(), minlength=size).long()

    pieces = count(torch.ones_like(valid))
    exists = pieces > 0
    table = torch.stack([
        torch.arange(size) // ids.shape[1],
        pieces,
        count(labels != IGNORE),
        count(inputs == MASK),
        count(inputs == ids),
    ], 1)
    return table[exists]


# ----------------------------------------------------------------------------- checks


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="whole_word_mask must return (inputs, labels): two int64 tensors shaped like input_ids")
def test_returns_two_integer_tensors(student):
    ids, word_ids = make_rows(8, seed=1)
    inputs, labels = student.call("whole_word_mask", ids, word_ids, mask_token_id=MASK, vocab_size=VOCAB,
                                  special_ids=SPECIAL, generator=student.generator(1))
    assert inputs.shape == labels.shape == ids.shape
    assert inputs.dtype == torch.long and labels.dtype == torch.long


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="whole_word_mask changed the tensors it was given; build new tensors (clone) instead")
def test_input_tensors_not_modified(student):
    ids, word_ids = make_rows(64, seed=2)
    ids_handle, words_handle = student.put(ids), student.put(word_ids)
    student.call("whole_word_mask", ids_handle, words_handle, mask_token_id=MASK, vocab_size=VOCAB,
                 special_ids=SPECIAL, generator=student.generator(2))
    assert torch.equal(student.get(ids_handle), ids)
    assert torch.equal(student.get(words_handle), word_ids)


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="positions with word id -1 ([CLS], [SEP], padding) must never be selected or changed")
def test_special_positions_never_selected(student):
    ids, word_ids = make_rows(300, seed=3)
    inputs, labels = call_wwm(student, ids, word_ids, seed=3)
    special = word_ids < 0
    assert bool((labels[special] == IGNORE).all())
    assert torch.equal(inputs[special], ids[special])


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="labels must hold the original id at every piece of a selected word and -100 "
                            "everywhere else")
def test_labels_hold_original_ids(student):
    ids, word_ids = make_rows(300, seed=4)
    inputs, labels = call_wwm(student, ids, word_ids, seed=4)
    labelled = labels != IGNORE
    assert torch.equal(labels[labelled], ids[labelled])
    assert bool(labelled[inputs != ids].all()), "a changed position has no label"


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="a word must be selected as a whole: all of its pieces or none of them")
def test_words_are_never_split(student):
    ids, word_ids = make_rows(300, seed=5)
    table = per_word(ids, word_ids, *call_wwm(student, ids, word_ids, seed=5))
    pieces, labelled = table[:, 1], table[:, 2]
    assert bool(((labelled == 0) | (labelled == pieces)).all())
    assert int((labelled > 0).sum()) > 0


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="take ONE [MASK]/random/keep decision per selected word and apply it to all its pieces")
def test_one_decision_per_word(student):
    ids, word_ids = make_rows(600, seed=6)
    table = per_word(ids, word_ids, *call_wwm(student, ids, word_ids, seed=6))
    selected = table[table[:, 2] > 0]
    pieces, masked, unchanged = selected[:, 1], selected[:, 3], selected[:, 4]
    assert bool(((masked == 0) | (masked == pieces)).all()), "a word is [MASK] on some pieces only"
    # random words: each piece drawn independently, so a piece equals its original with chance 1/30417;
    # a word mixing unchanged and replaced pieces is then very rare, while per-piece decisions make many
    mixed = (masked == 0) & (unchanged > 0) & (unchanged < pieces)
    assert int(mixed.sum()) <= 3


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="select whole words in random order until about select_prob of the row's "
                            "non-special tokens are covered, never more than that budget")
def test_budget_per_row(student):
    ids, word_ids = make_rows(300, seed=7)
    inputs, labels = call_wwm(student, ids, word_ids, seed=7)
    table = per_word(ids, word_ids, inputs, labels)
    n = (word_ids >= 0).sum(1)
    budget = (0.15 * n.double()).round().long().clamp(min=1)
    covered = ((labels != IGNORE) & (word_ids >= 0)).sum(1)
    assert bool((covered <= budget).all()), "more tokens selected than the budget"
    # the selection only stops at a word that no longer fits
    unselected = table[table[:, 2] == 0]
    longest_left = torch.zeros(ids.shape[0], dtype=torch.long).scatter_reduce(
        0, unselected[:, 0], unselected[:, 1], reduce="amax")
    all_taken = torch.bincount(unselected[:, 0], minlength=ids.shape[0]) == 0
    assert bool((all_taken | (longest_left > budget - covered)).all()), "stopped while a word still fitted"


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="of the selected words, about 80% should show [MASK] on all pieces, 10% random "
                            "pieces and 10% stay unchanged (and keep their labels)")
def test_word_treatment_shares(student):
    ids, word_ids = make_rows(600, seed=8)
    table = per_word(ids, word_ids, *call_wwm(student, ids, word_ids, seed=8))
    selected = table[table[:, 2] > 0]
    total = len(selected)
    masked = int((selected[:, 3] == selected[:, 1]).sum())
    kept = int((selected[:, 4] == selected[:, 1]).sum())
    random = total - masked - kept
    assert total > 0
    assert rate_ok(masked, total, 0.8), (masked, total)
    assert rate_ok(random, total, 0.1, slack=1e-3), (random, total)
    assert rate_ok(kept, total, 0.1, slack=1e-3), (kept, total)


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="a random replacement must never be a special token (special_ids need not be "
                            "contiguous ids)")
def test_random_replacements_are_never_special(student):
    ids, word_ids = make_rows(300, seed=9, vocab=120)
    inputs, _ = call_wwm(student, ids, word_ids, seed=9, vocab_size=120, mask_prob=0.0, random_prob=1.0)
    replaced = (word_ids >= 0) & (inputs != ids)
    assert int(replaced.sum()) > 0
    drawn = inputs[replaced]
    assert not bool(sum((drawn == s) for s in SPECIAL).bool().any())
    assert bool(((drawn >= 0) & (drawn < 120)).all())


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="every call must draw a new selection from the generator it is given")
def test_new_mask_on_each_call(student):
    ids, word_ids = make_rows(64, seed=10)
    generator = student.generator(10)
    _, first = call_wwm(student, ids, word_ids, generator=generator)
    _, second = call_wwm(student, ids, word_ids, generator=generator)
    assert not torch.equal(first != IGNORE, second != IGNORE)


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="take every random draw from the `generator` argument, so that a seed reproduces "
                            "the masking")
def test_same_seed_same_mask(student):
    ids, word_ids = make_rows(64, seed=11)
    first = call_wwm(student, ids, word_ids, seed=11)
    second = call_wwm(student, ids, word_ids, seed=11)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="use the select_prob, mask_prob and random_prob arguments instead of fixed numbers")
def test_probabilities_are_arguments(student):
    ids, word_ids = make_rows(600, seed=12)
    inputs, labels = call_wwm(student, ids, word_ids, seed=12, select_prob=0.3, mask_prob=0.5, random_prob=0.3)
    n = (word_ids >= 0).sum(1)
    covered = ((labels != IGNORE) & (word_ids >= 0)).sum(1)
    assert bool((covered <= (0.3 * n.double()).round().long()).all())
    assert int(covered.sum()) >= 0.25 * int(n.sum())
    selected = per_word(ids, word_ids, inputs, labels)
    selected = selected[selected[:, 2] > 0]
    masked = int((selected[:, 3] == selected[:, 1]).sum())
    assert rate_ok(masked, len(selected), 0.5), (masked, len(selected))
