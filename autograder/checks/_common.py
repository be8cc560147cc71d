"""What the hidden checks of ex01 (token masking) and ex02 (whole-word masking) share: the ids, the exact
statistical bounds, and the validity test that side conditions (types, inputs untouched, seeds) need.

Every bound here holds for EVERY correct implementation, whatever the order of its random draws, with a
false-alarm chance of at most `TAIL` per side and statistic (the grading seeds are fixed, so a result
never changes between regrades; these tails make a wrong verdict on a correct submission < 1e-6 overall).
"""

from __future__ import annotations

import math

import torch

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103  # bert-base-uncased's ids: the specials are not contiguous
SPECIAL = [PAD, UNK, CLS, SEP, MASK]
VOCAB = 30_522
IGNORE = -100
TAIL = 1e-8  # per side, per rate
SMALL_VOCAB = 120  # 115 allowed ids: a draw over all ids hits a special often, and each id is drawn often
# A random replacement equal to the original id looks "kept": with VOCAB that moves ~1/30,000 of the random
# share to the kept share, which this slack (a fraction of the trials) absorbs.
SLACK = 1e-3


def binomial_range(trials: int, p: float, tail: float = TAIL) -> tuple[int, int]:
    """[lo, hi] with P(X < lo) < tail and P(X > hi) < tail for X ~ Binomial(trials, p) (exact pmf)."""
    if trials == 0 or p <= 0.0 or p >= 1.0:
        return (trials, trials) if p >= 1.0 else (0, 0)
    k = torch.arange(trials + 1, dtype=torch.float64)
    n = torch.tensor(float(trials), dtype=torch.float64)
    log_pmf = (torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
               + k * math.log(p) + (n - k) * math.log1p(-p))
    pmf = log_pmf.exp()
    lo = int((pmf.cumsum(0) < tail).sum())
    hi = trials - int((pmf.flip(0).cumsum(0) < tail).sum())
    return lo, hi


def rate_ok(successes: int, trials: int, p: float, slack: float = 0.0, tail: float = TAIL) -> bool:
    """Whether `successes` of `trials` is a plausible Binomial(trials, p) outcome (and trials > 0)."""
    if trials <= 0:
        return False
    lo, hi = binomial_range(trials, p, tail)
    return lo - slack * trials <= successes <= hi + slack * trials


def hoeffding_margin(ranges: torch.Tensor, tail: float = TAIL) -> float:
    """eps with P(S - E[S] >= eps) <= tail for S a sum of independent variables, the i-th in an interval
    of width ranges[i] (Hoeffding's inequality)."""
    return math.sqrt(math.log(1.0 / tail) * float((ranges.double() ** 2).sum()) / 2.0)


def percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"


def allowed_ids(vocab_size: int) -> torch.Tensor:
    """The ids a random replacement may take: range(vocab_size) minus the special ids."""
    ids = torch.arange(vocab_size)
    return ids[~torch.isin(ids, torch.tensor(SPECIAL))]


def unpack(result: object, name: str, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) as int64 tensors, or an AssertionError naming what the function returned."""
    assert isinstance(result, (tuple, list)) and len(result) == 2, f"{name} must return (inputs, labels)"
    inputs, labels = result
    assert isinstance(inputs, torch.Tensor) and isinstance(labels, torch.Tensor), f"{name} must return two tensors"
    assert inputs.shape == shape and labels.shape == shape, f"{name} returned tensors not shaped like input_ids"
    return inputs.long(), labels.long()


def masking_problem(ids: torch.Tensor, eligible: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor) -> str:
    """Why (inputs, labels) is not a masking at all ('' when it is one): a side condition (types, inputs
    untouched, seeds) earns its point only for a function that did some masking."""
    labelled = (labels != IGNORE) & eligible
    if not bool(labelled.any()):
        return "no position was selected (every label is -100)"
    if bool(labelled[eligible].all()):
        return "every position was selected (no label is -100)"
    if not bool((inputs != ids).any()):
        return "no position was changed ([MASK] or a random id)"
    return ""


def assert_masking(ids, eligible, inputs, labels) -> None:
    problem = masking_problem(ids, eligible, inputs, labels)
    assert not problem, f"not credited until the function masks: {problem}"

