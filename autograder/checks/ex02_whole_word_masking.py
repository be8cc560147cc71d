"""Hidden checks of ex02-whole-word-masking: the student's `whole_word_mask`.

The rule the exercise states, per row with n non-special tokens: budget k = max(1, round(select_prob * n));
words are taken in a uniformly random order while the covered total stays <= k (stopping at the first
word that does not fit, or skipping it and trying the next: both are accepted); every piece of a taken
word is labelled; each taken word gets ONE 80/10/10 decision for all its pieces; a random word gets an
id drawn uniformly from the allowed ids for each piece.

The checks are properties that every correct implementation satisfies whatever the order of its random
draws; rates use exact binomial ranges with tails < 1e-8 and fixed seeds (`_common`). The test rows have
n in {60, 80, 100, 120}, so k is an integer without rounding ties, and every word (1-4 pieces) fits the
budget; a few rows of 3 one-piece words test the minimum budget of 1. Each check is built so that other
mistakes do not trip it (autograder/README.md lists which check covers which stated property), and a side
condition (types, inputs untouched, seeds) is credited only for a function that masks at all.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _common import (
    CLS,
    DEFAULTS,
    IGNORE,
    MASK,
    PAD,
    SEP,
    SMALL_VOCAB,
    TAIL,
    VOCAB,
    allowed_ids,
    assert_inputs_not_modified,
    assert_mask_and_special_ids_are_arguments,
    assert_masking,
    assert_no_special_replacements,
    assert_specials_untouched,
    assert_two_int64_tensors,
    assert_uniform_replacements,
    binomial_range,
    call_masking,
    call_with_own_defaults,
    hoeffding_margin,
    kept_share_ok,
    mask_share_ok,
    percent,
    random_share_ok,
    unpack,
)

LONGEST_WORD = 4


def make_rows(rows: int, seed: int, vocab: int = VOCAB, max_pieces: int = LONGEST_WORD,
              sizes: tuple[int, ...] = (60, 80, 100, 120)) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] pieces [SEP] [PAD]...: words of 1-max_pieces pieces, n in `sizes` non-special tokens."""
    rng = np.random.default_rng(seed)
    width = max(sizes) + 2
    ids = np.full((rows, width), PAD, dtype=np.int64)
    word_ids = np.full((rows, width), -1, dtype=np.int64)
    for row in range(rows):
        n = int(rng.choice(sizes))
        lengths = rng.integers(1, max_pieces + 1, size=n)
        words = np.repeat(np.arange(n), lengths)[:n]  # the last word is cut to make exactly n pieces
        ids[row, 0] = CLS
        ids[row, 1:n + 1] = rng.integers(MASK + 1, vocab, size=n)
        ids[row, n + 1] = SEP
        word_ids[row, 1:n + 1] = words
    return torch.from_numpy(ids), torch.from_numpy(word_ids)


def call_wwm(student, ids, word_ids, **options):
    """(inputs, labels) of the student's whole_word_mask (options: seed, generator, vocab_size, probabilities)."""
    return call_masking(student, "whole_word_mask", ids, word_ids, **options)


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


def budgets(word_ids: torch.Tensor, select_prob: float) -> torch.Tensor:
    n = (word_ids >= 0).sum(1)
    return (select_prob * n.double()).round().long().clamp(min=1)


def treatments(ids, word_ids, inputs, labels) -> dict[str, int]:
    """Selected words (any piece labelled): all [MASK], all unchanged, and the others (random)."""
    table = per_word(ids, word_ids, inputs, labels)
    selected = table[table[:, 2] > 0]
    masked = int((selected[:, 3] == selected[:, 1]).sum())
    kept = int((selected[:, 4] == selected[:, 1]).sum())
    return {"selected": len(selected), "masked": masked, "kept": kept, "random": len(selected) - masked - kept}


def shown(c: dict[str, int]) -> str:
    return (f"of {c['selected']} selected words, {c['masked']} show [MASK] ({percent(c['masked'], c['selected'])}), "
            f"{c['random']} random ids ({percent(c['random'], c['selected'])}), {c['kept']} their own ids "
            f"({percent(c['kept'], c['selected'])})")


def coverage_ok(word_ids, labels, select_prob) -> bool:
    """Every row covers between k - (LONGEST_WORD - 1) and k tokens: after a correct selection, the word
    that ended it (or every word left) is longer than what is left of the budget."""
    covered = ((labels != IGNORE) & (word_ids >= 0)).sum(1)
    k = budgets(word_ids, select_prob)
    return bool(((covered <= k) & (covered >= k - (LONGEST_WORD - 1))).all())


