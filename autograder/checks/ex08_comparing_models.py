"""Hidden checks of ex08-comparing-models: per-sentence losses, the paired bootstrap interval of a difference,
accuracy over seeds with its interval, the paired test over sentences and seeds, a verdict, two questions.

Every check runs on planted data whose answer is known exactly or statistically:

- Losses are compared with the judge's own cross-entropy (`torch.log_softmax`), to 1e-4.
- Intervals are tested where the bootstrap distribution is exact: the mean of 0/1 paired differences, and the
  accuracy of seeds that agree on every sentence, are Binomial(n, k/n) / n, so `_common.binomial_interval_ok`
  bounds each endpoint of 4,000 resamples for every correct implementation (tail 1e-8 per side); at alpha =
  0.4 an unhalved alpha, a resampling of the two models apart or of the (seed, sentence) cells lands outside.
  Degenerate plants are exact: a constant paired difference gives a zero-width interval only when both models
  are resampled on the same sentences, and seeds that split all-right / all-wrong give 0.5 on every resample
  only when the seeds are held fixed.
- The paired test is checked on a planted difference (30 of 1,000 sentences, all in A's favour, everything
  else shared: |d* - d| >= |d| is a 5.5-sigma event, so p = 1 / (1 + B) for every correct implementation,
  while an unpaired or uncentred test gives p ~ 0.1-0.5), on identical models (p = 1 exactly), and on a
  planted seed effect (A's two seeds at 90% and 50%: resampling the seeds makes |d* - d| >= |d| about half the
  time, p ~ 0.5; resampling sentences alone gives p < 0.01).

Part 7's two conclusions are graded against the numbers the student recorded from running their own functions on
the course's real models (those cells do nothing while grading): the checks recompute what the recorded interval,
or difference and p, allow, and name the mistake a wrong letter shows (the sign of a loss difference, a lead read
into the noise, a lead undersold, one run generalised).

tests/checks/test_checks_ex08.py proves each check against its misconception, three correct implementations
(vectorised torch, Python loops with `random.Random`, numpy) and the stubs. A side condition (a seed, a
no-target row, p's form) is credited only for a function that does the work.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _common import binomial_interval_ok, binomial_range, concept_answer, global_draws, reseed_globals

from bertcourse.grading import Diagnosis

TOL = 1e-9
AHEAD_A, AHEAD_B = "A ahead beyond the noise", "B ahead beyond the noise"
NO_DIFFERENCE = "no difference beyond the noise"


def number(value, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{what} must be a number"
    return float(value)


def numbers(value, count: int, what: str) -> list[float]:
    assert isinstance(value, (tuple, list)) and len(value) == count, f"{what} must return a tuple of {count} numbers"
    return [number(v, f"each value {what} returns") for v in value]


# ----------------------------------------------------------------------------- part 1: sentence_losses


def reference_losses(logits: torch.Tensor, labels: torch.Tensor) -> list[float]:
    targets = labels != -100
    nll = -torch.log_softmax(logits.double(), -1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return [float(nll[row][targets[row]].mean()) for row in range(len(labels))]


def student_losses(student, logits, labels) -> list[float]:
    value = student.call("sentence_losses", logits, labels)
    if isinstance(value, torch.Tensor):
        assert value.dim() == 1 and len(value) == len(labels), (
            "sentence_losses must return one loss per sentence: a 1-D tensor of length batch")
        return [float(v) for v in value.tolist()]
    assert isinstance(value, (list, tuple)) and len(value) == len(labels), (
        "sentence_losses must return one loss per sentence")
    return [number(v, "each sentence's loss") for v in value]


def losses_batch(seed: int, rows: int = 12, seq: int = 10, vocab: int = 9, targets=(1, 6),
                 empty_row: int | None = None):
    """Rows of `seq` positions with 1-6 targets each at random places, -100 elsewhere; the logits at the other
    positions are extreme, so a loss that reads them is far off."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, seq, vocab, generator=g) * 2
    labels = torch.full((rows, seq), -100)
    for row in range(rows):
        if row == empty_row:
            continue
        k = int(torch.randint(targets[0], targets[1] + 1, (1,), generator=g))
        where = torch.randperm(seq, generator=g)[:k]
        labels[row, where] = torch.randint(vocab, (k,), generator=g)
    logits[labels == -100] = logits[labels == -100] * 10
    return logits, labels


def close_all(got: list[float], expected: list[float], tol: float = 1e-4) -> bool:
    return all(math.isclose(a, b, rel_tol=tol, abs_tol=tol) for a, b in zip(got, expected, strict=True))


@pytest.mark.check(cell="sentence_losses_checks", points=1.0,
                   feedback="the loss of a target is the cross-entropy of its row of logits: minus the log of the "
                            "softmax probability of its label, the softmax taken over the vocabulary")
def test_cross_entropy_of_each_target(student):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(16, 1, 11, generator=g) * 3
    labels = torch.randint(11, (16, 1), generator=g)
    assert close_all(student_losses(student, logits, labels), reference_losses(logits, labels)), (
        "with one target per sentence, the losses are not the cross-entropies of the targets")


@pytest.mark.check(cell="sentence_losses_checks", points=2.0,
                   feedback="a sentence's loss is the MEAN over its own targets (labels != -100): not a sum, not "
                            "a mean over every position, not one mean for the whole batch")
def test_mean_over_the_sentence_targets_only(student):
    for seed in (2, 3):
        logits, labels = losses_batch(seed)
        got, expected = student_losses(student, logits, labels), reference_losses(logits, labels)
        assert close_all(got, expected), "the losses of sentences with several targets are not their means"


@pytest.mark.check(cell="sentence_losses_checks", points=1.0,
                   feedback="a sentence without any target has no loss: nan, not 0 (a 0 would pull the mean down); "
                            "credited once the other losses are right")
