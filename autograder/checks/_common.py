"""Helpers the hidden checks of every exercise may share; the judge makes this module importable for each
check module (`from _common import ...`), and a change to it regrades a batch like a change to the checks.

Today ex01 (token masking) and ex02 (whole-word masking) share the ids, the exact statistical bounds, the
validity test that side conditions (types, inputs untouched, seeds) need, the 80/10/10 share tests and the
checks of random replacements; the shares are counted over positions in ex01 and over words in ex02.

Every bound here holds for EVERY correct implementation, whatever the order of its random draws, with a
false-alarm chance of at most `TAIL` per side and statistic (the grading seeds are fixed, so a result
never changes between regrades; these tails make a wrong verdict on a correct submission < 1e-6 overall).
"""

from __future__ import annotations

import fractions
import math

import torch

from bertcourse.grading import NotData, StudentError

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103  # bert-base-uncased's ids: the specials are not contiguous
SPECIAL = [PAD, UNK, CLS, SEP, MASK]
VOCAB = 30_522
IGNORE = -100
TAIL = 1e-8  # per side, per rate
SMALL_VOCAB = 120  # 115 allowed ids: a draw over all ids hits a special often, and each id is drawn often
# A random replacement equal to the original id looks "kept": with VOCAB that moves ~1/30,000 of the random
# share to the kept share, which this slack (a fraction of the trials) absorbs.
SLACK = 1e-3
DEFAULTS = {"select_prob": 0.15, "mask_prob": 0.8, "random_prob": 0.1}  # the masking functions' defaults


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


def tensor(value, what: str) -> torch.Tensor:
    """A student's result as a detached float tensor, or a failure saying it was not a tensor."""
    assert isinstance(value, torch.Tensor), f"{what} must return a tensor, got {type(value).__name__}"
    return value.detach().float()


def shaped(value, shape: tuple[int, ...], what: str) -> torch.Tensor:
    """`tensor(value)` checked to have `shape` (the message names the function, not the expected values)."""
    got = tensor(value, what)
    assert tuple(got.shape) == shape, f"{what} gave shape {tuple(got.shape)}, expected {shape}"
    return got


def percent(part: int, whole: int) -> str:
    """`part` of `whole` as a percentage for a message."""
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
    """A side condition is credited only for a function that masks (see `masking_problem`)."""
    problem = masking_problem(ids, eligible, inputs, labels)
    assert not problem, f"not credited until the function masks: {problem}"



def call_masking(student, function: str, ids: torch.Tensor, marks: torch.Tensor, seed: int = 0, generator=None,
                 vocab_size: int = VOCAB, **probs) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) of the student's masking `function(ids, marks, ...)` (marks: the special-tokens mask or
    the word ids), with the DEFAULTS unless `probs` says otherwise, drawing from `generator` or a new one."""
    result = student.call(
        function, ids, marks, mask_token_id=MASK, vocab_size=vocab_size, special_ids=SPECIAL,
        generator=generator if generator is not None else student.generator(seed), **{**DEFAULTS, **probs},
    )
    return unpack(result, function, ids.shape)


def call_with_own_defaults(student, function: str, ids, marks, seed: int):
    """The raw result of the student's masking `function(ids, marks, ...)` without probabilities (its own
    defaults); `ids` and `marks` may be handles on tensors placed in the worker."""
    return student.call(function, ids, marks, mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIAL,
                        generator=student.generator(seed))


def assert_two_int64_tensors(result) -> None:
    """The function returned int64 tensors (after `unpack` found two of the right shape)."""
    dtypes = (result[0].dtype, result[1].dtype)
    assert dtypes == (torch.long, torch.long), f"the tensors returned have dtypes {dtypes[0]} and {dtypes[1]}"


def assert_inputs_not_modified(student, function: str, ids: torch.Tensor, marks: torch.Tensor,
                               eligible: torch.Tensor, marks_name: str) -> None:
    """Calling the student's masking `function` leaves both of its input tensors as they were (credited
    only for a function that masks)."""
    ids_handle, marks_handle = student.put(ids), student.put(marks)
    result = call_with_own_defaults(student, function, ids_handle, marks_handle, seed=2)
    assert_masking(ids, eligible, *unpack(result, function, ids.shape))
    assert torch.equal(student.get(ids_handle), ids), "input_ids was modified"
    assert torch.equal(student.get(marks_handle), marks), f"{marks_name} was modified"


def assert_specials_untouched(ids: torch.Tensor, special: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor,
                              what: str) -> None:
    """Some position was selected, and none of the `special` ones (`what`, in the message) got a label or
    was changed."""
    assert bool((labels[~special] != IGNORE).any()), "no position was selected at all"
    labelled, changed = int((labels[special] != IGNORE).sum()), int((inputs[special] != ids[special]).sum())
    assert labelled == 0 and changed == 0, (
        f"of {int(special.sum())} {what}, {labelled} got a label and {changed} were changed")


# Another [MASK] id and another set of specials (a tokenizer other than bert-base-uncased's): ids 0-59 of
# SMALL_VOCAB are special, [MASK] is 4, so random ids come from 60-119, where 100-103 are ordinary ids.
OTHER_MASK, OTHER_SPECIAL = 4, list(range(60))


def assert_mask_and_special_ids_are_arguments(student, function: str, ids: torch.Tensor, marks: torch.Tensor,
                                              eligible: torch.Tensor) -> None:
    """With mask_token_id=OTHER_MASK and special_ids=OTHER_SPECIAL (half [MASK], half random), the [MASK] positions
    show OTHER_MASK (not bert's 103) and no random id is one of OTHER_SPECIAL (credited once it masks)."""
    result = student.call(function, ids, marks, mask_token_id=OTHER_MASK, vocab_size=SMALL_VOCAB,
                          special_ids=OTHER_SPECIAL, generator=student.generator(17), select_prob=0.5, mask_prob=0.5,
                          random_prob=0.5)
    inputs, labels = unpack(result, function, ids.shape)
    assert_masking(ids, eligible, inputs, labels)
    changed = eligible & (inputs != ids)
    shows_given, shows_103 = int((changed & (inputs == OTHER_MASK)).sum()), int((changed & (inputs == MASK)).sum())
    # a correct function shows 103 only as a random id (1 in 60 of them): far fewer than a quarter
    assert shows_given > 0 and shows_103 <= shows_given // 4, (
        f"with mask_token_id={OTHER_MASK}, {shows_given} positions show it and {shows_103} show id {MASK}")
    drawn = inputs[changed & (inputs != OTHER_MASK)]
    hits = int(torch.isin(drawn, torch.tensor(OTHER_SPECIAL)).sum())
    assert drawn.numel() > 0 and hits == 0, (
        f"with special_ids = 0, 1, ..., {OTHER_SPECIAL[-1]}, {hits} of {drawn.numel()} random replacements are "
        f"among them")