# ----------------------------------------------------------------------------- checks


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="whole_word_mask must return (inputs, labels): two int64 tensors shaped like input_ids")
def test_returns_two_integer_tensors(student):
    ids, word_ids = make_rows(8, seed=1)
    result = call_with_own_defaults(student, "whole_word_mask", ids, word_ids, seed=1)
    assert_masking(ids, word_ids >= 0, *unpack(result, "whole_word_mask", ids.shape))
    assert_two_int64_tensors(result)


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="whole_word_mask must not change the tensors it is given: the masked batch is a new "
                            "tensor; credited once it masks")
def test_input_tensors_not_modified(student):
    ids, word_ids = make_rows(64, seed=2)
    assert_inputs_not_modified(student, "whole_word_mask", ids, word_ids, word_ids >= 0, "word_ids")


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="positions with word id -1 ([CLS], [SEP], padding) must never be selected or changed")
def test_special_positions_never_selected(student):
    ids, word_ids = make_rows(300, seed=3)
    inputs, labels = call_wwm(student, ids, word_ids, seed=3)
    assert_specials_untouched(ids, word_ids < 0, inputs, labels, "positions with word id -1")


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="labels must hold the original id at every piece of a selected word (whatever it "
                            "shows) and -100 everywhere else, and a piece labelled -100 shows its original id")
def test_labels_hold_original_ids(student):
    ids, word_ids = make_rows(300, seed=4)
    inputs, labels = call_wwm(student, ids, word_ids, seed=4)
    assert_masking(ids, word_ids >= 0, inputs, labels)
    labelled = labels != IGNORE
    wrong = int((labels[labelled] != ids[labelled]).sum())
    assert wrong == 0, f"{wrong} of {int(labelled.sum())} labels differ from the original id (e.g. hold what is shown)"
    unlabelled_changes = int((~labelled & (inputs != ids)).sum())
    assert unlabelled_changes == 0, f"{unlabelled_changes} changed positions have label -100"


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="a word must be selected as a whole: all of its pieces or none of them")
def test_words_are_never_split(student):
    ids, word_ids = make_rows(300, seed=5)
    inputs, labels = call_wwm(student, ids, word_ids, seed=5)
    assert_masking(ids, word_ids >= 0, inputs, labels)
    table = per_word(ids, word_ids, inputs, labels)
    pieces, labelled = table[:, 1], table[:, 2]
    split = int(((labelled > 0) & (labelled < pieces)).sum())
    assert split == 0, f"{split} of {int((labelled > 0).sum())} selected words have some pieces left unlabelled"


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="take ONE [MASK]/random/keep decision per selected word and apply it to all its pieces")
def test_one_decision_per_word(student):
    ids, word_ids = make_rows(600, seed=6)
    inputs, labels = call_wwm(student, ids, word_ids, seed=6)
    assert_masking(ids, word_ids >= 0, inputs, labels)
    table = per_word(ids, word_ids, inputs, labels)
    selected = table[table[:, 2] > 0]
    pieces, masked, unchanged = selected[:, 1], selected[:, 3], selected[:, 4]
    partly_masked = int(((masked > 0) & (masked < pieces)).sum())
    # random words: each piece drawn independently, so a piece equals its original with chance 1/30417;
    # a word mixing unchanged and replaced pieces is then very rare, while per-piece decisions make many
    mixed = int(((masked == 0) & (unchanged > 0) & (unchanged < pieces)).sum())
    assert partly_masked == 0 and mixed <= 3, (
        f"of {len(selected)} selected words, {partly_masked} show [MASK] on some pieces only and {mixed} mix "
        "random and unchanged pieces")


@pytest.mark.check(cell="whole_word_mask_checks", points=3.0,
                   feedback="select whole words until about select_prob of the row's non-special tokens are "
                            "covered: never more than k = max(1, round(select_prob * n)) tokens, and stop only at "
                            "a word that no longer fits")