def test_sentence_without_targets_is_nan(student):
    logits, labels = losses_batch(4, empty_row=5)
    got, expected = student_losses(student, logits, labels), reference_losses(logits, labels)
    others = [i for i in range(len(labels)) if i != 5]
    assert close_all([got[i] for i in others], [expected[i] for i in others]), (
        "not credited until the sentences with targets get their losses")
    assert math.isnan(got[5]), "a sentence without targets did not get nan"


# ----------------------------------------------------------------------------- part 2: paired_interval


def student_paired(student, a, b, **kwargs) -> list[float]:
    return numbers(student.call("paired_interval", a, b, **kwargs), 3, "paired_interval")


def planted_01(n: int, ones: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sentence losses whose paired differences are 0 or 1 (`ones` of them 1) on very different sentences."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 6.0, size=n)
    d = np.zeros(n)
    d[rng.permutation(n)[:ones]] = 1.0
    return torch.tensor(base + d), torch.tensor(base)


def spread_case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(1.0, 5.0, size=300)
    return torch.tensor(a), torch.tensor(a - rng.normal(0.2, 0.5, size=300))


def assert_paired_does_work(student) -> None:
    a, b = spread_case(20)
    diff, low, high = student_paired(student, a, b, n_resamples=300, alpha=0.1, seed=0)
    assert math.isclose(diff, float((a - b).mean()), abs_tol=TOL) and low < diff < high, (
        "not credited until the difference and an interval around it are right")


@pytest.mark.check(cell="paired_interval_checks", points=1.0,
                   feedback="the difference is the mean over sentences of A's loss minus B's, in that order (A - B)")
def test_difference_is_the_mean_of_a_minus_b(student):
    a, b = spread_case(21)
    diff = student_paired(student, a, b, n_resamples=100, seed=1)[0]
    assert math.isclose(diff, float((a - b).mean()), abs_tol=TOL), (
        "the difference has the wrong sign: it is B - A" if math.isclose(diff, float((b - a).mean()), abs_tol=TOL)
        else f"paired_interval returned the difference {diff:.6g} on 300 paired losses")


@pytest.mark.check(cell="paired_interval_checks", points=1.0,
                   feedback="resample SENTENCES, the same ones for both models: each resample's statistic is the "
                            "mean of the paired differences on those sentences")
def test_both_models_resampled_on_the_same_sentences(student):
    assert_paired_does_work(student)
    rng = np.random.default_rng(22)
    a = torch.tensor(rng.uniform(0.5, 8.0, size=400))
    diff, low, high = student_paired(student, a, a - 0.25, n_resamples=500, alpha=0.1, seed=2)
    assert max(abs(diff - 0.25), abs(low - 0.25), abs(high - 0.25)) < 1e-9, (
        "when B's loss is A's minus the same amount on every sentence, every paired resample has that difference, "
        "but the interval has a width")


NORMAL_APPROXIMATION = ("the interval's ends are quantiles of the resampled statistics themselves: never the "
                        "estimate +- z standard deviations (a normal approximation is symmetric, and a bootstrap "
                        "of a few rare values is not)")


def assert_within_every_resample(got, smallest: float, largest: float, what: str) -> None:
    """A percentile interval lies between the smallest and the largest statistic a resample can have."""
    if got[0] < smallest - 1e-9 or got[1] > largest + 1e-9:
        raise Diagnosis(NORMAL_APPROXIMATION, f"{what}, every resample lies in [{smallest:g}, {largest:g}], but the "
                                              f"interval ({got[0]:.4f}, {got[1]:.4f}) reaches beyond")


@pytest.mark.check(cell="paired_interval_checks", points=3.0,
                   feedback="the interval is the alpha/2 and 1 - alpha/2 quantiles (alpha split between the tails) "
                            "of the resampled mean differences themselves (not +- z standard deviations), n "
                            "sentences drawn WITH replacement per resample")
def test_paired_interval_quantiles(student):
    for n, ones, alpha, seed in ((600, 150, 0.4, 23), (300, 210, 0.5, 24), (400, 2, 0.1, 27), (500, 497, 0.1, 28)):
        a, b = planted_01(n, ones, seed)
        got = student_paired(student, a, b, n_resamples=4000, alpha=alpha, seed=seed)
        assert_within_every_resample(got[1:], 0.0, 1.0, f"with {ones} of {n} paired differences 1 and the rest 0")
        assert binomial_interval_ok(got[1:], n, ones, alpha, 4000), (
            f"the interval is not where the alpha/2 and 1 - alpha/2 quantiles of the paired bootstrap lie "
            f"(alpha={alpha})")


def assert_seeded(student, call, what: str) -> None:
    """Same seed, same result whatever the global state; some other seed, another result; globals untouched."""
    reseed_globals(student, 1)
    first = call(10)
    after = global_draws(student)
    reseed_globals(student, 1)
    assert after == global_draws(student), f"{what} used or reseeded a global random generator"
    reseed_globals(student, 2)
    assert call(10) == first, f"{what}: the same seed gave another result"
    assert any(call(seed) != first for seed in range(11, 21)), f"{what}: every seed gave the same result"


@pytest.mark.check(cell="paired_interval_checks", points=0.5,
                   feedback="draw from your own generator seeded with `seed`: same seed, same interval; never the "
                            "global one; credited once the interval is right")
def test_paired_interval_seed(student):
    assert_paired_does_work(student)
    a, b = spread_case(25)  # real-valued differences: two seeds' intervals never coincide
    assert_seeded(student, lambda s: student_paired(student, a, b, n_resamples=200, alpha=0.4, seed=s),
                  "paired_interval")


@pytest.mark.check(cell="paired_interval_checks", points=0.5,
                   feedback="draw exactly n_resamples resamples: the argument, not a fixed count; credited once the "
                            "interval is right")
def test_paired_interval_honours_n_resamples(student):
    assert_paired_does_work(student)
    a, b = spread_case(26)
    _, low, high = student_paired(student, a, b, n_resamples=1, alpha=0.1, seed=3)
    assert low == high, "with n_resamples=1 there is one resampled difference, but the interval has a width"


# ----------------------------------------------------------------------------- part 3: accuracy_interval


def student_accuracy(student, correct, **kwargs) -> list[float]:
    return numbers(student.call("accuracy_interval", correct, **kwargs), 3, "accuracy_interval")


def agreeing_seeds(k: int, n: int, right: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    row = np.zeros(n, dtype=bool)
    row[rng.permutation(n)[:right]] = True
    return torch.tensor(np.repeat(row[None], k, axis=0))


def assert_accuracy_does_work(student) -> None:
    correct = torch.tensor(np.random.default_rng(30).random((3, 300)) < 0.7)
    acc, low, high = student_accuracy(student, correct, n_resamples=300, alpha=0.1, seed=0)
    assert math.isclose(acc, float(correct.double().mean()), abs_tol=TOL) and low < acc < high, (
        "not credited until the accuracy and an interval around it are right")


@pytest.mark.check(cell="accuracy_interval_checks", points=1.0,
                   feedback="the accuracy is the mean over every seed and every sentence (the seed-averaged accuracy)")
def test_accuracy_is_the_seed_average(student):
    correct = torch.tensor(np.random.default_rng(31).random((3, 250)) < np.linspace(0.5, 0.9, 3)[:, None])
    acc = student_accuracy(student, correct, n_resamples=100, seed=1)[0]
    assert math.isclose(acc, float(correct.double().mean()), abs_tol=TOL), (
        f"accuracy_interval returned the accuracy {acc:.6g} for 3 seeds of 250 sentences")


@pytest.mark.check(cell="accuracy_interval_checks", points=1.0,
                   feedback="resample SENTENCES (columns) with replacement, the same ones for every seed, not single "
                            "(seed, sentence) cells; the interval: the alpha/2 and 1 - alpha/2 quantiles of the "
                            "resampled accuracies themselves (not +- z standard deviations)")
def test_accuracy_interval_resamples_sentences(student):
    for k, n, right, alpha, seed in ((4, 872, 741, 0.4, 32), (3, 300, 210, 0.5, 33), (3, 400, 2, 0.1, 38)):
        got = student_accuracy(student, agreeing_seeds(k, n, right, seed), n_resamples=4000, alpha=alpha, seed=seed)
        assert_within_every_resample(got[1:], 0.0, 1.0, f"with {k} seeds that agree on {n} sentences")
        assert binomial_interval_ok(got[1:], n, right, alpha, 4000), (
            f"the interval is not where the quantiles of the sentence bootstrap lie (alpha={alpha})")


@pytest.mark.check(cell="accuracy_interval_checks", points=1.0,
                   feedback="the seeds are held fixed: each resample averages over ALL the seeds on the resampled "
                            "sentences (the seed spread is another source of noise, reported apart)")
def test_accuracy_interval_holds_the_seeds_fixed(student):
    assert_accuracy_does_work(student)
    correct = torch.zeros(2, 500, dtype=torch.bool)
    correct[0] = True  # seed 0 right on every sentence, seed 1 wrong on every one
    got = student_accuracy(student, correct, n_resamples=500, alpha=0.1, seed=3)
    assert max(abs(v - 0.5) for v in got) < 1e-9, (
        "with one seed always right and one always wrong, every resample of the sentences scores 0.5, but the "
        "interval has a width")


def disagreeing_seeds(n: int, high: int, seed: int) -> torch.Tensor:
    """Four seeds that disagree: on `high` of the n sentences three seeds (drawn at random) are right, on the others
    one. Each sentence's share of seeds right is 0.75 or 0.25, so a resampled accuracy is exactly
    0.25 + 0.5 * Binomial(n, high/n) / n, while each seed alone is right on about half (or a quarter) of them."""
    rng = np.random.default_rng(seed)
    right = np.full(n, 1)
    right[rng.permutation(n)[:high]] = 3
    correct = np.zeros((4, n), dtype=bool)
    for j, r in enumerate(right):
        correct[rng.permutation(4)[:r], j] = True
    return torch.tensor(correct)


@pytest.mark.check(cell="accuracy_interval_checks", points=1.0,
                   feedback="one interval for the seed-averaged accuracy: each resample scores ALL the seeds on the "
                            "same sentences; not an interval per seed, then averaged (each seed's own interval is as "
                            "wide as one run's, while the average over seeds varies less)")
def test_accuracy_interval_on_seeds_that_disagree(student):
    for n, high, alpha, seed in ((600, 300, 0.4, 36), (400, 2, 0.1, 37)):
        got = student_accuracy(student, disagreeing_seeds(n, high, seed), n_resamples=4000, alpha=alpha, seed=seed)
        assert_within_every_resample(got[1:], 0.25, 0.75, "every sentence has a quarter or three quarters of the "
                                                          "seeds right, so")
        scaled = [(v - 0.25) / 0.5 for v in got[1:]]
        assert binomial_interval_ok(scaled, n, high, alpha, 4000), (
            f"on four seeds that disagree, the interval ({got[1]:.4f}, {got[2]:.4f}) is not where the quantiles of "
            f"the seed-averaged accuracy over resampled sentences lie (alpha={alpha})")


@pytest.mark.check(cell="accuracy_interval_checks", points=0.5,
                   feedback="draw from your own generator seeded with `seed`: same seed, same interval; never the "
                            "global one; credited once the interval is right")
def test_accuracy_interval_seed(student):
    assert_accuracy_does_work(student)
    correct = torch.tensor(np.random.default_rng(34).random((3, 300)) < 0.7)  # a fine grid of accuracies
    assert_seeded(student, lambda s: student_accuracy(student, correct, n_resamples=200, alpha=0.4, seed=s),
                  "accuracy_interval")


@pytest.mark.check(cell="accuracy_interval_checks", points=0.5,
                   feedback="draw exactly n_resamples resamples: the argument, not a fixed count; credited once the "
                            "interval is right")
def test_accuracy_interval_honours_n_resamples(student):
    assert_accuracy_does_work(student)
    correct = torch.tensor(np.random.default_rng(35).random((3, 300)) < 0.7)
    _, low, high = student_accuracy(student, correct, n_resamples=1, alpha=0.1, seed=3)
    assert low == high, "with n_resamples=1 there is one resampled accuracy, but the interval has a width"


# ----------------------------------------------------------------------------- part 4: paired_seed_test


def student_test(student, a, b, **kwargs) -> tuple[float, float]:
    difference, p = numbers(student.call("paired_seed_test", a, b, **kwargs), 2, "paired_seed_test")
    assert 0.0 <= p <= 1.0, "p must lie between 0 and 1"
    return difference, p


def planted_difference(seed: int, favour_a: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """One seed each; the two models agree on 970 of 1,000 sentences (~70% right), and on the other 30 one of
    them is right and the other wrong."""
    rng = np.random.default_rng(seed)
    shared = rng.random(1000) < 0.7
    a, b = shared.copy(), shared.copy()
    split = rng.permutation(1000)[:30]
    a[split], b[split] = favour_a, not favour_a
    return torch.tensor(a[None]), torch.tensor(b[None])


def seed_effect(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A: two seeds, right on 90% and on 50% of 1,000 sentences; B: two seeds right on the same 65%."""
    rng = np.random.default_rng(seed)
    a = np.zeros((2, 1000), dtype=bool)
    a[0, rng.permutation(1000)[:900]] = True
    a[1, rng.permutation(1000)[:500]] = True
    b = np.zeros((2, 1000), dtype=bool)
    b[:, rng.permutation(1000)[:650]] = True
    return torch.tensor(a), torch.tensor(b)


def close_call(seed: int, seeds: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """`seeds` identical seeds per model (seed resampling changes nothing); A right and B wrong on 11 of 1,000
    sentences, B right and A wrong on 9, everything else shared: d = 0.002, well within the sentence noise."""
    rng = np.random.default_rng(seed)
    a = rng.random(1000) < 0.7
    b = a.copy()
    split = rng.permutation(1000)[:20]
    a[split[:11]], b[split[:11]] = True, False
    a[split[11:]], b[split[11:]] = False, True
    return torch.tensor(np.repeat(a[None], seeds, 0)), torch.tensor(np.repeat(b[None], seeds, 0))


def _close_call_tails() -> dict[str, float]:
    """Exact chances, for one resample of `close_call`'s sentences, that d* - d lands in each tail: with X and Y
    the resampled counts of A's 11 and B's 9 sentences (a multinomial), (X - Y - 2) / 1000 is d* - d."""
    tails = {"two-sided": 0.0, "two-sided, strict": 0.0, "upper": 0.0, "lower": 0.0, "upper, strict": 0.0,
             "lower, strict": 0.0}
    n, pa, pb = 1000, 11 / 1000, 9 / 1000
    for x in range(90):
        for y in range(90):
            mass = math.exp(math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(y + 1) - math.lgamma(n - x - y + 1)
                            + x * math.log(pa) + y * math.log(pb) + (n - x - y) * math.log1p(-pa - pb))
            gap = x - y - 2
            for name, hit in (("two-sided", abs(gap) >= 2), ("two-sided, strict", abs(gap) > 2),
                              ("upper", gap >= 2), ("lower", gap <= -2), ("upper, strict", gap > 2),
                              ("lower, strict", gap < -2)):
                tails[name] += mass * hit
    return tails


CLOSE_CALL = _close_call_tails()


def one_sided(student) -> bool:
    """Whether paired_seed_test's p counts one tail only: on `close_call`, where two-sided p is about 0.74, its
    count of extreme resamples is a plausible Binomial(2000, one tail's chance) and not a two-sided one."""
    a, b = close_call(46)
    _, p = student_test(student, a, b, n_resamples=2000, seed=5)
    count = p * 2001 - 1
    two_low = binomial_range(2000, CLOSE_CALL["two-sided, strict"])[0]
    low = binomial_range(2000, min(CLOSE_CALL["upper, strict"], CLOSE_CALL["lower, strict"]))[0]
    high = binomial_range(2000, max(CLOSE_CALL["upper"], CLOSE_CALL["lower"]))[1]
    return low <= count <= high < two_low


ONE_SIDED = ("p counts the resamples beyond |d| on ONE side only: the test asks whether A and B differ in either "
             "direction, so count |d* - d| >= |d| (both tails)")


def assert_finds_a_planted_difference(student, resamples: int = 1000) -> float:
    a, b = planted_difference(40)
    difference, p = student_test(student, a, b, n_resamples=resamples, seed=0)
    assert math.isclose(difference, 0.03, abs_tol=TOL) and p < 0.01, (
        "not credited until a planted difference (A right on 30 more of 1,000 sentences, the rest shared) is found")
    return p


@pytest.mark.check(cell="paired_seed_test_checks", points=1.0,
                   feedback="the difference is A's seed-averaged accuracy minus B's (A - B), each model with its "
                            "own number of seeds")
def test_difference_of_seed_averaged_accuracies(student):
    rng = np.random.default_rng(41)
    a, b = torch.tensor(rng.random((3, 200)) < 0.8), torch.tensor(rng.random((2, 200)) < 0.6)
    difference = student_test(student, a, b, n_resamples=100, seed=1)[0]
    assert math.isclose(difference, float(a.double().mean() - b.double().mean()), abs_tol=TOL), (
        "the difference is not A's mean accuracy minus B's")


@pytest.mark.check(cell="paired_seed_test_checks", points=1.0,
                   feedback="pair the models: each resample draws the sentences ONCE for both; and centre the "
                            "resampled differences on the observed one (|d* - d| >= |d|)")
def test_planted_difference_is_significant(student):
    assert_finds_a_planted_difference(student)
    a, b = planted_difference(42, favour_a=False)
    difference, p = student_test(student, a, b, n_resamples=1000, seed=2)
    assert difference < 0 and p < 0.01, "a planted difference in B's favour was not found"


@pytest.mark.check(cell="paired_seed_test_checks", points=1.5,
                   feedback="resample each model's SEEDS too (K with replacement, each model on its own): a gap "
                            "that one lucky seed makes is noise; credited once a planted difference is found")
def test_seeds_are_resampled(student):
    assert_finds_a_planted_difference(student)
    a, b = seed_effect(43)
    _, p = student_test(student, a, b, n_resamples=1000, seed=3)
    if p <= 0.25 and one_sided(student):
        raise Diagnosis(ONE_SIDED, f"a gap made by one seed of A got p = {p:.3f}, and p on a close call is one tail's")
    assert p > 0.25, "a gap made by one seed of A (90% and 50% right, against B's 65% and 65%) came out significant"


@pytest.mark.check(cell="paired_seed_test_checks", points=1.5,
                   feedback="resample the SENTENCES in every resample too (the same ones for both models), not only "
                            "the seeds: with one seed per model, resampling seeds alone never moves the difference, "
                            "so any gap would come out significant; credited once a planted difference is found")
def test_sentences_are_resampled_with_the_seeds(student):
    assert_finds_a_planted_difference(student)
    for seeds, seed in ((1, 6), (3, 7)):
        a, b = close_call(47 + seeds, seeds)
        difference, p = student_test(student, a, b, n_resamples=1000, seed=seed)
        # every correct implementation: p >= 0.47 but with chance < 1e-8 (CLOSE_CALL's strict two-sided tail)
        assert p > 0.2, (
            f"with {seeds} identical seed{'s' * (seeds > 1)} per model and A ahead by 11 sentences to 9 of 1,000, "
            f"p = {p:.4f}: a gap that other sentences would often reverse came out significant")


@pytest.mark.check(cell="paired_seed_test_checks", points=1.0,
                   feedback="identical models must get p = 1: every resampled difference is at least as far from "
                            "0 as 0 is (>=, not >); credited once a planted difference is found")
def test_identical_models_get_p_1(student):
    assert_finds_a_planted_difference(student)
    a = torch.tensor(np.random.default_rng(44).random((3, 400)) < 0.75)
    difference, p = student_test(student, a, a.clone(), n_resamples=300, seed=4)
    if p != 1.0 and one_sided(student):
        raise Diagnosis(ONE_SIDED, f"two identical models got p = {p:.3f}")
    assert difference == 0.0 and p == 1.0, "two identical models did not get difference 0 and p = 1"


@pytest.mark.check(cell="paired_seed_test_checks", points=0.5,
                   feedback="p = (1 + the number of extreme resamples) / (1 + n_resamples): the observed data counts "
                            "as one resample, so p is never 0")
def test_p_counts_the_observed_data(student):
    p = assert_finds_a_planted_difference(student, resamples=500)
    assert p > 0, "p is 0"
    count = p * 501 - 1
    assert abs(count - round(count)) < 1e-6 and round(count) >= 0, "p is not (1 + a count) / (1 + n_resamples)"


@pytest.mark.check(cell="paired_seed_test_checks", points=0.5,
                   feedback="draw from your own generator seeded with `seed`: same seed, same p; never the global "
                            "one; credited once a planted difference is found")
def test_paired_seed_test_seed(student):
    assert_finds_a_planted_difference(student)
    a, b = seed_effect(45)
    assert_seeded(student, lambda s: student_test(student, a, b, n_resamples=200, seed=s), "paired_seed_test")


# ----------------------------------------------------------------------------- part 5: verdict


def student_verdict(student, *args, **kwargs) -> str:
    value = student.call("verdict", *args, **kwargs)
    assert isinstance(value, str), "verdict must return one of the three strings"
    return value


def assert_names_who_is_ahead(student) -> None:
    assert student_verdict(student, 0.03, 0.001) == AHEAD_A, "A ahead with p = 0.001 was not called so"
    assert student_verdict(student, -0.02, 0.004) == AHEAD_B, "B ahead with p = 0.004 was not called so"


@pytest.mark.check(cell="verdict_checks", points=0.5,
                   feedback="with p below alpha the sign of the difference (A - B) names the model ahead, in the "
                            "exact words of the table")
def test_verdict_names_the_model_ahead(student):
    assert_names_who_is_ahead(student)


@pytest.mark.check(cell="verdict_checks", points=0.25,
                   feedback="a difference whose p is not below alpha (p >= alpha, p = alpha included) is within "
                            "the noise, whatever its sign or size; credited once the models ahead are named")
def test_verdict_within_the_noise(student):
    assert_names_who_is_ahead(student)
    for difference, p in ((0.03, 0.2), (-0.1, 0.06), (0.0, 1.0), (0.5, 0.07)):
        assert student_verdict(student, difference, p) == NO_DIFFERENCE, (
            "a difference with p not below alpha was called a lead")
    for difference, p, alpha in ((0.03, 0.05, 0.05), (-0.2, 0.1, 0.1)):
        if student_verdict(student, difference, p, alpha=alpha) != NO_DIFFERENCE:
            raise Diagnosis("p equal to alpha is not below alpha: a lead needs p < alpha (strictly), so p = alpha "
                            "is within the noise", f"p = alpha = {alpha} was called a lead")


@pytest.mark.check(cell="verdict_checks", points=0.25,
                   feedback="use the alpha argument, not a fixed 0.05; credited once the models ahead are named")
def test_verdict_alpha_is_an_argument(student):
    assert_names_who_is_ahead(student)
    assert student_verdict(student, 0.03, 0.03, alpha=0.01) == NO_DIFFERENCE, "alpha=0.01 was not used"
    assert student_verdict(student, -0.03, 0.08, alpha=0.1) == AHEAD_B, "alpha=0.1 was not used"


# ----------------------------------------------------------------------------- part 6: finetune_over_seeds
# A planted 3-class task (8 features, Gaussian classes) and `bertcourse.evaluation.tiny_classifier` models built in
# the worker through the notebook's `partial`. Each check reads one property and is blind to the others, so one
# mistake costs one check:
# - what the models saw, in which order and mode, from the model's own log (`log=`, read back as data): the modes
#   at training and at evaluation, the batch order of each epoch (any generator of the student's own, any way of
#   drawing a permutation);
# - the models as built (lr = 0 and epochs = 0: a hard-coded learning rate or epoch count changes nothing), compared
#   with the judge's own `torch.manual_seed(s)` then build;
# - what training did, on batches that are all the same (so that no order, and no generator, can change it) and a
#   fixed initialisation, compared with the judge's run of the recipe; a check accepts the runs of the mistakes
#   it is not about (a loss summed over the batch, a model carried over), which other checks catch. Trained rows
#   may differ from the reference on at most TRAINED_SLACK of the examples (another correct way of writing the
#   loss may round differently); every misconception proven in tests/checks moves 10% or more.

TRAINED_SLACK = 0.02
N_FEATURES, N_CLASSES = 8, 3


def planted_task(seed: int = 1, batches: int = 8, batch: int = 12, n_eval: int = 400):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(N_CLASSES, N_FEATURES, generator=g)

    def draw(n):
        y = torch.randint(N_CLASSES, (n,), generator=g)
        return means[y] + 1.6 * torch.randn(n, N_FEATURES, generator=g), y

    x, y = draw(batches * batch)
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(y), batch)], draw(n_eval)


TRAIN, EVAL = planted_task()
ORDERED, _ = planted_task(seed=2, batches=12, batch=4)  # twelve batches: two orders coincide with chance 1/12!
SAME = planted_task(seed=3, batches=1, batch=24)[0] * 6  # six copies of one batch: every order trains alike


def reference_rows(train, seeds, *, epochs=1, lr=0.1, summed=False, carried=False, **model) -> torch.Tensor:
    """The recipe of the contract, run in the judge (`summed`: the loss summed over the batch; `carried`: the
    first seed's model trained on for every seed, two mistakes that other checks catch)."""
    from bertcourse.evaluation import tiny_classifier

    state, rows, net = torch.random.get_rng_state(), [], None
    for seed in seeds:
        torch.manual_seed(seed)
        built = tiny_classifier(N_FEATURES, N_CLASSES, **model)
        net = net if carried and net is not None else built
        optimizer = torch.optim.SGD(net.parameters(), lr=lr)
        order = torch.Generator().manual_seed(seed)
        net.train()
        for _ in range(epochs):
            for i in torch.randperm(len(train), generator=order).tolist():
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(net(train[i][0]), train[i][1],
                                                  reduction="sum" if summed else "mean").backward()
                optimizer.step()
        net.eval()
        with torch.no_grad():
            rows.append(net(EVAL[0]).argmax(-1) == EVAL[1])
    torch.random.set_rng_state(state)
    return torch.stack(rows)


def run_student(student, train, seeds, *, epochs=1, lr=0.1, log=None, **model):
    if log is not None:
        model["log"] = log
    make_model = student.call("partial", student.ref("tiny_classifier"), N_FEATURES, N_CLASSES, **model)
    return student.call("finetune_over_seeds", make_model, train, EVAL, list(seeds), epochs=epochs, lr=lr)


def as_rows(value, seeds, strict: bool) -> torch.Tensor:
    """The student's table as a bool tensor; `strict=False` reads predicted classes as right/wrong (returning
    predictions is one mistake, which `test_rows_are_each_seeds_correctness` alone grades)."""
    if isinstance(value, (list, tuple)):
        try:
            value = torch.tensor([[int(v) for v in row] for row in value])
        except (TypeError, ValueError):
            raise AssertionError("finetune_over_seeds must return a (seeds, examples) table of True/False") from None
    assert isinstance(value, torch.Tensor) and tuple(value.shape) == (len(seeds), len(EVAL[1])), (
        "finetune_over_seeds must return one row per seed and one column per evaluation example")
    if not strict and value.dtype != torch.bool and not value.is_floating_point() and int(value.max()) > 1:
        value = value == EVAL[1]
    assert value.dtype == torch.bool or bool(((value == 0) | (value == 1)).all()), (
        "finetune_over_seeds must return whether each example was predicted right (True/False), "
        "not the predictions or the logits")
    return value.bool()


def student_rows(student, train, seeds, *, strict: bool = False, **options) -> torch.Tensor:
    return as_rows(run_student(student, train, seeds, **options), seeds, strict)


def rows_differ(got: torch.Tensor, expected: torch.Tensor, slack: float) -> float:
    """The largest share of examples on which a row differs from the reference, when above `slack` (else 0)."""
    worst = max(float((row != ref).double().mean()) for row, ref in zip(got, expected, strict=True))
    return worst if worst > slack else 0.0


def assert_rows(got: torch.Tensor, expected: torch.Tensor, seeds, slack: float, what: str) -> None:
    for seed, row, ref in zip(seeds, got, expected, strict=True):
        differ = float((row != ref).double().mean())
        assert differ <= slack, f"{what}: the row of seed {seed} differs on {differ:.1%} of the examples"


def assert_trained_as(got: torch.Tensor, seeds, accepted: list[dict], what: str, **options) -> None:
    """The rows are those of the recipe, or of a mistake in `accepted[1:]` (caught by another check)."""
    worst = [rows_differ(got, reference_rows(SAME, seeds, init_seed=0, **options, **variant), TRAINED_SLACK)
             for variant in accepted]
    assert min(worst) == 0.0, f"{what}: a row differs from the recipe's on {worst[0]:.1%} of the examples"


def student_log(student, train, seeds, **options) -> list:
    log = student.put([])
    run_student(student, train, seeds, log=log, **options)
    return student.get(log)


def batch_index(values: list[float], train) -> int | None:
    """Which batch of `train` a forward pass saw (by its first input column), None for another input."""
    for i, (inputs, _) in enumerate(train):
        column = inputs[:, 0].tolist()
        if len(values) == len(column) and all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(values, column)):
            return i
    return None


EVAL_COLUMN = {round(v, 4) for v in EVAL[0][:, 0].tolist()}


def passes(log: list, train) -> list[list[int]]:
    """The forward passes of a one-seed run on training batches in training mode (a look at the training batches in
    eval mode, to monitor, is no step), as batch indices, cut into passes over all the batches."""
    seen = [batch_index(entry[2], train) for entry in log if entry[0] == "forward" and entry[1]]
    seen = [i for i in seen if i is not None]
    return [seen[k:k + len(train)] for k in range(0, len(seen), len(train))]


@pytest.mark.check(cell="finetune_checks", points=1.0,
                   feedback="one row per seed, in the order of `seeds`, and in it, for each evaluation example, "
                            "whether the model's most likely class is its label: right/wrong, not the predictions")
def test_rows_are_each_seeds_correctness(student):
    seeds = [1, 2, 3]
    got = student_rows(student, TRAIN, seeds, strict=True, epochs=0, lr=0.0, init_seed=0)
    assert_rows(got, reference_rows(TRAIN, seeds, epochs=0, lr=0.0, init_seed=0), seeds, 0.0,
                "untrained (epochs = 0), each model starting from the same weights")


@pytest.mark.check(cell="finetune_checks", points=1.5,
                   feedback="each seed gets a new model whose initial weights come from that seed (the global "
                            "generator seeded with it just before the model is built); seeding once for all runs, or "
                            "carrying a model over, ties the seeds")
def test_each_model_initialised_from_its_seed(student):
    seeds = [7, 3, 7]
    got = student_rows(student, TRAIN, seeds, epochs=0, lr=0.0)
    assert_rows(got, reference_rows(TRAIN, seeds, epochs=0, lr=0.0), seeds, 0.0, "untrained (epochs = 0)")


@pytest.mark.check(cell="finetune_checks", points=1.0,
                   feedback="the evaluation ran with dropout still on (the model left in training mode): its "
                            "predictions are random draws, not the model's")
def test_evaluated_in_eval_mode(student):
    log = [entry for entry in student_log(student, ORDERED, [1], dropout=0.5) if entry[0] == "forward"]
    trained = [k for k, entry in enumerate(log) if batch_index(entry[2], ORDERED) is not None]
    after = log[trained[-1] + 1:] if trained else log  # the evaluation that gives the rows follows the training
    modes = [entry[1] for entry in after if {round(v, 4) for v in entry[2]} <= EVAL_COLUMN]
    assert modes, "the model was never run on the evaluation examples after training"
    assert not any(modes), "after training, the model was run on the evaluation examples with dropout on"


@pytest.mark.check(cell="finetune_checks", points=1.0,
                   feedback="the model trained in the mode it arrived in: a model may come in evaluation mode, as "
                            "a loaded checkpoint does, and dropout must be on while it learns")
def test_trained_in_training_mode(student):
    log = student_log(student, ORDERED, [1], dropout=0.5, training=False)
    modes = [entry[1] for entry in log if entry[0] == "forward" and batch_index(entry[2], ORDERED) is not None]
    assert modes, "the model was never run on the training batches"
    # one epoch: a step on each of the batches, each in training mode (other looks, in eval mode, may be extra)
    assert sum(modes) >= len(ORDERED), (
        f"a model handed over in eval mode had dropout on in {sum(modes)} of its {len(modes)} forward passes on the "
        f"{len(ORDERED)} training batches")


@pytest.mark.check(cell="finetune_checks", points=1.0,
                   feedback="the batch order is drawn from the seed alone, by a generator of your own: the same seed "
                            "gives the same order whatever model is built and whatever was drawn before (torch's "
                            "global generator has served the model by then), and two seeds give two orders")
def test_data_order_drawn_from_each_seed(student):
    first = {}
    for name, seed, hidden in (("5", 5, 16), ("5 again", 5, 16), ("9", 9, 16), ("5, a wider model", 5, 24)):
        runs = passes(student_log(student, ORDERED, [seed], hidden=hidden), ORDERED)
        assert runs and sorted(runs[0]) == list(range(len(ORDERED))), (
            "the first epoch did not go through every training batch once")
        first[name] = runs[0]
    assert first["5"] == first["5 again"], "seed 5 gave another batch order when run again"
    assert first["5"] == first["5, a wider model"], (
        "seed 5 gave another batch order to a model whose building draws more numbers from torch's global generator")
    assert first["5"] != first["9"], "seeds 5 and 9 went through the batches in the same order"


@pytest.mark.check(cell="finetune_checks", points=0.5,
                   feedback="each epoch draws a new order of the batches (from the seed's own generator, made once "
                            "per seed): one order reused every epoch repeats the same path; credited once an epoch "
                            "goes through every batch")
def test_new_batch_order_each_epoch(student):
    for seed in (5, 9):
        runs = passes(student_log(student, ORDERED, [seed], epochs=3), ORDERED)
        assert runs and sorted(runs[0]) == list(range(len(ORDERED))), (
            "not credited until an epoch goes through every training batch once")
        assert all(a != b for a, b in zip(runs, runs[1:])), (
            f"with seed {seed}, an epoch went through the batches in the order of the epoch before")


@pytest.mark.check(cell="finetune_checks", points=0.5,
                   feedback="a fresh optimizer for every seed's model: an optimizer made once holds the first model's "
                            "parameters (and its state), so later seeds do not train")
def test_fresh_optimizer_per_seed(student):
    seeds = [5, 9]
    got = student_rows(student, SAME, seeds, init_seed=0)
    assert_trained_as(got, seeds, [{}, {"summed": True}, {"carried": True}, {"carried": True, "summed": True}],
                      "two seeds trained one after the other from the same weights")


@pytest.mark.check(cell="finetune_checks", points=0.5,
                   feedback="use the lr and epochs arguments: plain SGD at that learning rate, every batch once per "
                            "epoch")
def test_lr_and_epochs_are_arguments(student):
    seeds = [4]
    got = student_rows(student, SAME, seeds, lr=0.03, epochs=3, init_seed=0)
    assert_trained_as(got, seeds, [{}, {"summed": True}], "with lr = 0.03 and 3 epochs", lr=0.03, epochs=3)


@pytest.mark.check(cell="finetune_checks", points=1.0,
                   feedback="each step's loss is the cross-entropy of the batch's logits against its labels, averaged "
                            "over the batch: a sum over the batch makes every step batch-size times too long")
def test_loss_is_the_batch_mean(student):
    seeds = [4]
    got = student_rows(student, SAME, seeds, init_seed=0)
    if rows_differ(got, reference_rows(SAME, seeds, init_seed=0), TRAINED_SLACK):
        summed = not rows_differ(got, reference_rows(SAME, seeds, init_seed=0, summed=True), TRAINED_SLACK)
        raise AssertionError("the models trained as with a loss summed over the batch, not its mean" if summed else
                             "the trained model is not the one the mean cross-entropy gives (lr and epochs as given)")


# ----------------------------------------------------------------------------- part 7: your own comparison
# The notebook's part 7 runs the student's functions on the course's real models, but not while grading (minutes of
# training have no place in a batch): the student records the numbers the run printed, and these checks grade the
# conclusion against those numbers, recomputing what they allow. Each option's meaning, by its letter:

WWM_OPTIONS = {"a": "token-level", "b": "cannot tell", "c": "whole-word", "d": "overclaim"}
SEEDS_OPTIONS = {"a": "no difference", "b": "bert", "c": "overclaim", "d": "gpt"}
OWN_ALPHA = 0.05  # the notebook's verdict runs at its default alpha


def recorded(student, name: str, count: int) -> list[float]:
    """The numbers the student recorded from their run, as floats."""
    value = student.value(name)
    assert value is not None, f"`{name}` was not recorded"
    values = numbers(value, count, f"`{name}`")
    assert all(math.isfinite(v) for v in values), f"`{name}` holds a number that is not finite"
    return values


def wwm_allows(low: float, high: float) -> str:
    """What a 95% interval of the whole-word BERT's loss minus the token-level BERT's allows (lower loss is better)."""
    return "whole-word" if high < 0 else "token-level" if low > 0 else "cannot tell"


def seeds_allow(difference: float, p: float) -> str:
    """What BERT's seed-averaged accuracy minus GPT's, with its p, allows."""
    return "no difference" if p >= OWN_ALPHA else "bert" if difference > 0 else "gpt"


OVERCLAIM = ("one run of two models on one data set measures those two models there: it says nothing about every "
             "model size or every label budget, whatever the numbers")


def diagnose_conclusion(chosen: str | None, right: str, ahead: tuple[str, str], what: str) -> None:
    """The hint for a conclusion that does not follow from the recorded numbers, by the mistake it shows."""
    if chosen == right:
        return
    if chosen == "overclaim":
        raise Diagnosis(OVERCLAIM, f"your {what} conclusion claims more than one run can show")
    if set(ahead) == {chosen, right}:
        raise Diagnosis(f"the sign: your recorded difference is {ahead[0]} minus {ahead[1]}; read which model it "
                        "puts ahead, and for a loss, which way is better", f"your {what} conclusion names the "
                        "other model")
    if right in ahead:
        raise Diagnosis("your recorded numbers put one model ahead beyond the noise (the interval excludes 0, or p is "
                        "below alpha): a conclusion of no difference undersells them",
                        f"your {what} conclusion says no model is ahead")
    raise Diagnosis("your recorded numbers cannot tell the two models apart (the interval contains 0, or p is not "
                    "below alpha): a model ahead is more than they show", f"your {what} conclusion names a model ahead")


@pytest.mark.check(cell="own_comparison_checks", points=1.0,
                   feedback="your conclusion on lesson 2's BERTs must follow from YOUR recorded interval of the "
                            "whole-word model's loss minus the token-level model's: the sign names the lower loss, "
                            "an interval that contains 0 cannot tell them apart")
def test_conclusion_on_lesson2_follows_your_interval(student):
    difference, low, high = recorded(student, "wwm_measured", 3)
    assert low <= difference <= high and low < high, (
        "`wwm_measured` is not (difference, low, high) with the difference inside its interval")
    chosen = WWM_OPTIONS.get(concept_answer(student, "answer_wwm"))
    diagnose_conclusion(chosen, wwm_allows(low, high), ("whole-word", "token-level"), "lesson 2")


@pytest.mark.check(cell="own_comparison_checks", points=1.0,
                   feedback="your conclusion on the shipped BERT and GPT must follow from YOUR recorded difference "
                            "(BERT minus GPT) and p: a model is ahead beyond the noise only when p is below alpha, "
                            "and then the sign names it")
def test_conclusion_on_the_shipped_models_follows_your_test(student):
    difference, p = recorded(student, "seeds_measured", 2)
    assert 0 < p <= 1, "`seeds_measured` is not (difference, p) with p in (0, 1]"
    chosen = SEEDS_OPTIONS.get(concept_answer(student, "answer_seeds"))
    diagnose_conclusion(chosen, seeds_allow(difference, p), ("bert", "gpt"), "fine-tuning")


# ----------------------------------------------------------------------------- part 8: questions


@pytest.mark.check(cell="concepts_checks", points=1.0,
                   feedback="Q1: ask what was drawn at random when the test set was made, and what the items of "
                            "one draw share")
def test_q1_resampling_unit_of_a_grouped_test_set(student):
    assert concept_answer(student, "answer_q1") == "d"


@pytest.mark.check(cell="concepts_checks", points=1.0,
                   feedback="Q2: ask which source of noise a test with one seed per model never sees")
def test_q2_what_a_one_seed_test_shows(student):
    assert concept_answer(student, "answer_q2") == "b"