# ----------------------------------------------------------------------------- the 80/10/10 shares
# `c` counts the selected units (positions in ex01, words in ex02): "selected", and of those "masked"
# (show [MASK]), "random" (a random id) and "kept" (their own id, still labelled).


def kept_unlabelled(c: dict[str, int], probs: dict[str, float]) -> bool:
    """The 'labels only where the input changed' pattern: no kept unit at all, while [MASK] and random stand
    in the mask_prob : random_prob proportion. Then the kept share lost its labels, which the kept-share
    check reports; the [MASK] and random shares themselves are right."""
    share = probs["mask_prob"] / (probs["mask_prob"] + probs["random_prob"])
    return c["kept"] == 0 and 0 < share < 1 and rate_ok(c["masked"], c["masked"] + c["random"], share)


def mask_share_ok(c: dict[str, int], probs: dict[str, float]) -> bool:
    """A share mask_prob of the selected units shows [MASK] (or only the kept share lost its labels)."""
    return rate_ok(c["masked"], c["selected"], probs["mask_prob"]) or kept_unlabelled(c, probs)


def random_share_ok(c: dict[str, int], probs: dict[str, float]) -> bool:
    """A share random_prob of the selected units shows a random id (or only the kept share lost its labels)."""
    return rate_ok(c["random"], c["selected"], probs["random_prob"], slack=SLACK) or kept_unlabelled(c, probs)


def kept_share_ok(c: dict[str, int], probs: dict[str, float]) -> bool:
    """The rest of the selected units, 1 - mask_prob - random_prob, keep their own id (and their label)."""
    return rate_ok(c["kept"], c["selected"], 1.0 - probs["mask_prob"] - probs["random_prob"], slack=SLACK)


# ----------------------------------------------------------------------------- random replacements


def assert_no_special_replacements(ids: torch.Tensor, eligible: torch.Tensor, inputs: torch.Tensor) -> None:
    """No random replacement at an eligible position is a special id (other than [MASK] itself)."""
    replaced = eligible & (inputs != ids) & (inputs != MASK)
    assert int(replaced.sum()) > 0, "no position shows a random id"
    drawn = inputs[replaced]
    hits = {s: int((drawn == s).sum()) for s in SPECIAL if s != MASK}
    assert not any(hits.values()), (
        f"of {len(drawn)} random replacements, " + ", ".join(f"{n} are id {s}" for s, n in hits.items() if n)
        + f" (special_ids are {SPECIAL})")


def assert_uniform_replacements(ids: torch.Tensor, eligible: torch.Tensor, inputs: torch.Tensor,
                                vocab_size: int) -> torch.Tensor:
    """Random replacements are uniform over the allowed ids: given that a position shows a random id other
    than its original (an allowed id), that id is uniform over the other allowed ids, for every correct
    implementation, so each id's count is Binomial(positions whose original differs, 1 / (allowed - 1)).
    Returns the positions that show such a replacement."""
    allowed = allowed_ids(vocab_size)
    changed = eligible & (inputs != ids)
    outside = changed & ((inputs < 0) | (inputs >= vocab_size))
    assert not bool(outside.any()), (
        f"{int(outside.sum())} random replacements lie outside range(vocab_size={vocab_size})")
    trial = changed & torch.isin(inputs, allowed)
    assert int(trial.sum()) > 0, "no position shows a random id"
    drawn, original = inputs[trial], ids[trial]
    tail = TAIL / len(allowed)  # a union bound over the allowed ids keeps the whole check's chance < 2 * TAIL
    off = []
    for token in allowed.tolist():
        lo, hi = binomial_range(int((original != token).sum()), 1.0 / (len(allowed) - 1), tail)
        count = int((drawn == token).sum())
        if not lo <= count <= hi:
            off.append((token, count))
    never = [token for token, count in off if count == 0]
    assert not off, (
        f"of {len(drawn)} random replacements, {len(off)} of the {len(allowed)} allowed ids come up far too "
        f"often or too rarely" + (f"; {len(never)} never come up (e.g. ids {never[:5]})" if never else "")
        + f"; the most frequent: {sorted(off, key=lambda t: -t[1])[:3]} (id, count)")
    return trial


