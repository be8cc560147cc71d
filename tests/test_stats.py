"""The statistics `compare` and `labels` report (`bertcourse.stats`), checked against `bertcourse.metrics`: a row
with one seed must get exactly the interval and test distribution that metrics gives one prediction vector."""

from __future__ import annotations

import numpy as np
import pytest

from bertcourse import metrics, stats


def _labels_and_predictions(n: int = 872, accuracy: float = 0.8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    right = rng.random(n) < accuracy
    return labels, np.where(right, labels, 1 - labels)


def test_sentence_resamples_draw_n_sentences_each_and_repeat_with_the_seed():
    counts = stats.sentence_resamples(50, 300, seed=1)
    assert counts.shape == (300, 50) and (counts.sum(1) == 50).all()
    assert (counts >= 0).all() and (counts == 0).any()  # with replacement: some sentences left out
    assert np.array_equal(counts, stats.sentence_resamples(50, 300, seed=1))
    assert not np.array_equal(counts, stats.sentence_resamples(50, 300, seed=2))
    # each sentence is in a resample Binomial(n, 1/n) times: mean 1
    assert counts.mean() == pytest.approx(1.0)


def test_one_seed_gets_the_accuracy_interval_of_bootstrap_ci():
    labels, predicted = _labels_and_predictions()
    counts = stats.sentence_resamples(len(labels))
    ours = stats.seed_averaged_interval((predicted == labels)[None], counts)
    theirs = stats.bootstrap_ci(labels.tolist(), predicted.tolist(), "accuracy", seed=0)
    # two Monte Carlo draws of the same distribution: the 2.5% and 97.5% points agree to ~0.3 points
    assert ours[0] == pytest.approx(theirs.low, abs=0.004)
    assert ours[1] == pytest.approx(theirs.high, abs=0.004)


def test_the_row_interval_averages_seeds_on_the_same_resampled_sentences():
    labels, first = _labels_and_predictions(seed=0)
    _, second = _labels_and_predictions(seed=1)
    correct = np.stack([first == labels, second == labels])
    counts = stats.sentence_resamples(len(labels), 2000)
    # the same seed twice is that seed's interval: the seeds are held fixed, not resampled
    assert stats.seed_averaged_interval(correct[[0, 0]], counts) == stats.seed_averaged_interval(correct[[0]], counts)
    scores = stats.resampled_accuracy(correct, counts)  # [K, B]
    assert scores.shape == (2, 2000)
    assert scores[1, 0] == pytest.approx((counts[0] * correct[1]).sum() / len(labels))
    low, high = stats.seed_averaged_interval(correct, counts)
    assert low < correct.mean() < high
    assert [low, high] == pytest.approx(np.quantile(scores.mean(0), [0.025, 0.975]).tolist())


def test_paired_test_of_identical_systems_gives_p_1_and_a_zero_difference():
    labels, predicted = _labels_and_predictions()
    correct = np.stack([predicted == labels] * 3)
    test = stats.paired_seed_bootstrap(correct, correct, stats.sentence_resamples(len(labels), 2000))
    assert test["p"] == 1.0 and test["difference"] == 0.0


def test_paired_test_with_one_seed_each_matches_paired_bootstrap_test():
    labels, a = _labels_and_predictions(accuracy=0.80, seed=0)
    _, b = _labels_and_predictions(accuracy=0.77, seed=1)
    ours = stats.paired_seed_bootstrap((a == labels)[None], (b == labels)[None], stats.sentence_resamples(len(labels)))
    theirs = stats.paired_bootstrap_test(labels.tolist(), a.tolist(), b.tolist(), "accuracy", seed=0)
    assert ours["difference"] == pytest.approx(metrics.accuracy(labels, a) - metrics.accuracy(labels, b))
    assert ours["p"] == pytest.approx(theirs, abs=0.015)  # Monte Carlo error of 10,000 resamples near p ~ 0.1


def test_paired_test_sees_the_seed_spread_that_a_fixed_seed_test_ignores():
    """One lucky seed: A's seeds score 70%, 70% and 80%, B's all 70%. Holding A's seeds fixed, the 3.3-point
    gap looks solid; resampling them shows how much of it one seed makes."""
    rng = np.random.default_rng(0)
    n = 872
    labels = rng.integers(0, 2, n)

    def seed_with(accuracy: float, seed: int) -> np.ndarray:
        right = np.random.default_rng(seed).permutation(n) < round(accuracy * n)
        return np.where(right, labels, 1 - labels) == labels

    a = np.stack([seed_with(0.70, 1), seed_with(0.70, 2), seed_with(0.80, 3)])
    b = np.stack([seed_with(0.70, 4), seed_with(0.70, 5), seed_with(0.70, 6)])
    counts = stats.sentence_resamples(n, 4000)
    resampled = stats.paired_seed_bootstrap(a, b, counts)
    observed = a.mean() - b.mean()
    fixed = stats.resampled_accuracy(a, counts).mean(0) - stats.resampled_accuracy(b, counts).mean(0)  # seeds held
    fixed_low, fixed_high = np.quantile(fixed, [0.025, 0.975])
    fixed_p = (1 + np.sum(np.abs(fixed - observed) >= abs(observed) - 1e-12)) / (1 + len(fixed))
    assert resampled["difference"] == pytest.approx(observed)
    assert resampled["interval"][1] - resampled["interval"][0] > 1.5 * (fixed_high - fixed_low)
    assert fixed_p < 0.01 < resampled["p"]


def test_holm_adjusts_step_down_and_keeps_the_order():
    assert stats.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert stats.holm([0.9, 0.9]) == [1.0, 1.0]


def test_wilson_interval_known_values():
    low, high = stats.wilson_interval(80, 100)
    assert abs(low - 0.7112) < 1e-3 and abs(high - 0.8666) < 1e-3
    assert stats.wilson_interval(0, 10)[0] == 0.0
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)


def test_the_paired_sentence_bootstrap_resamples_whole_sentences():
    """Targets that move together within a sentence: resampling sentences gives a wider interval than treating
    every target as independent, and the difference is the plain one over targets."""
    from bertcourse.stats import paired_sentence_bootstrap

    rng = np.random.default_rng(0)
    sentence_of = np.repeat(np.arange(200), 10)
    ahead = np.repeat(rng.random(200) < 0.55, 10)  # a model better on whole sentences, not on scattered targets
    hits_a, hits_b = ahead.astype(int), np.repeat(rng.random(200) < 0.5, 10).astype(int)
    clustered = paired_sentence_bootstrap(hits_a, hits_b, sentence_of)
    flat = paired_sentence_bootstrap(hits_a, hits_b, np.arange(len(hits_a)))
    assert clustered["difference"] == pytest.approx(hits_a.mean() - hits_b.mean())
    assert clustered["sentences"] == 200 and clustered["targets"] == 2000
    width = clustered["interval"][1] - clustered["interval"][0]
    assert width > 2.5 * (flat["interval"][1] - flat["interval"][0])
    same = paired_sentence_bootstrap(hits_a, hits_a, sentence_of)
    assert same["difference"] == 0 and same["p"] == 1.0
