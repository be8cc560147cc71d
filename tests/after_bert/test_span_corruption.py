"""Span corruption (bertcourse.after_bert.span_corruption): T5's noise mask (counts as in transformers'
run_t5_mlm_flax.py, span lengths a uniform composition), its sentinel inputs and targets (the T5 paper's
example, round trip), and SpanBERT's clipped-geometric whole-word spans."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from stats_support import plausible

from bertcourse.after_bert.span_corruption import (
    clipped_geometric_probs,
    geometric_span_mask,
    noise_counts,
    random_segmentation,
    random_spans_noise_mask,
    span_runs,
    t5_span_corrupt,
)


def hf_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """The counts of transformers' FlaxDataCollatorForT5MLM.random_spans_noise_mask (numpy's rounding)."""
    num_noise = int(np.round(length * noise_density))
    num_noise = min(max(num_noise, 1), length - 1)
    return num_noise, max(int(np.round(num_noise / mean_noise_span_length)), 1)


def runs_of(mask: torch.Tensor, value: bool) -> list[int]:
    """Lengths of the maximal runs of `value` in `mask`."""
    return [end - start for start, end in span_runs([bool(x) == value for x in mask.tolist()])]


@pytest.mark.parametrize("length", [2, 5, 10, 17, 33, 64, 100, 128, 512])
@pytest.mark.parametrize("density, mean", [(0.15, 3.0), (0.5, 2.0), (0.3, 8.0)])
def test_noise_mask_counts_match_transformers(length, density, mean):
    expected_noise, expected_spans = hf_counts(length, density, mean)
    expected_spans = min(expected_spans, expected_noise, length - expected_noise)  # transformers breaks beyond
    assert noise_counts(length, density, mean) == (expected_noise, expected_spans)
    for seed in range(5):
        mask = random_spans_noise_mask(length, density, mean, torch.Generator().manual_seed(seed))
        assert mask.dtype == torch.bool and mask.shape == (length,)
        assert int(mask.sum()) == expected_noise
        assert len(runs_of(mask, True)) == expected_spans == len(runs_of(mask, False))
        assert not mask[0] and mask[-1]  # starts with non-noise, alternates, so ends with noise


def test_noise_mask_density_and_mean_span_length_on_long_sequences():
    masks = [random_spans_noise_mask(512, 0.15, 3.0, torch.Generator().manual_seed(s)) for s in range(20)]
    spans = [n for mask in masks for n in runs_of(mask, True)]
    assert all(int(mask.sum()) == 77 for mask in masks)  # round(512 * 0.15): density 0.150
    assert len(spans) == 20 * 26 and abs(sum(spans) / len(spans) - 77 / 26) < 1e-12  # mean 2.96, ~3


def composition_marginal(items: int, segments: int, length: int) -> float:
    """P(one given part = length) for a uniformly random composition of `items` into `segments` parts."""
    if segments == 1:
        return float(length == items)
    return math.comb(items - length - 1, segments - 2) / math.comb(items - 1, segments - 1)


def test_span_lengths_are_a_uniform_composition_whichever_span():
    """Each of the 5 noise spans of a 100-token mask (15 noise tokens) and each of the 5 non-noise spans has
    the marginal of a uniform composition; span k of mask m is looked at for k = m mod 5, so draws are
    independent and counts binomial."""
    trials = 1500
    found = {True: [0] * 90, False: [0] * 90}
    for m in range(trials):
        mask = random_spans_noise_mask(100, 0.15, 3.0, torch.Generator().manual_seed(1000 + m))
        for kind in (True, False):
            found[kind][runs_of(mask, kind)[m % 5]] += 1
    for kind, items in ((True, 15), (False, 85)):
        for length in range(1, items - 3):
            p = composition_marginal(items, 5, length)
            assert plausible(found[kind][length], trials, p, tail=1e-10), (kind, length, found[kind][length])


def test_random_segmentation_sums_and_refuses_impossible_cuts():
    g = torch.Generator().manual_seed(0)
    for items, segments in [(1, 1), (7, 7), (20, 3)]:
        parts = random_segmentation(items, segments, g)
        assert len(parts) == segments and int(parts.sum()) == items and bool((parts > 0).all())
    with pytest.raises(ValueError, match="cannot cut"):
        random_segmentation(3, 4, g)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        random_spans_noise_mask(1, 0.15, 3.0, g)


PAPER = "Thank you for inviting me to your party last week .".split()
X, Y, Z = 900, 901, 902


def test_t5_span_corrupt_reproduces_the_papers_example():
    vocab = {word: i for i, word in enumerate(dict.fromkeys(PAPER))}
    tokens = [vocab[w] for w in PAPER]
    noise = [w in ("for", "inviting", "last") for w in PAPER]
    inputs, targets = t5_span_corrupt(tokens, noise, [X, Y, Z, 903])
    words = {i: w for w, i in vocab.items()} | {X: "<X>", Y: "<Y>", Z: "<Z>"}
    assert " ".join(words[i] for i in inputs) == "Thank you <X> me to your party <Y> week ."
    assert " ".join(words[i] for i in targets) == "<X> for inviting <Y> last <Z>"


def reconstruct(inputs: list[int], targets: list[int], sentinels: list[int]) -> list[int]:
    """The original sequence from T5's inputs and targets: each sentinel of the inputs replaced by what
    follows that sentinel in the targets, up to the next sentinel."""
    spans, current = {}, None
    for token in targets:
        if token in sentinels:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    out = []
    for token in inputs:
        out.extend(spans[token] if token in sentinels else [token])
    return out


def test_t5_span_corrupt_round_trip_with_sentinels_in_order():
    sentinels = list(range(1000, 1100))
    g = torch.Generator().manual_seed(0)
    for length in (2, 9, 50, 200):
        tokens = torch.randint(0, 500, (length,), generator=g).tolist()
        for noise in (random_spans_noise_mask(length, 0.15, 3.0, g), torch.rand(length, generator=g) < 0.4,
                      torch.ones(length, dtype=torch.bool), torch.zeros(length, dtype=torch.bool)):
            n_spans = len(span_runs(noise))
            inputs, targets = t5_span_corrupt(tokens, noise.tolist(), sentinels)
            assert [t for t in inputs if t in sentinels] == sentinels[:n_spans]  # one per span, in order
            assert [t for t in targets if t in sentinels] == sentinels[: n_spans + 1]  # and a final one
            assert targets[-1] == sentinels[n_spans]
            assert reconstruct(inputs, targets, sentinels) == tokens
            assert len(inputs) == length - int(noise.sum()) + n_spans


def test_t5_span_corrupt_refuses_too_few_sentinels_and_mismatched_masks():
    with pytest.raises(ValueError, match="2 noise spans need 3 sentinel ids"):
        t5_span_corrupt([1, 2, 3, 4], [True, False, True, False], [900, 901])
    with pytest.raises(ValueError, match="noise_mask has 3 entries for 4 tokens"):
        t5_span_corrupt([1, 2, 3, 4], [True, False, True], [900, 901, 902])


def test_clipped_geometric_span_length_mean_is_spanberts():
    probs = clipped_geometric_probs(0.2, 10)
    mean = float((torch.arange(1, 11) * probs).sum())
    assert abs(float(probs.sum()) - 1) < 1e-12 and abs(mean - 3.8) < 0.01  # the SpanBERT paper's 3.8
    assert float(probs[0] / probs[1]) == pytest.approx(1 / 0.8)


def test_geometric_spans_on_one_piece_words_have_the_clipped_geometric_mean():
    word_ids = [None] + list(range(2000)) + [None]
    lengths = []
    for seed in range(15):
        mask = geometric_span_mask(word_ids, generator=torch.Generator().manual_seed(seed))
        assert not mask[0] and not mask[-1]
        assert int(mask.sum()) == 300  # the budget, round(0.15 * 2000), met exactly with one-piece words
        lengths += runs_of(mask[1:-1], True)[:-1]  # the last span may be cut by the budget
    # spans rarely touch in 2,000 words (a touching pair reads as one longer run): the mean stays near 3.8
    assert abs(sum(lengths) / len(lengths) - 3.8) < 0.4, sum(lengths) / len(lengths)
    assert max(lengths) <= 20 and min(lengths) == 1


def test_geometric_spans_take_whole_words_within_the_budget():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        pieces = torch.randint(1, 4, (60,), generator=g).tolist()  # words of 1-3 pieces
        word_ids = [None] + [w for w, n in enumerate(pieces) for _ in range(n)] + [None, None]
        mask = geometric_span_mask(word_ids, budget_fraction=0.15, generator=g)
        budget = round(0.15 * sum(pieces))
        assert budget - 3 < int(mask.sum()) <= budget  # stops only when the next word would overflow
        for w in range(60):
            chosen = {bool(mask[i]) for i, x in enumerate(word_ids) if x == w}
            assert len(chosen) == 1, f"word {w} was split"
        assert not mask[0] and not mask[-1] and not mask[-2]
    tensor_ids = torch.tensor([-1, 0, 0, 1, 2, -1])
    assert geometric_span_mask(tensor_ids, budget_fraction=0.5, generator=g).sum() >= 1