def concept_answer(student, name: str) -> str:
    """A concept question's answer as a lower-case letter: "B", " b " and "(b)" all read as b."""
    value = student.value(name)
    assert isinstance(value, str), f'`{name}` must be a string such as "a"'
    return value.strip().lower().strip("()")


def numeric_answer(student, name: str) -> float:
    """A numeric answer as a float, in any of the forms a student may write it: an int or a float, a numpy
    number or a one-element tensor, a `fractions.Fraction` (or anything else with `__float__`), or a string
    such as "12", "7/4", "0.75" or "1,234,567". None, booleans and anything unreadable fail with a message."""
    try:
        value = student.value(name)
    except NotData:  # a Fraction, a Decimal, ...: not plain data, but a number all the same
        try:
            value = student.call_method(student.ref(name), "__float__")
        except StudentError:
            raise AssertionError(f"`{name}` is not a number") from None
    assert value is not None, f"`{name}` is not set yet"
    if isinstance(value, torch.Tensor):
        assert value.numel() == 1, f"`{name}` must be one number, not a tensor of {value.numel()}"
        value = value.item()
    if isinstance(value, str):
        text = value.strip().replace(",", "").replace("_", "").replace(" ", "")
        try:
            value = fractions.Fraction(text)
        except (ValueError, ZeroDivisionError):
            raise AssertionError(f"`{name}` = {value[:40]!r} cannot be read as a number "
                                 '(write e.g. 12.5, 0.75 or "7/4")') from None
    assert isinstance(value, (int, float, fractions.Fraction)) and not isinstance(value, bool), (
        f"`{name}` must be a number, got {type(value).__name__}")
    value = float(value)
    assert math.isfinite(value), f"`{name}` is {value}, not a finite number"
    return value


# ----------------------------------------------------------------------------- bootstrap intervals (ex05, ex08)


def exact_quantile(n: int, correct: int, level: float) -> float:
    """The `level` quantile of Binomial(n, correct/n) / n: the exact bootstrap distribution of accuracy."""
    p = correct / n
    total = 0.0
    for k in range(n + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                          + (k * math.log(p) if k else 0.0) + ((n - k) * math.log1p(-p) if n - k else 0.0))
        if total >= level:
            return k / n
    return 1.0


def accepted_quantile(n: int, correct: int, level: float, resamples: int, tail: float = TAIL) -> tuple[float, float]:
    """[lowest, highest] value the `level` quantile of `resamples` bootstrap scores may take (`tail` per side):
    the rank of that quantile among the draws moves by the binomial spread of a count, plus 2 for the quantile
    definition."""
    lo, hi = binomial_range(resamples, level, tail)
    return (exact_quantile(n, correct, max((lo - 2) / resamples, 1e-12)),
            exact_quantile(n, correct, min((hi + 2) / resamples, 1.0)))


def binomial_interval_ok(got: tuple[float, float], n: int, correct: int, alpha: float, resamples: int,
                         tail: float = TAIL) -> bool:
    """Whether (low, high) from `resamples` percentile-bootstrap draws can be the alpha/2 and 1 - alpha/2
    quantiles of a statistic whose bootstrap distribution is exactly Binomial(n, correct/n) / n (an accuracy,
    or the mean of 0/1 differences), for any correct implementation and any usual quantile definition."""
    (lo_min, lo_max), (hi_min, hi_max) = (accepted_quantile(n, correct, alpha / 2, resamples, tail),
                                          accepted_quantile(n, correct, 1 - alpha / 2, resamples, tail))
    return lo_min - 1e-9 <= got[0] <= lo_max + 1e-9 and hi_min - 1e-9 <= got[1] <= hi_max + 1e-9


def global_draws(student) -> list:
    """One number from each global generator the notebook can reach (torch, random, numpy if imported)."""
    draws = [student.call_method(student.ref("torch"), "rand", 2).tolist(),
             student.call_method(student.ref("random"), "random")]
    if student.has("np"):
        draws.append(student.call_method(student.getattr(student.ref("np"), "random", as_remote=True), "rand"))
    return draws


def reseed_globals(student, seed: int) -> None:
    student.call_method(student.ref("torch"), "manual_seed", seed)
    student.call_method(student.ref("random"), "seed", seed)
    if student.has("np"):
        student.call_method(student.getattr(student.ref("np"), "random", as_remote=True), "seed", seed)
