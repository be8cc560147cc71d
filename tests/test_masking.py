"""The reference masking functions: properties that must hold for every draw, and rates within bounds.

Statistical assertions use fixed seeds and bounds of about 6 standard deviations (failure chance for a
correct implementation < 1e-8), so they cannot flake and still catch a wrong rate by far.
"""

from __future__ import annotations

import math

import pytest
import torch

from bertcourse.masking import (
    IGNORE_INDEX,
    MaskingError,
    MaskingProbs,
    collate_for_mlm,
    count_masking,
    is_special,
    mask_tokens,
    masking_probs,
    mlm_loss,
    pad_batch,
    regular_token_ids,
    whole_word_mask,
    word_ids_tensor,
)

# BERT-base-like special ids, deliberately not contiguous: [PAD] [UNK] [CLS] [SEP] [MASK] = 0 100 101 102 103
PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
SPECIAL = [PAD, UNK, CLS, SEP, MASK]


def within(successes: int, trials: int, p: float, sigmas: float = 6.0) -> bool:
    sd = math.sqrt(trials * p * (1 - p))
    return abs(successes - trials * p) <= sigmas * sd + 1


def make_batch(rows: int = 256, length: int = 128, vocab: int = 30_000, seed: int = 0):
    """[CLS] w ... w [SEP] [PAD]..., with lengths varying so that a quarter of the positions are padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(104, vocab, (rows, length), generator=g)
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=g)
    positions = torch.arange(length)
    ids[positions >= lengths[:, None]] = PAD
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    return ids


def kwargs(vocab: int = 30_000, seed: int = 1, **extra):
    return dict(mask_token_id=MASK, vocab_size=vocab, special_ids=SPECIAL,
                generator=torch.Generator().manual_seed(seed), **extra)


# ----------------------------------------------------------------------------- mask_tokens


def test_mask_tokens_shapes_dtypes_and_label_semantics():
    ids = make_batch()
    before = ids.clone()
    inputs, labels = mask_tokens(ids, **kwargs())
    assert torch.equal(ids, before), "input modified in place"
    assert inputs.shape == labels.shape == ids.shape
    assert inputs.dtype == labels.dtype == torch.long
    selected = labels != IGNORE_INDEX
    assert torch.equal(labels[selected], ids[selected])  # label = original id
    assert torch.equal(inputs[~selected], ids[~selected])  # unselected positions untouched
    assert bool((inputs[selected] != ids[selected]).any())


def test_mask_tokens_never_selects_specials_nor_draws_them():
    ids = make_batch()
    special = is_special(ids, SPECIAL)
    # a tiny vocabulary with specials in the middle: a random draw over the whole vocabulary would hit
    # a special id 5 times in 110
    small = ids % 6 + 104
    small[special] = ids[special]
    for inputs, labels, original in [
        (*mask_tokens(ids, **kwargs()), ids),
        (*mask_tokens(small, **kwargs(vocab=110)), small),
    ]:
        assert not bool((labels[special] != IGNORE_INDEX).any())
        assert torch.equal(inputs[special], original[special])
        changed = (inputs != original) & (inputs != MASK)
        assert not bool(is_special(inputs[changed], SPECIAL).any())
    inputs, labels = mask_tokens(small, **kwargs(vocab=110))
    counts = count_masking(small, inputs, labels, special_ids=SPECIAL, mask_token_id=MASK)
    assert counts.random > 300 and counts.random_special == 0 and counts.special_selected == 0


def test_mask_tokens_special_mask_and_attention_mask_paths_agree_with_ids_path():
    ids = make_batch()
    via_ids = mask_tokens(ids, **kwargs())
    via_mask = mask_tokens(ids, is_special(ids, SPECIAL), **kwargs())
    via_attention = mask_tokens(ids, attention_mask=(ids != PAD).long(), **kwargs())
    for a, b in zip(via_ids, via_mask, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(via_ids, via_attention, strict=True):
        assert torch.equal(a, b)
    # a pad id that is not in special_ids is still excluded by the attention mask
    no_pad_special = {**kwargs(), "special_ids": [CLS, SEP]}
    _, labels = mask_tokens(ids, attention_mask=(ids != PAD).long(), **no_pad_special)
    assert not bool((labels[ids == PAD] != IGNORE_INDEX).any())


def test_mask_tokens_rates_match_the_recipe():
    ids = make_batch(rows=512)
    inputs, labels = mask_tokens(ids, **kwargs())
    c = count_masking(ids, inputs, labels, special_ids=SPECIAL, mask_token_id=MASK)
    assert within(c.selected, c.eligible, 0.15)
    assert within(c.masked, c.selected, 0.8)
    assert within(c.random, c.selected, 0.1)
    assert within(c.kept, c.selected, 0.1)
    # other probabilities are honoured, not hard-coded
    inputs, labels = mask_tokens(ids, **kwargs(select_prob=0.4, mask_prob=0.5, random_prob=0.3))
    c = count_masking(ids, inputs, labels, special_ids=SPECIAL, mask_token_id=MASK)
    assert within(c.selected, c.eligible, 0.4)
    assert within(c.masked, c.selected, 0.5) and within(c.random, c.selected, 0.3)


def test_mask_tokens_is_reproducible_with_a_seed_and_fresh_on_every_call():
    ids = make_batch(rows=32)
    a = mask_tokens(ids, **kwargs(seed=7))
    b = mask_tokens(ids, **kwargs(seed=7))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    g = torch.Generator().manual_seed(7)
    first = mask_tokens(ids, **{**kwargs(), "generator": g})
    second = mask_tokens(ids, **{**kwargs(), "generator": g})
    assert not torch.equal(first[1] != IGNORE_INDEX, second[1] != IGNORE_INDEX)


def test_every_short_sequence_gets_at_least_one_selected_position():
    ids = torch.tensor([[CLS, 200, 201, SEP, PAD, PAD]] * 4000)
    _, labels = mask_tokens(ids, **kwargs())
    per_row = (labels != IGNORE_INDEX).sum(1)
    assert bool((per_row >= 1).all())
    # the forced position is uniform over the two words, and gets the 80/10/10 treatment
    inputs, labels = mask_tokens(ids, **kwargs(seed=3))
    only_one = per_row == 1
    assert within(int((labels[only_one, 1] != IGNORE_INDEX).sum()), int(only_one.sum()), 0.5)
    c = count_masking(ids, inputs, labels, special_ids=SPECIAL, mask_token_id=MASK)
    assert within(c.masked, c.selected, 0.8)
    # without the guarantee, about 0.85^2 = 72% of these rows get nothing
    _, labels = mask_tokens(ids, **kwargs(at_least_one=False))
    assert within(int(((labels != IGNORE_INDEX).sum(1) == 0).sum()), 4000, 0.85**2)
    # an all-special row stays untouched
    inputs, labels = mask_tokens(torch.tensor([[CLS, SEP, PAD]]), **kwargs())
    assert bool((labels == IGNORE_INDEX).all())


def test_bad_inputs_raise_clear_errors():
    ids = make_batch(rows=2)
    with pytest.raises(MaskingError, match="shape"):
        mask_tokens(ids[0], **kwargs())
    with pytest.raises(MaskingError, match="integer"):
        mask_tokens(ids.float(), **kwargs())
    with pytest.raises(MaskingError, match="sum to <= 1"):
        mask_tokens(ids, **kwargs(mask_prob=0.8, random_prob=0.3))
    with pytest.raises(MaskingError, match="special_tokens_mask"):
        mask_tokens(ids, torch.zeros(2, 3, dtype=torch.bool), **kwargs())
    with pytest.raises(MaskingError, match="every id"):
        regular_token_ids(3, [0, 1, 2])


def test_default_probabilities_are_berts_and_course_yml_says_the_same():
    """The functions default to BERT's recipe; the commands pass course.yml's `masking:`. Change both together."""
    from bertcourse.course import load_course

    assert masking_probs() == load_course(check_files=False).masking == MaskingProbs(0.15, 0.8, 0.1)
    assert masking_probs(select_prob=0.3) == MaskingProbs(0.3, 0.8, 0.1)


# ----------------------------------------------------------------------------- mlm_loss


def test_mlm_loss_is_the_mean_over_selected_positions_only():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 11, generator=g, requires_grad=True)
    labels = torch.full((3, 7), IGNORE_INDEX)
    labels[0, 1], labels[0, 4], labels[2, 6] = 3, 5, 10
    loss = mlm_loss(logits, labels)
    log_probs = logits.log_softmax(-1)
    expected = -(log_probs[0, 1, 3] + log_probs[0, 4, 5] + log_probs[2, 6, 10]) / 3
    assert torch.allclose(loss, expected)
    assert not torch.allclose(loss, expected * 3 / 21)  # not the mean over all 21 positions
    loss.backward()
    assert float(logits.grad[1].abs().sum()) == 0.0  # unselected positions get no gradient
    assert torch.allclose(mlm_loss(logits, torch.full((3, 7), IGNORE_INDEX)), torch.tensor(0.0))
    with pytest.raises(MaskingError, match="logits"):
        mlm_loss(logits, labels[:, :3])


# ----------------------------------------------------------------------------- whole-word masking


def make_words(rows: int = 400, words: int = 40, seed: int = 0):
    """Rows of words 1-4 pieces long (ids 104+), with [CLS]/[SEP]/padding and word ids -1 there."""
    g = torch.Generator().manual_seed(seed)
    all_ids, all_words = [], []
    for _ in range(rows):
        lengths = torch.randint(1, 5, (words,), generator=g).tolist()
        word_ids = [None] + [w for w, n in enumerate(lengths) for _ in range(n)] + [None]
        ids = [CLS] + torch.randint(104, 30_000, (sum(lengths),), generator=g).tolist() + [SEP]
        all_ids.append(ids)
        all_words.append(word_ids)
    ids, _ = pad_batch(all_ids, PAD)
    return ids, word_ids_tensor(all_words, ids.shape[1])


def word_outcomes(ids, word_ids, inputs, labels):
    """Per (row, word): (n pieces, n selected, n [MASK], n unchanged)."""
    out = []
    for r in range(ids.shape[0]):
        for w in range(int(word_ids[r].max()) + 1):
            at = word_ids[r] == w
            out.append((int(at.sum()), int((labels[r][at] != IGNORE_INDEX).sum()),
                        int((inputs[r][at] == MASK).sum()), int((inputs[r][at] == ids[r][at]).sum())))
    return out


def test_whole_word_mask_selects_and_treats_words_as_units():
    ids, word_ids = make_words()
    before = ids.clone()
    inputs, labels = whole_word_mask(ids, word_ids, **kwargs())
    assert torch.equal(ids, before)
    assert not bool((labels[word_ids < 0] != IGNORE_INDEX).any())
    assert torch.equal(inputs[word_ids < 0], ids[word_ids < 0])
    outcomes = word_outcomes(ids, word_ids, inputs, labels)
    selected = [o for o in outcomes if o[1]]
    assert all(n == s for n, s, _, _ in selected), "a word was split"
    assert all(m in (0, n) for n, _, m, _ in selected), "a word got [MASK] on some pieces only"
    masked = sum(m == n for n, _, m, _ in selected)
    kept = sum(k == n for n, _, _, k in selected)
    assert within(masked, len(selected), 0.8) and within(kept, len(selected), 0.1)
    changed = (inputs != ids) & (inputs != MASK)
    assert not bool(is_special(inputs[changed], SPECIAL).any())


def test_whole_word_mask_budget_rule():
    ids, word_ids = make_words()
    inputs, labels = whole_word_mask(ids, word_ids, **kwargs())
    for r in range(ids.shape[0]):
        n = int((word_ids[r] >= 0).sum())
        budget = max(1, round(0.15 * n))
        covered = int((labels[r] != IGNORE_INDEX).sum())
        assert covered <= budget
        lengths = torch.bincount(word_ids[r][word_ids[r] >= 0])
        chosen = torch.bincount(word_ids[r][(word_ids[r] >= 0) & (labels[r] != IGNORE_INDEX)],
                                minlength=len(lengths)) > 0
        # Google's rule: the selection ends only when no remaining word fits
        assert bool(chosen.all()) or int(lengths[~chosen].min()) > budget - covered
    budgets = ((word_ids >= 0).sum(1) * 0.15).round().clamp(min=1)
    assert 0.97 * float(budgets.sum()) <= int((labels != IGNORE_INDEX).sum()) <= float(budgets.sum())


def test_whole_word_mask_edge_cases():
    # budget 1 of 4 tokens: the 3-piece word never fits and is skipped; the 1-piece word always fits.
    # Pair inputs, whose word ids restart at 0 after [SEP], stay two separate words.
    ids = torch.tensor([[CLS, 200, 201, 202, SEP, 300, SEP]] * 500)
    word_ids = torch.tensor([[-1, 0, 0, 0, -1, 0, -1]] * 500)
    _, labels = whole_word_mask(ids, word_ids, **kwargs())
    selected = labels != IGNORE_INDEX
    assert not bool(selected[:, 1:4].any()) and bool(selected[:, 5].all())
    # a row whose only word is longer than the budget still gets it, whole
    ids = torch.tensor([[CLS, 200, 201, 202, SEP]] * 100)
    word_ids = torch.tensor([[-1, 0, 0, 0, -1]] * 100)
    _, labels = whole_word_mask(ids, word_ids, **kwargs())
    assert bool((labels[:, 1:4] != IGNORE_INDEX).all())


def test_whole_word_mask_is_reproducible_and_fresh():
    ids, word_ids = make_words(rows=20)
    a = whole_word_mask(ids, word_ids, **kwargs(seed=5))
    b = whole_word_mask(ids, word_ids, **kwargs(seed=5))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    g = torch.Generator().manual_seed(5)
    first = whole_word_mask(ids, word_ids, **{**kwargs(), "generator": g})
    second = whole_word_mask(ids, word_ids, **{**kwargs(), "generator": g})
    assert not torch.equal(first[1], second[1])


# ----------------------------------------------------------------------------- collating and helpers


class FakeTokenizer:
    pad_token_id = PAD
    mask_token_id = MASK
    all_special_ids = SPECIAL

    def __len__(self) -> int:
        return 30_000


def test_pad_batch_and_collate_for_mlm():
    examples = [[CLS, 200, 201, SEP], [CLS, 300, SEP], [CLS] + list(range(400, 420)) + [SEP]]
    ids, attention = pad_batch(examples, PAD, pad_to_multiple_of=8)
    assert ids.shape == (3, 24) and attention.dtype == torch.long
    assert ids[1].tolist()[:4] == [CLS, 300, SEP, PAD] and attention[1].sum() == 3
    batch = collate_for_mlm(examples * 100, FakeTokenizer(), generator=torch.Generator().manual_seed(0))
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].shape == (300, 22)
    assert not bool((batch["labels"][batch["attention_mask"] == 0] != IGNORE_INDEX).any())
    assert bool(((batch["labels"] != IGNORE_INDEX).sum(1) >= 1).all())
    dicts = [{"input_ids": [CLS, 200, 201, 202, SEP], "word_ids": [None, 0, 0, 1, None]}] * 500
    g = torch.Generator().manual_seed(0)
    batch = collate_for_mlm(dicts, FakeTokenizer(), whole_word=True, generator=g)
    selected = batch["labels"] != IGNORE_INDEX
    assert bool((selected[:, 1] == selected[:, 2]).all())
    with pytest.raises(MaskingError, match="word_ids"):
        collate_for_mlm(examples, FakeTokenizer(), whole_word=True)
    with pytest.raises(MaskingError, match="empty"):
        collate_for_mlm([], FakeTokenizer())