def test_budget_per_row(student):
    # every selected word shows [MASK]: what is selected does not depend on how the 80/10/10 split is labelled
    probs = {"mask_prob": 1.0, "random_prob": 0.0}
    ids, word_ids = make_rows(300, seed=7)
    inputs, labels = call_wwm(student, ids, word_ids, seed=7, **probs)
    table = per_word(ids, word_ids, inputs, labels)
    budget = budgets(word_ids, 0.15)
    covered = ((labels != IGNORE) & (word_ids >= 0)).sum(1)
    over = int((covered > budget).sum())
    assert over == 0, f"{over} of {len(budget)} rows select more tokens than their budget"
    # the selection only stops at a word that no longer fits
    unselected = table[table[:, 2] == 0]
    longest_left = torch.zeros(ids.shape[0], dtype=torch.long).scatter_reduce(
        0, unselected[:, 0], unselected[:, 1], reduce="amax")
    all_taken = torch.bincount(unselected[:, 0], minlength=ids.shape[0]) == 0
    early = int((~all_taken & (longest_left <= budget - covered)).sum())
    assert early == 0, (
        f"{early} of {len(budget)} rows stopped while every word left still fitted (covered "
        f"{int(covered.sum())} of {int(budget.sum())} budgeted tokens)")
    # rows of three one-piece words: round(0.15 * 3) = 0, so the budget is its minimum, 1
    ids, word_ids = make_rows(20, seed=17, max_pieces=1, sizes=(3,))
    _, labels = call_wwm(student, ids, word_ids, seed=17, **probs)
    covered = ((labels != IGNORE) & (word_ids >= 0)).sum(1)
    assert bool((covered == 1).all()), (
        f"rows of 3 tokens (budget max(1, round(0.45)) = 1) selected {sorted(set(covered.tolist()))} tokens")


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="go through the words in a uniformly random order (every order equally likely), not in the "
                            "order of the row or in one contiguous span")
