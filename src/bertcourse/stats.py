"""The statistics of comparing trained models on one test set, written once: `compare`, `labels` and the
benchmarks report through them.

Every model is scored on the same sentences by K seeds. The interval of a row is a percentile bootstrap of
the *seed-averaged* accuracy in which only the sentences are resampled (the seeds held fixed: the test-set
part of the uncertainty; the seeds' sd is the training part); the paired test resamples the sentences once
for both models and each model's seeds with replacement; Holm's correction covers a family of such tests.
With one seed they are `bertcourse.metrics.bootstrap_ci`'s accuracy interval and its paired bootstrap test
(tests/test_stats.py checks that they agree). Those, with McNemar's test, stay in `metrics`, which resamples
one prediction vector (or a pair) of any metric: exercise 5's contract, and lesson 5 calls them there.
Wilson's interval for a proportion stays in `masking`, where lessons 1 and 2 import it (their recorded
outputs name that import).

Plain numpy on integer counts; every draw comes from a private generator (no global random state is used).
"""

from __future__ import annotations

from typing import Any

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
ALPHA = 0.05
BOOTSTRAP_SEED = 0


def sentence_resamples(n: int, n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """[n_resamples, n] int32: how many times each of n sentences occurs in each resample of n drawn with
    replacement (a private generator: no global random state is used)."""
    rng = np.random.default_rng(seed)
    counts = np.empty((n_resamples, n), dtype=np.int32)
    for start in range(0, n_resamples, 1000):  # bounded memory: 1,000 resamples of indices at a time
        size = min(1000, n_resamples - start)
        drawn = rng.integers(0, n, size=(size, n)) + np.arange(size)[:, None] * n
        counts[start : start + size] = np.bincount(drawn.ravel(), minlength=size * n).reshape(size, n)
    return counts


def resampled_accuracy(correct: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[K, B] accuracy of each of K seeds (`correct` [K, n], 0/1) on each resample (all seeds on the same one)."""
    return (np.asarray(correct, dtype=np.int32) @ counts.T) / correct.shape[1]


def seed_averaged_interval(correct: np.ndarray, counts: np.ndarray, alpha: float = ALPHA) -> list[float]:
    """Percentile interval of the seed-averaged accuracy, the sentences resampled and the seeds held fixed."""
    scores = resampled_accuracy(correct, counts).mean(0)
    return [float(x) for x in np.quantile(scores, [alpha / 2, 1 - alpha / 2])]


def paired_seed_bootstrap(correct_a: np.ndarray, correct_b: np.ndarray, counts: np.ndarray, *,
                          alpha: float = ALPHA, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Two-sided paired bootstrap over sentences and seeds of "A and B have the same seed-averaged accuracy".

    Each resample b uses the sentences `counts[b]` for both models and draws K_a seeds of A and K_b of B
    with replacement; d*_b is the difference of their mean accuracies, d the observed difference, and
    p = (1 + #{b : |d*_b - d| >= |d|}) / (1 + B) as in `metrics.paired_bootstrap_test` (which it equals in
    distribution when K_a = K_b = 1). Integer counts keep ties exact.
    """
    rng = np.random.default_rng(seed)
    n_resamples = counts.shape[0]
    columns = np.arange(n_resamples)[:, None]
    means = []
    for correct in (correct_a, correct_b):
        accuracies = resampled_accuracy(correct, counts)  # [K, B]
        picked = rng.integers(0, len(correct), size=(n_resamples, len(correct)))
        means.append(accuracies[picked, columns].mean(1))
    diffs = means[0] - means[1]
    observed = float(np.mean(correct_a) - np.mean(correct_b))
    extreme = int(np.sum(np.abs(diffs - observed) >= abs(observed) - 1e-12))
    low, high = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return {"difference": observed, "interval": [float(low), float(high)], "p": (1 + extreme) / (1 + n_resamples)}


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the order given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


__all__ = ["ALPHA", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "holm", "paired_seed_bootstrap", "resampled_accuracy",
           "seed_averaged_interval", "sentence_resamples"]
