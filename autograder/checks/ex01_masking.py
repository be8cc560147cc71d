"""Hidden checks of ex01-masking: the student's `mask_tokens`, `mlm_loss` and four concept answers.

Every check is a property that holds for EVERY correct implementation, whatever the order of its random
draws (threshold on torch.rand, torch.bernoulli, exact counts with randperm, at-least-one-per-row...):
- exact properties (specials untouched, labels = original ids, no special random ids) on every position;
- rates tested against exact binomial acceptance ranges whose tails are < 1e-8 each, so that a correct
  implementation fails with probability < 1e-6 over all checks together, with fixed seeds (the grading
  is deterministic). The batches are large enough that each targeted mistake lands far outside.
"""

from __future__ import annotations

import math

import pytest
import torch

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103  # bert-base-uncased's ids: the specials are not contiguous
SPECIAL = [PAD, UNK, CLS, SEP, MASK]
VOCAB = 30_522
IGNORE = -100
TAIL = 1e-8  # per side, per rate


# ----------------------------------------------------------------------------- helpers


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


def make_batch(rows: int, seed: int, vocab: int = VOCAB) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] w ... w [SEP] [PAD] ... rows of 100-128 tokens, and the special-tokens mask (bool)."""
    g = torch.Generator().manual_seed(seed)
    length = 128
    ids = torch.randint(MASK + 1, vocab, (rows, length), generator=g)
    if vocab > MASK + 1:  # a few [UNK]s inside the text, as real tokenizers produce
        ids[torch.rand(rows, length, generator=g) < 0.01] = UNK
    lengths = torch.randint(100, length + 1, (rows,), generator=g)
    ids[torch.arange(length) >= lengths[:, None]] = PAD
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    special = (ids == PAD) | (ids == CLS) | (ids == SEP) | (ids == UNK)
    return ids, special


def call_mask_tokens(student, ids, special, seed=0, generator=None, **probs):
    probs = {"select_prob": 0.15, "mask_prob": 0.8, "random_prob": 0.1, **probs}
    result = student.call(
        "mask_tokens", ids, special, mask_token_id=MASK, vocab_size=probs.pop("vocab_size", VOCAB),
        special_ids=SPECIAL, generator=generator if generator is not None else student.generator(seed), **probs,
    )
    assert isinstance(result, (tuple, list)) and len(result) == 2, "mask_tokens must return (inputs, labels)"
    inputs, labels = result
    assert isinstance(inputs, torch.Tensor) and isinstance(labels, torch.Tensor), "returns two tensors"
    assert inputs.shape == ids.shape and labels.shape == ids.shape, "shapes differ from input_ids"
    return inputs.long(), labels.long()


def outcome(ids, special, inputs, labels):
    """Counts over the non-special positions: eligible, selected, [MASK], random, kept."""
    eligible = ~special
    selected = eligible & (labels != IGNORE)
    masked = selected & (inputs == MASK)
    random = selected & (inputs != MASK) & (inputs != ids)
    kept = selected & (inputs == ids)
    return {name: int(t.sum()) for name, t in
            dict(eligible=eligible, selected=selected, masked=masked, random=random, kept=kept).items()}


# ----------------------------------------------------------------------------- mask_tokens


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="mask_tokens must return (inputs, labels): two int64 tensors shaped like input_ids")
def test_returns_two_integer_tensors(student):
    ids, special = make_batch(8, seed=1)
    inputs, labels = student.call("mask_tokens", ids, special, mask_token_id=MASK, vocab_size=VOCAB,
                                  special_ids=SPECIAL, generator=student.generator(1))
    assert inputs.shape == labels.shape == ids.shape
    assert inputs.dtype == torch.long and labels.dtype == torch.long


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="mask_tokens changed the tensors it was given; build new tensors (clone) instead")
def test_input_tensors_not_modified(student):
    ids, special = make_batch(64, seed=2)
    ids_handle, special_handle = student.put(ids), student.put(special)
    student.call("mask_tokens", ids_handle, special_handle, mask_token_id=MASK, vocab_size=VOCAB,
                 special_ids=SPECIAL, generator=student.generator(2))
    assert torch.equal(student.get(ids_handle), ids)
    assert torch.equal(student.get(special_handle), special)


@pytest.mark.check(cell="mask_tokens_checks", points=2.0,
                   feedback="[CLS], [SEP] and padding (the special-tokens mask) must never be selected or changed")
def test_special_positions_never_selected(student):
    ids, special = make_batch(256, seed=3)
    inputs, labels = call_mask_tokens(student, ids, special, seed=3)
    assert bool((labels[special] == IGNORE).all())
    assert torch.equal(inputs[special], ids[special])


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="labels must hold the original id at selected positions and -100 at every other one")
def test_labels_hold_original_ids_at_selected_positions_only(student):
    ids, special = make_batch(256, seed=4)
    inputs, labels = call_mask_tokens(student, ids, special, seed=4)
    labelled = labels != IGNORE
    assert torch.equal(labels[labelled], ids[labelled]), "a label differs from the original id"
    assert bool(labelled[inputs != ids].all()), "a changed position has no label"
    # unselected positions: of the positions shown unchanged, only the ~10% 'kept' share of the selected
    # ones may carry a label, i.e. ~0.015 / 0.865 = 1.7%; labelling everything gives 100%
    unchanged = ~special & (inputs == ids)
    assert int((labelled & unchanged).sum()) <= 0.05 * int(unchanged.sum())


@pytest.mark.check(cell="mask_tokens_checks", points=2.0,
                   feedback="about select_prob of the non-special positions should be selected for prediction")
def test_selection_rate(student):
    ids, special = make_batch(512, seed=5)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=5))
    assert rate_ok(c["selected"], c["eligible"], 0.15), c


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="about mask_prob (80%) of the selected positions should show [MASK], not all of them")
def test_mask_share(student):
    ids, special = make_batch(512, seed=6)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=6))
    assert c["selected"] > 0 and rate_ok(c["masked"], c["selected"], 0.8), c


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="about random_prob (10%) of ALL selected positions should get a random token; "
                            "mind the conditional probability once [MASK] is decided")
def test_random_share(student):
    ids, special = make_batch(512, seed=7)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=7))
    assert c["selected"] > 0 and rate_ok(c["random"], c["selected"], 0.1, slack=1e-3), c


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="the ~10% of selected positions that keep their token still need their label")
def test_kept_share(student):
    ids, special = make_batch(512, seed=8)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=8))
    assert c["selected"] > 0 and rate_ok(c["kept"], c["selected"], 0.1, slack=1e-3), c


@pytest.mark.check(cell="mask_tokens_checks", points=2.0,
                   feedback="a random replacement must never be a special token (special_ids need not be "
                            "contiguous ids)")
def test_random_replacements_are_never_special(student):
    # a small vocabulary, so that a draw over all ids hits one of the 5 specials often
    for vocab, seed in ((120, 9), (VOCAB, 10)):
        ids, special = make_batch(256, seed=seed, vocab=vocab)
        inputs, labels = call_mask_tokens(student, ids, special, seed=seed, vocab_size=vocab,
                                          select_prob=0.5, mask_prob=0.0, random_prob=1.0)
        replaced = ~special & (inputs != ids)
        assert int(replaced.sum()) > 0
        drawn = inputs[replaced]
        assert not bool(sum((drawn == s) for s in SPECIAL).bool().any())
        assert bool(((drawn >= 0) & (drawn < vocab)).all())


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="use the select_prob, mask_prob and random_prob arguments instead of fixed numbers")
def test_probabilities_are_arguments(student):
    ids, special = make_batch(512, seed=11)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=11,
                                                select_prob=0.4, mask_prob=0.5, random_prob=0.3))
    assert rate_ok(c["selected"], c["eligible"], 0.4), c
    assert rate_ok(c["masked"], c["selected"], 0.5), c
    assert rate_ok(c["random"], c["selected"], 0.3, slack=1e-3), c


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="every call must draw a new mask from the generator it is given (dynamic masking)")
def test_new_mask_on_each_call(student):
    ids, special = make_batch(64, seed=12)
    generator = student.generator(12)
    _, first = call_mask_tokens(student, ids, special, generator=generator)
    _, second = call_mask_tokens(student, ids, special, generator=generator)
    assert not torch.equal(first != IGNORE, second != IGNORE)


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="take every random draw from the `generator` argument, so that a seed reproduces "
                            "the masking")
def test_same_seed_same_mask(student):
    ids, special = make_batch(64, seed=13)
    first = call_mask_tokens(student, ids, special, seed=13)
    second = call_mask_tokens(student, ids, special, seed=13)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


# ----------------------------------------------------------------------------- mlm_loss


def loss_case(seed: int):
    """Logits that are confident and right at unselected positions and wrong at selected ones, with
    rows holding very different numbers of selected positions: every wrong averaging is far off."""
    g = torch.Generator().manual_seed(seed)
    rows, length, vocab = 6, 20, 50
    targets = torch.randint(0, vocab, (rows, length), generator=g)
    logits = torch.randn(rows, length, vocab, generator=g)
    logits.scatter_(2, targets.unsqueeze(2), 8.0)  # easy at every position
    labels = torch.full((rows, length), IGNORE)
    counts = [1, 2, 3, 6, 12, 0]
    for row, count in enumerate(counts):
        positions = torch.randperm(length, generator=g)[:count]
        wrong = (targets[row, positions] + 1 + torch.randint(0, vocab - 1, (count,), generator=g)) % vocab
        labels[row, positions] = wrong  # the logits favour another id: a high loss there
    log_probs = logits.log_softmax(-1)
    picked = labels != IGNORE
    expected = -log_probs[picked].gather(1, labels[picked].unsqueeze(1)).mean()
    return logits, labels, expected


def call_loss(student, logits, labels) -> float:
    value = student.call("mlm_loss", logits, labels)
    if isinstance(value, torch.Tensor):
        assert value.numel() == 1, "mlm_loss must return a single number (a 0-dim tensor)"
        value = float(value.reshape(()))
    return float(value)


@pytest.mark.check(cell="mlm_loss_checks", points=2.0,
                   feedback="the MLM loss is the mean cross-entropy over the selected positions only "
                            "(labels != -100), not over all positions")
def test_loss_is_mean_over_selected_positions(student):
    for seed in (21, 22):
        logits, labels, expected = loss_case(seed)
        assert call_loss(student, logits, labels) == pytest.approx(float(expected), rel=1e-4)


@pytest.mark.check(cell="mlm_loss_checks", points=1.0,
                   feedback="average over all selected positions of the batch together, not per sequence "
                            "first (and a sequence without selected positions adds nothing)")
def test_loss_weights_every_selected_position_equally(student):
    logits, labels, expected = loss_case(23)
    per_row = [labels[r] != IGNORE for r in range(labels.shape[0])]
    assert any(m.sum() == 0 for m in per_row)
    assert call_loss(student, logits, labels) == pytest.approx(float(expected), rel=1e-4)
    # and only the selected positions' logits matter
    other = logits.clone()
    other[labels == IGNORE] = torch.randn_like(other[labels == IGNORE]) * 5
    assert call_loss(student, other, labels) == pytest.approx(float(expected), rel=1e-4)


# ----------------------------------------------------------------------------- concept questions


def answer(student, name: str) -> str:
    value = student.value(name)
    assert isinstance(value, str), f"{name} must be a string such as 'a'"
    return value.strip().lower().strip("()")


@pytest.mark.check(cell="concepts_checks", points=1.0,
                   feedback="Q1: revisit which positions the MLM loss is computed on, and why")
def test_q1_loss_positions(student):
    assert answer(student, "answer_q1") == "b"


@pytest.mark.check(cell="concepts_checks", points=1.0,
                   feedback="Q2: revisit what the random and unchanged 10% shares are for")
def test_q2_random_and_unchanged(student):
    assert answer(student, "answer_q2") == "c"


@pytest.mark.check(cell="concepts_checks", points=1.0,
                   feedback="Q3: revisit what RoBERTa's ablations found about next-sentence prediction")
def test_q3_roberta_nsp(student):
    assert answer(student, "answer_q3") == "a"


@pytest.mark.check(cell="concepts_checks", points=1.0,
                   feedback="Q4: revisit why adding the token, position and segment embeddings loses nothing")
def test_q4_summed_embeddings(student):
    assert answer(student, "answer_q4") == "d"
