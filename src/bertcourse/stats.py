"""The course's statistics, in one place: how sure a score is, and whether two models differ.

- One prediction vector (or a pair) of any metric: `bootstrap_ci`, `paired_bootstrap_test` and McNemar's
  test (`mcnemar_test`). Exercise 5 asks students to write `bootstrap_ci` to this contract; lesson 5 and
  every command's single-run interval call these.
- Trained models scored on the same sentences by K seeds (`compare`, `labels`, the benchmarks): the interval
  of a row is a percentile bootstrap of the *seed-averaged* accuracy in which only the sentences are
  resampled (the seeds held fixed: the test-set part of the uncertainty; the seeds' sd is the training
  part); the paired test resamples the sentences once for both models and each model's seeds with
  replacement; Holm's correction covers a family of such tests. With one seed they are `bootstrap_ci`'s
  accuracy interval and its paired test (tests/test_stats.py checks that they agree).
- A proportion (masked-token accuracy, a masking rate): Wilson's interval (`wilson_interval`).

Every draw comes from a private generator (no global random state is used).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from bertcourse.metrics import (
    MetricsError,
    _binary_labels,
    _confusion_counts,
    _mcc_from_confusion,
    _pair,
    _prf_from_counts,
    _sorted_labels,
    accuracy,
    matthews_corrcoef,
)

BOOTSTRAP_RESAMPLES = 10_000
ALPHA = 0.05
BOOTSTRAP_SEED = 0


class Interval(NamedTuple):
    """A two-sided confidence interval."""

    low: float
    high: float


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
    p = (1 + #{b : |d*_b - d| >= |d|}) / (1 + B) as in `paired_bootstrap_test` (which it equals in
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
    return _two_sided(float(np.mean(correct_a) - np.mean(correct_b)), means[0] - means[1], alpha)


def paired_sentence_bootstrap(hits_a: np.ndarray, hits_b: np.ndarray, sentence_of: np.ndarray, *,
                              n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                              alpha: float = ALPHA) -> dict[str, Any]:
    """Two models' 0/1 hits on the same targets, several targets to a sentence (`sentence_of[i]`: target i's
    sentence): the difference in accuracy a - b, its percentile interval and a two-sided p, whole sentences
    resampled. A sentence's targets share one context, so they are not independent draws: an interval over
    targets (a normal one, or a bootstrap of targets) is too narrow (lesson 2, exercise 8)."""
    _, index = np.unique(np.asarray(sentence_of), return_inverse=True)
    difference = np.bincount(index, weights=np.asarray(hits_a, dtype=float) - np.asarray(hits_b, dtype=float))
    targets = np.bincount(index).astype(float)
    counts = sentence_resamples(len(targets), n_resamples, seed)
    test = _two_sided(float(difference.sum() / targets.sum()), (counts @ difference) / (counts @ targets), alpha)
    return {**test, "sentences": len(targets), "targets": int(targets.sum())}


def _two_sided(observed: float, diffs: np.ndarray, alpha: float) -> dict[str, Any]:
    """The observed difference, the percentile interval of its B resampled values and the two-sided p =
    (1 + #{b : |d*_b - d| >= |d|}) / (1 + B): the paired bootstraps' common ending."""
    extreme = int(np.sum(np.abs(diffs - observed) >= abs(observed) - 1e-12))
    low, high = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return {"difference": observed, "interval": [float(low), float(high)], "p": (1 + extreme) / (1 + len(diffs))}


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the order given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


# ---------------------------------------------------------------------------------------------------------
# One prediction vector (or a pair) of any metric: exercise 5's contract

_VECTORISED = {"accuracy", "mcc", "f1", "precision", "recall", "macro_f1", "micro_f1", "weighted_f1"}


def _metric_name(metric: str | Callable) -> str | None:
    """The vectorised name of a metric, or None for an arbitrary callable (scored resample by resample)."""
    if isinstance(metric, str):
        if metric not in _VECTORISED:
            raise MetricsError(f"unknown metric {metric!r}: use a callable or one of {sorted(_VECTORISED)}")
        return metric
    if not callable(metric):
        raise MetricsError(f"metric must be a callable or a name, got {metric!r}")
    return {accuracy: "accuracy", matthews_corrcoef: "mcc"}.get(metric)


def _generator(seed: int | torch.Generator | None) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    generator = torch.Generator()
    if seed is None:
        generator.seed()  # fresh entropy for this generator only; torch's global RNG is untouched
    else:
        generator.manual_seed(int(seed))
    return generator


def _resample_scores(y_true: list, preds: list[list], metric: str | Callable, n_resamples: int,
                     generator: torch.Generator) -> torch.Tensor:
    """(len(preds), n_resamples) scores; every system is scored on the SAME resampled indices."""
    n = len(y_true)
    name = _metric_name(metric)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise MetricsError(f"n_resamples must be a positive int, got {n_resamples!r}")
    out = torch.empty(len(preds), n_resamples, dtype=torch.float64)
    chunk = max(1, min(n_resamples, 8_000_000 // n))  # bounded memory for long inputs
    if name is not None:
        labels = _sorted_labels(y_true + [x for p in preds for x in p])
        index = {label: i for i, label in enumerate(labels)}
        k = len(labels)
        t_idx = torch.tensor([index[a] for a in y_true])
        cells = [t_idx * k + torch.tensor([index[b] for b in p]) for p in preds]
        if name in ("f1", "precision", "recall"):
            _binary_labels(y_true, [x for p in preds for x in p], 1)
        joint = t_idx.clone()
        for cell in cells:
            joint = joint * (k * k) + cell  # one id per (true, prediction of each system) combination
        occupied, occupancy = torch.unique(joint, return_counts=True)
        if len(occupied) <= _MAX_MULTINOMIAL_CELLS:
            counts = _multinomial_counts(occupancy, n, n_resamples, generator)  # (n_resamples, cells)
            for s in reversed(range(len(preds))):  # peel each system's cell off the joint id, last first
                cm = torch.zeros(n_resamples, k * k, dtype=torch.int64)
                cm.index_add_(1, occupied % (k * k), counts)
                out[s] = _score_confusion(cm.view(n_resamples, k, k), labels, name)
                occupied = occupied // (k * k)
            return out
    done = 0
    while done < n_resamples:
        size = min(chunk, n_resamples - done)
        rows = torch.randint(0, n, (size, n), generator=generator)
        for s, pred in enumerate(preds):
            if name is None:
                out[s, done:done + size] = torch.tensor(
                    [float(metric([y_true[i] for i in r], [pred[i] for i in r])) for r in rows.tolist()],
                    dtype=torch.float64)
            else:
                flat = cells[s][rows] + (torch.arange(size) * k * k)[:, None]
                cm = torch.bincount(flat.flatten(), minlength=size * k * k).view(size, k, k)
                out[s, done:done + size] = _score_confusion(cm, labels, name)
        done += size
    return out


# Resampling n items with replacement and counting them per (label, prediction) combination is a draw
# from Multinomial(n, observed shares of the combinations): when few combinations occur (any binary or
# few-class task), drawing those counts directly (one binomial per combination, conditioned on the
# rest) replaces n_resamples x n index draws, ~50x faster for 10,000 resamples of 872.
_MAX_MULTINOMIAL_CELLS = 256


def _multinomial_counts(occupancy: torch.Tensor, n: int, size: int, generator: torch.Generator) -> torch.Tensor:
    """(size, cells) int64 counts ~ Multinomial(n, occupancy / occupancy.sum()), by conditional binomials."""
    remaining = torch.full((size,), float(n), dtype=torch.float64)
    mass = float(occupancy.sum())
    columns = []
    for count in occupancy[:-1].tolist():
        share = min(1.0, count / mass) if mass > 0 else 0.0
        drawn = torch.binomial(remaining, torch.full_like(remaining, share), generator=generator)
        columns.append(drawn)
        remaining = remaining - drawn
        mass -= count
    columns.append(remaining)
    return torch.stack(columns, 1).round().to(torch.int64)


def _score_confusion(cm: torch.Tensor, labels: list, name: str) -> torch.Tensor:
    """A named metric of a batch of (B, K, K) confusion matrices over the sorted `labels`."""
    if name == "accuracy":
        return cm.diagonal(dim1=-2, dim2=-1).sum(-1).to(torch.float64) / cm.sum((-2, -1))
    if name == "mcc":
        return _mcc_from_confusion(cm)
    tp = cm.diagonal(dim1=-2, dim2=-1)
    predicted, support = cm.sum(-2), cm.sum(-1)
    if name in ("f1", "precision", "recall"):  # binary, positive label 1 (scikit-learn's default)
        if 1 not in labels:
            return torch.zeros(cm.shape[0], dtype=torch.float64)
        i = labels.index(1)
        scores = _prf_from_counts(tp[:, i:i + 1], predicted[:, i:i + 1], support[:, i:i + 1], "macro", 0.0)
        return scores[("precision", "recall", "f1").index(name)]
    return _prf_from_counts(tp, predicted, support, name.removesuffix("_f1"), 0.0)[2]


def _point(y_true: list, y_pred: list, metric: str | Callable) -> float:
    name = _metric_name(metric)
    if name is None:
        return float(metric(y_true, y_pred))
    labels = _sorted_labels(y_true + y_pred)
    cm = _confusion_counts(y_true, y_pred, labels)[None]
    return float(_score_confusion(cm, labels, name)[0])


def bootstrap_ci(
    y_true: Any,
    y_pred: Any,
    metric: str | Callable = "accuracy",
    *,
    n_resamples: int = 10_000,
    alpha: float = 0.05,
    seed: int | torch.Generator | None = 0,
) -> Interval:
    """Percentile bootstrap (1 - alpha) interval of `metric(y_true, y_pred)`.

    Each resample draws n indices with replacement and takes the label and the prediction of the SAME
    index (paired: resampling the two separately would break their link and score noise). The interval
    is the alpha/2 and 1 - alpha/2 quantiles (linear interpolation, numpy's default) of the resampled
    scores. `metric` is a callable `metric(y_true, y_pred) -> float` or a name; the names and the
    functions `accuracy` and `matthews_corrcoef` are vectorised over resamples (10,000 resamples of 872
    in well under a second), any other callable is called once per resample. `seed` seeds a private
    `torch.Generator` (or pass one); the global random state is never used.
    """
    if not 0 < alpha < 1:
        raise MetricsError(f"alpha must lie in (0, 1), got {alpha!r}")
    t, p = _pair(y_true, y_pred)
    scores = _resample_scores(t, [p], metric, n_resamples, _generator(seed))[0]
    q = torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64)
    low, high = torch.quantile(scores, q).tolist()
    return Interval(low, high)


def paired_bootstrap_test(
    y_true: Any,
    pred_a: Any,
    pred_b: Any,
    metric: str | Callable = "accuracy",
    *,
    n_resamples: int = 10_000,
    seed: int | torch.Generator | None = 0,
) -> float:
    """Two-sided p-value for "systems A and B score the same", by the paired bootstrap.

    d = metric(A) - metric(B) on the data; d*_b the same difference on resample b (A and B scored on the
    same indices). Centring the bootstrap distribution on d gives the null distribution (Efron &
    Tibshirani 1993, sec. 16.4; Berg-Kirkpatrick et al. 2012), so
        p = (1 + #{b : |d*_b - d| >= |d|}) / (1 + n_resamples).
    Identical systems give p = 1; p is never 0 (the +1 counts the observed data as one resample).
    """
    t, a = _pair(y_true, pred_a, "pred_a")
    _, b = _pair(y_true, pred_b, "pred_b")
    observed = _point(t, a, metric) - _point(t, b, metric)
    scores = _resample_scores(t, [a, b], metric, n_resamples, _generator(seed))
    diffs = scores[0] - scores[1]
    extreme = int(((diffs - observed).abs() >= abs(observed) - 1e-12).sum())
    return (1 + extreme) / (1 + n_resamples)


def mcnemar_test(y_true: Any, pred_a: Any, pred_b: Any) -> float:
    """Exact (binomial) two-sided McNemar p-value for two classifiers scored on the same samples.

    Only the discordant samples matter: b = A right and B wrong, c = A wrong and B right. Under "equally
    accurate" each discordant sample goes either way with probability 1/2, so
        p = min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)]),  and p = 1 when b + c = 0.
    Summed in log space, so thousands of discordant samples are fine.
    """
    t, a = _pair(y_true, pred_a, "pred_a")
    _, b_pred = _pair(y_true, pred_b, "pred_b")
    b = sum(x == y and z != y for x, z, y in zip(a, b_pred, t, strict=True))
    c = sum(x != y and z == y for x, z, y in zip(a, b_pred, t, strict=True))
    n, m = b + c, min(b, c)
    if n == 0:
        return 1.0
    log_terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(m + 1)]
    top = max(log_terms)
    log_tail = top + math.log(math.fsum(math.exp(x - top) for x in log_terms)) - n * math.log(2)
    return min(1.0, 2 * math.exp(log_tail))



# ---------------------------------------------------------------------------------------------------------
# A proportion


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sensible near 0 and 1, unlike p +- 1.96 se)."""
    if trials == 0:
        return 0.0, 1.0
    z = _normal_quantile(0.5 + confidence / 2)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def _normal_quantile(q: float) -> float:
    return float(torch.special.ndtri(torch.tensor(q, dtype=torch.float64)))


__all__ = ["ALPHA", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "Interval", "bootstrap_ci", "holm", "mcnemar_test",
           "paired_bootstrap_test", "paired_seed_bootstrap", "paired_sentence_bootstrap", "resampled_accuracy",
           "seed_averaged_interval", "sentence_resamples", "wilson_interval"]