def test_words_taken_in_random_order(student):
    # one-piece words: given the number t a row selects, a uniform order makes the selected words a uniform
    # subset of size t, whatever the budget rule. Two sums over rows then have known means and bounded
    # ranges (Hoeffding): words selected in the first half of the row, and selected neighbours.
    ids, word_ids = make_rows(300, seed=15, max_pieces=1, sizes=(60,))
    inputs, labels = call_wwm(student, ids, word_ids, seed=15)
    assert_masking(ids, word_ids >= 0, inputs, labels)
    picked = (labels != IGNORE) & (word_ids >= 0)
    n = (word_ids >= 0).sum(1).double()
    t = picked.sum(1).double()
    first_half = (picked & (word_ids < (n // 2).unsqueeze(1))).sum(1).double()
    neighbours = (picked[:, 1:] & picked[:, :-1]).sum(1).double()
    half_mean = (t * (n // 2) / n).sum()
    pair_mean = (t * (t - 1) / n).sum()
    half_margin = hoeffding_margin(t, TAIL / 2)
    pair_margin = hoeffding_margin((t - 1).clamp(min=0), TAIL)
    assert abs(float(first_half.sum() - half_mean)) <= half_margin, (
        f"{int(first_half.sum())} of the {int(t.sum())} selected words lie in the first half of their row")
    assert float(neighbours.sum() - pair_mean) <= pair_margin, (
        f"{int(neighbours.sum())} pairs of neighbouring words were both selected, of {int(t.sum())} selected words")


@pytest.mark.check(cell="whole_word_mask_checks", points=2.0,
                   feedback="of the selected words, about mask_prob (80%) should show [MASK] on all pieces, "
                            "random_prob (10%) random pieces and the rest (10%) stay unchanged with their labels")
def test_word_treatment_shares(student):
    ids, word_ids = make_rows(600, seed=8)
    c = treatments(ids, word_ids, *call_wwm(student, ids, word_ids, seed=8))
    assert c["selected"] > 0, "no position was selected at all"
    note = "; no word that shows its own ids carries labels" if c["kept"] == 0 else ""
    assert mask_share_ok(c, DEFAULTS) and random_share_ok(c, DEFAULTS) and kept_share_ok(c, DEFAULTS), shown(c) + note


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="random replacements (random_prob of the selected words) must never be special "
                            "tokens (special_ids need not be contiguous ids)")
def test_random_replacements_are_never_special(student):
    # the default probabilities (so that a mistake with them does not matter) and a small vocabulary, so that
    # a draw over all ids (or over ids from len(special_ids) on) hits [PAD], [UNK], [CLS] or [SEP] often
    ids, word_ids = make_rows(1200, seed=9, vocab=SMALL_VOCAB)
    inputs, _ = call_wwm(student, ids, word_ids, seed=9, vocab_size=SMALL_VOCAB)
    assert_no_special_replacements(ids, word_ids >= 0, inputs)


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="a random word gets, for each of its pieces, an id drawn uniformly from every id in "
                            "range(vocab_size) that is not special (not from the batch's tokens, not one id per word)")
def test_random_replacements_are_uniform(student):
    # as in ex01: given that a piece shows a random id other than its original, the id is uniform over the
    # 114 other allowed ids; and the first two pieces of a word are drawn independently, so they are equal
    # with chance <= 1/114 (disjoint pairs, so a binomial bound holds).
    ids, word_ids = make_rows(300, seed=16, vocab=SMALL_VOCAB)
    inputs, _ = call_wwm(student, ids, word_ids, seed=16, vocab_size=SMALL_VOCAB,
                         select_prob=0.5, mask_prob=0.0, random_prob=1.0)
    trial = assert_uniform_replacements(ids, word_ids >= 0, inputs, SMALL_VOCAB)
    allowed = allowed_ids(SMALL_VOCAB)
    # first and second piece of each word, both replaced
    first = (word_ids >= 0) & (word_ids != torch.nn.functional.pad(word_ids[:, :-1], (1, 0), value=-1))
    second = torch.nn.functional.pad(first[:, :-1], (1, 0), value=False) & (
        word_ids == torch.nn.functional.pad(word_ids[:, :-1], (1, 0), value=-1))
    pair = second & trial & torch.nn.functional.pad(trial[:, :-1], (1, 0), value=False)
    same = int((inputs[pair] == torch.nn.functional.pad(inputs[:, :-1], (1, 0))[pair]).sum())
    _, hi = binomial_range(int(pair.sum()), 1.0 / (len(allowed) - 1))
    assert same <= hi, f"in {same} of {int(pair.sum())} random words, the first two pieces got the same id"


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="every call must draw a new selection from the generator it is given; credited once "
                            "it masks")
def test_new_mask_on_each_call(student):
    ids, word_ids = make_rows(64, seed=10)
    generator = student.generator(10)
    inputs, first = call_wwm(student, ids, word_ids, generator=generator)
    assert_masking(ids, word_ids >= 0, inputs, first)
    _, second = call_wwm(student, ids, word_ids, generator=generator)
    assert not torch.equal(first != IGNORE, second != IGNORE), "two calls with one generator selected the same words"


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="take every random draw from the `generator` argument, so that a seed reproduces "
                            "the masking; credited once it masks")
def test_same_seed_same_mask(student):
    ids, word_ids = make_rows(64, seed=11)
    first = call_wwm(student, ids, word_ids, seed=11)
    assert_masking(ids, word_ids >= 0, *first)
    second = call_wwm(student, ids, word_ids, seed=11)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]), (
        "two generators with the same seed gave different results")


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="use the select_prob, mask_prob and random_prob arguments instead of fixed numbers")
def test_probabilities_are_arguments(student):
    # a property right at the default probabilities must follow the arguments; one wrong already at the
    # defaults is the failure of its own check, not a sign of fixed numbers
    other = {"select_prob": 0.3, "mask_prob": 0.5, "random_prob": 0.3}
    ids, word_ids = make_rows(600, seed=12)
    inputs, labels = call_wwm(student, ids, word_ids, seed=12)
    assert_masking(ids, word_ids >= 0, inputs, labels)
    inputs_other, labels_other = call_wwm(student, ids, word_ids, seed=13, **other)
    at_default = treatments(ids, word_ids, inputs, labels)
    at_other = treatments(ids, word_ids, inputs_other, labels_other)
    ignored = []
    if coverage_ok(word_ids, labels, DEFAULTS["select_prob"]) and not coverage_ok(word_ids, labels_other,
                                                                                  other["select_prob"]):
        ignored.append("select_prob")
    ignored += [name for name, ok in (("mask_prob", mask_share_ok), ("random_prob", random_share_ok))
                if ok(at_default, DEFAULTS) and not ok(at_other, other)]
    covered = int(((labels_other != IGNORE) & (word_ids >= 0)).sum())
    assert not ignored, (
        f"with {', '.join(f'{k}={v}' for k, v in other.items())}, the result does not follow {' and '.join(ignored)}: "
        f"{covered} of {int((word_ids >= 0).sum())} tokens covered, {shown(at_other)}")


@pytest.mark.check(cell="whole_word_mask_checks", points=1.0,
                   feedback="use the mask_token_id and special_ids arguments, not bert-base-uncased's ids: another "
                            "tokenizer has another [MASK] and other specials; credited once it masks")
def test_mask_token_id_and_special_ids_are_arguments(student):
    ids, word_ids = make_rows(400, seed=17, vocab=SMALL_VOCAB)
    assert_mask_and_special_ids_are_arguments(student, "whole_word_mask", ids, word_ids, word_ids >= 0)
