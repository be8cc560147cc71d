"""Exact binomial acceptance ranges for the statistical tests of random functions: a correct function
fails one only with the chance `tail` per side (the seeds are fixed, so a result never changes)."""

from __future__ import annotations

import math

TAIL = 1e-8


def binomial_range(trials: int, p: float, tail: float = TAIL) -> tuple[int, int]:
    """[lo, hi] with P(X < lo) < tail and P(X > hi) < tail for X ~ Binomial(trials, p)."""
    if p <= 0.0 or p >= 1.0:
        return (0, 0) if p <= 0.0 else (trials, trials)
    pmf = [math.exp(math.lgamma(trials + 1) - math.lgamma(k + 1) - math.lgamma(trials - k + 1)
                    + k * math.log(p) + (trials - k) * math.log1p(-p)) for k in range(trials + 1)]
    lo, below = 0, 0.0
    while below + pmf[lo] < tail:
        below += pmf[lo]
        lo += 1
    hi, above = trials, 0.0
    while above + pmf[hi] < tail:
        above += pmf[hi]
        hi -= 1
    return lo, hi


def plausible(successes: int, trials: int, p: float, tail: float = TAIL) -> bool:
    """Whether `successes` of `trials` is a plausible Binomial(trials, p) outcome."""
    lo, hi = binomial_range(trials, p, tail)
    return lo <= successes <= hi
