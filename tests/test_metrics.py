"""bertcourse.metrics agrees with scikit-learn, the official SQuAD v1.1 script and the exact formulas.

Property-based (hypothesis): random labels drawn from pools with gaps, negative ints or strings, random
`labels=` subsets in random orders, both `zero_division` values and every `average`; plus the edge cases
by name. scikit-learn is a test-only reference here; the SQuAD functions below are the official script's
(evaluate-v1.1.py), copied verbatim.
"""

from __future__ import annotations

import math
import random
import re
import string
import warnings
from collections import Counter
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertcourse import metrics as M
from bertcourse import stats as S

sklearn_metrics = pytest.importorskip("sklearn.metrics")

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
POOLS = [[0, 1, 2], [-3, 0, 2, 7, 10], ["cat", "dog", "eel", "fox"], [5, 6], ["neg", "pos"]]


@st.composite
def label_pairs(draw, min_size=1, max_size=40):
    pool = draw(st.sampled_from(POOLS))
    n = draw(st.integers(min_size, max_size))
    y_true = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    y_pred = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    return pool, y_true, y_pred


def sklearn_prf(y_true, y_pred, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p, r, f, _ = sklearn_metrics.precision_recall_fscore_support(y_true, y_pred, **kwargs)
    if kwargs.get("average") is None:
        return [list(map(float, p)), list(map(float, r)), list(map(float, f))]
    return [float(p), float(r), float(f)]


def assert_close(got, expected, tol=1e-12):
    if isinstance(expected, list):
        assert len(got) == len(expected), (got, expected)
        for g, e in zip(got, expected):
            assert_close(g, e, tol)
    else:
        assert abs(got - expected) <= tol, (got, expected)


# ----------------------------------------------------------------------------- classification vs scikit-learn


@SETTINGS
@given(data=label_pairs(), average=st.sampled_from([None, "macro", "micro", "weighted"]),
       zero_division=st.sampled_from([0, 1]), use_labels=st.booleans(), rnd=st.randoms(use_true_random=False))
def test_precision_recall_f1_matches_sklearn(data, average, zero_division, use_labels, rnd):
    pool, y_true, y_pred = data
    kwargs = {"average": average, "zero_division": zero_division}
    if use_labels:  # a subset of the pool (maybe with labels that never occur) in a random order
        labels = rnd.sample(pool, rnd.randint(1, len(pool)))
        kwargs["labels"] = labels
    assert_close(list(M.precision_recall_f1(y_true, y_pred, **kwargs)), sklearn_prf(y_true, y_pred, **kwargs))


@SETTINGS
@given(data=label_pairs(), zero_division=st.sampled_from([0, 1]))
def test_binary_average_matches_sklearn_or_both_refuse(data, zero_division):
    pool, y_true, y_pred = data
    pos_label = pool[-1]
    try:
        expected = sklearn_prf(y_true, y_pred, average="binary", pos_label=pos_label, zero_division=zero_division)
    except ValueError:
        with pytest.raises(M.MetricsError):
            M.precision_recall_f1(y_true, y_pred, pos_label=pos_label, zero_division=zero_division)
        return
    got = M.precision_recall_f1(y_true, y_pred, average="binary", pos_label=pos_label, zero_division=zero_division)
    assert_close(list(got), expected)


@SETTINGS
@given(data=label_pairs(), use_labels=st.booleans(), rnd=st.randoms(use_true_random=False))
def test_confusion_matrix_matches_sklearn(data, use_labels, rnd):
    pool, y_true, y_pred = data
    labels = rnd.sample(pool, rnd.randint(1, len(pool))) if use_labels else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = sklearn_metrics.confusion_matrix(y_true, y_pred, labels=labels).tolist()
    except ValueError:  # scikit-learn refuses a labels= list with no label of y_true
        with pytest.raises(M.MetricsError):
            M.confusion_matrix(y_true, y_pred, labels=labels)
        return
    got = M.confusion_matrix(y_true, y_pred, labels=labels)
    assert got.dtype == torch.int64 and got.tolist() == expected


@SETTINGS
@given(data=label_pairs())
def test_accuracy_and_mcc_match_sklearn(data):
    _, y_true, y_pred = data
    assert M.accuracy(y_true, y_pred) == pytest.approx(sklearn_metrics.accuracy_score(y_true, y_pred), abs=1e-15)
    assert M.matthews_corrcoef(y_true, y_pred) == pytest.approx(
        sklearn_metrics.matthews_corrcoef(y_true, y_pred), abs=1e-12)


def test_the_conventions_by_name():
    # a label only in the predictions is a class (per-class results in sorted order)
    p, r, f = M.precision_recall_f1([0, 0, 1], [0, 2, 1], average=None)
    assert len(p) == 3 and r == [0.5, 1.0, 0.0] and f[2] == 0.0
    # labels= fixes the order; an unlisted label still counts as a miss of the listed true class
    assert M.precision_recall_f1([1, 1, 3], [1, 3, 3], average=None, labels=[3, 1]).recall == [1.0, 0.5]
    # zero_division: a class never predicted, never present, and neither
    y_true, y_pred = [0, 0, 1], [0, 0, 2]
    assert M.precision_recall_f1(y_true, y_pred, average=None, zero_division=1, labels=[1, 2, 4]) == (
        [1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0])
    # macro-F1 is the mean of the per-class F1s, not the F1 of macro P and R
    y_true, y_pred = [0, 0, 0, 1, 1, 2], [0, 1, 1, 1, 2, 2]
    p, r, f = M.precision_recall_f1(y_true, y_pred, average="macro")
    assert f == pytest.approx(sum(M.precision_recall_f1(y_true, y_pred, average=None).f1) / 3)
    assert f != pytest.approx(2 * p * r / (p + r))
    # micro over every class is accuracy
    assert M.precision_recall_f1(y_true, y_pred, average="micro").f1 == pytest.approx(M.accuracy(y_true, y_pred))
    # inputs may be tensors
    assert M.confusion_matrix(torch.tensor([0, 1]), torch.tensor([1, 1])).tolist() == [[0, 1], [0, 1]]


def test_mcc_is_zero_when_undefined_and_exact_on_large_inputs():
    assert M.matthews_corrcoef([0, 1, 1], [1, 1, 1]) == 0.0
    assert M.matthews_corrcoef([2, 2], [2, 2]) == 0.0
    # 140,000 examples: the product of the four margins reaches 2.4e19, beyond int64's 9.2e18; compare with exact
    # rationals
    tp, tn, fp, fn = 45_000, 40_000, 25_000, 30_000
    assert (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn) > 2 * 2 ** 63
    y_true = [1] * tp + [0] * tn + [0] * fp + [1] * fn
    y_pred = [1] * tp + [0] * tn + [1] * fp + [0] * fn
    exact = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert M.matthews_corrcoef(y_true, y_pred) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda: M.accuracy([0, 1], [0]), "differ in length"),
    (lambda: M.accuracy([], []), "no samples"),
    (lambda: M.precision_recall_f1([0, "a"], [0, 0], average="macro"), "mix strings and numbers"),
    (lambda: M.precision_recall_f1([0, 1, 2], [0, 1, 2]), "at most two labels"),
    (lambda: M.precision_recall_f1([0, 2], [0, 2]), "pos_label=1"),
    (lambda: M.precision_recall_f1([0], [0], average="mean"), "average must be one of"),
    (lambda: M.precision_recall_f1([0], [0], zero_division=0.5), "zero_division"),
    (lambda: M.precision_recall_f1([0], [0], average=None, labels=[0, 0]), "repeats a label"),
    (lambda: M.confusion_matrix([0], [1], labels=[1]), "no label that occurs in y_true"),
    (lambda: M.confusion_matrix("ab", "ab"), "single string"),
    (lambda: M.exact_match("x", []), "no reference"),
    (lambda: M.pass_at_k(5, 6, 1), "0 <= c <= n"),
    (lambda: M.pass_at_k(5, 1, 0), "1 <= k <= n"),
    (lambda: S.bootstrap_ci([0, 1], [0, 1], alpha=1.5), "alpha"),
    (lambda: S.bootstrap_ci([0, 1], [0, 1], "f2"), "unknown metric"),
])
def test_bad_input_is_refused_with_a_clear_error(call, message):
    with pytest.raises(M.MetricsError, match=re.escape(message)):
        call()


# ----------------------------------------------------------------------------- SQuAD v1.1, the official script


def official_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def official_f1_score(prediction, ground_truth):
    prediction_tokens = official_normalize_answer(prediction).split()
    ground_truth_tokens = official_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def official_exact_match_score(prediction, ground_truth):
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


def official_max_over_ground_truths(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, gt) for gt in ground_truths)


PIECES = ["the", "The", "a", "an", "An", "cat", "cat", "sat", "-", ".", ",", "'s", "\u201c", "\u201d", "\u2014",
          " ", "  ", "\t", "\n", "\u00a0", "\u2003", "\u00c9t\u00e9", "THE", "theory", "x", "(", ")", "!"]
answers = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)


@SETTINGS
@given(text=st.one_of(answers, st.text(max_size=30)))
def test_normalize_answer_is_the_official_one(text):
    assert M.normalize_answer(text) == official_normalize_answer(text)


@SETTINGS
@given(prediction=answers, references=st.lists(answers, min_size=1, max_size=4))
def test_exact_match_and_f1_are_the_official_max_over_references(prediction, references):
    assert M.exact_match(prediction, references) == float(
        official_max_over_ground_truths(official_exact_match_score, prediction, references))
    assert M.token_f1(prediction, references) == pytest.approx(
        official_max_over_ground_truths(official_f1_score, prediction, references), abs=1e-15)


def test_squad_cases_by_name():
    assert M.normalize_answer("The-End") == "theend"  # punctuation before articles
    assert M.normalize_answer("\u201cThe\u201d  End") == "\u201c \u201d end"  # curly quotes stay (v1.1)
    assert M.exact_match("The", ["."]) == 1.0 and M.token_f1("The", ["."]) == 0.0  # v1.1 empty answers
    assert M.token_f1("cat cat", "cat") == pytest.approx(2 / 3)  # multiset overlap; a single str reference
    assert M.token_f1("cat sat", ["dog", "the cat sat"]) == 1.0  # the best reference, not the first


# ----------------------------------------------------------------------------- pass@k


def exact_pass_at_k(n, c, k):
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@SETTINGS
@given(st.integers(1, 400).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_unbiased_estimator(nck):
    n, c, k = nck
    assert M.pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), rel=1e-12, abs=1e-15)


def test_pass_at_k_large_n_and_edges():
    for n, c, k in ((10_000, 37, 1000), (20_000, 1, 1), (200_000, 5, 100)):
        assert M.pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), rel=1e-10)
    assert M.pass_at_k(10, 0, 5) == 0.0 and M.pass_at_k(10, 8, 3) == 1.0 and M.pass_at_k(4, 1, 2) == 0.5
    assert M.pass_at_k(4, 1, 2) != 1 - (1 - 1 / 4) ** 2  # not the biased estimator


# ----------------------------------------------------------------------------- bootstrap and paired tests


def sst2_like(n=872, correct=800, seed=0):
    rng = random.Random(seed)
    y_true = [rng.randint(0, 1) for _ in range(n)]
    right = set(rng.sample(range(n), correct))
    return y_true, [t if i in right else 1 - t for i, t in enumerate(y_true)]


@pytest.mark.parametrize("name, function", [
    ("accuracy", lambda t, p: sklearn_metrics.accuracy_score(t, p)),
    ("mcc", lambda t, p: sklearn_metrics.matthews_corrcoef(t, p)),
    ("f1", lambda t, p: sklearn_metrics.f1_score(t, p, zero_division=0)),
    ("macro_f1", lambda t, p: sklearn_metrics.f1_score(t, p, average="macro", zero_division=0)),
    ("weighted_f1", lambda t, p: sklearn_metrics.f1_score(t, p, average="weighted", zero_division=0)),
])
def test_vectorised_bootstrap_equals_scoring_each_resample(name, function, monkeypatch):
    """On the index-resampling path the same generator draws the same resamples, so the vectorised confusion
    counts must give exactly the interval of scoring every resample with scikit-learn."""
    monkeypatch.setattr(S, "_MAX_MULTINOMIAL_CELLS", 0)  # force resampling of indices
    y_true, y_pred = sst2_like(n=60, correct=45, seed=1)
    fast = S.bootstrap_ci(y_true, y_pred, name, n_resamples=100, seed=3)
    slow = S.bootstrap_ci(y_true, y_pred, function, n_resamples=100, seed=3)
    assert fast == pytest.approx(slow, abs=1e-12)


@pytest.mark.parametrize("name", ["accuracy", "mcc", "f1", "macro_f1"])
def test_multinomial_counts_resample_like_indices(name, monkeypatch):
    """Drawing each resample's confusion counts from the multinomial is the same distribution as drawing
    indices: with 10,000 resamples each, both intervals agree within Monte Carlo error (bound: 5% of the interval's
    width; measured at most 1%), paired too."""
    y_true, y_pred = sst2_like(n=872, correct=740, seed=4)
    # A rival model of the same sentences, close behind: 24 of y_pred's right answers wrong and 16 of its wrong
    # ones right, so the paired p-value sits mid-range, where the two ways of resampling could disagree.
    rng = random.Random(5)
    right = [i for i, (t, p) in enumerate(zip(y_true, y_pred)) if t == p]
    wrong = [i for i, (t, p) in enumerate(zip(y_true, y_pred)) if t != p]
    flipped = set(rng.sample(right, 24)) | set(rng.sample(wrong, 16))
    other = [1 - p if i in flipped else p for i, p in enumerate(y_pred)]
    counts = S.bootstrap_ci(y_true, y_pred, name, n_resamples=10_000, seed=1)
    p_counts = S.paired_bootstrap_test(y_true, y_pred, other, name, n_resamples=10_000, seed=1)
    monkeypatch.setattr(S, "_MAX_MULTINOMIAL_CELLS", 0)
    indices = S.bootstrap_ci(y_true, y_pred, name, n_resamples=10_000, seed=2)
    p_indices = S.paired_bootstrap_test(y_true, y_pred, other, name, n_resamples=10_000, seed=2)
    width = indices.high - indices.low
    assert abs(counts.low - indices.low) < 0.05 * width and abs(counts.high - indices.high) < 0.05 * width
    assert 0.05 < p_indices < 0.95 and abs(p_counts - p_indices) < 0.03, (p_counts, p_indices)


def test_bootstrap_interval_is_the_exact_binomial_one():
    """Resampling n examples of which k are right gives accuracy ~ Binomial(n, k/n) / n: with 20,000
    resamples the percentile interval must sit on that distribution's 2.5% and 97.5% quantiles."""
    n, correct = 872, 800
    low, high = S.bootstrap_ci(*sst2_like(n, correct), n_resamples=20_000, alpha=0.05, seed=0)
    p = correct / n
    pmf = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
    cdf = [sum(pmf[: k + 1]) for k in range(n + 1)]
    q_low = next(k for k in range(n + 1) if cdf[k] >= 0.025) / n
    q_high = next(k for k in range(n + 1) if cdf[k] >= 0.975) / n
    assert abs(low - q_low) <= 1.5 / n and abs(high - q_high) <= 1.5 / n, (low, high, q_low, q_high)
    narrower = S.bootstrap_ci(*sst2_like(n, correct), n_resamples=20_000, alpha=0.5, seed=0)
    assert low < narrower.low < narrower.high < high  # alpha is split between the tails


def test_bootstrap_is_paired_seeded_and_leaves_the_global_rng_alone():
    y_true, y_pred = sst2_like()
    assert S.bootstrap_ci(y_true, y_true, n_resamples=200) == (1.0, 1.0)  # paired: a perfect model stays perfect
    state = torch.get_rng_state()
    first = S.bootstrap_ci(y_true, y_pred, n_resamples=500, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(123)
    assert S.bootstrap_ci(y_true, y_pred, n_resamples=500, seed=7) == first
    assert len({S.bootstrap_ci(y_true, y_pred, n_resamples=500, seed=s) for s in range(8)}) > 1
    generator = torch.Generator().manual_seed(7)
    assert S.bootstrap_ci(y_true, y_pred, n_resamples=500, seed=generator) == first


def test_paired_bootstrap_test():
    y_true, y_pred = sst2_like(correct=800)
    assert S.paired_bootstrap_test(y_true, y_pred, list(y_pred), n_resamples=500) == 1.0  # identical systems
    worse = [1 - p if i < 60 else p for i, p in enumerate(y_pred)]  # 60 more errors (or fixes) on 872
    p_value = S.paired_bootstrap_test(y_true, y_pred, worse, n_resamples=2000, seed=1)
    assert 0 < p_value < 0.01
    assert S.paired_bootstrap_test(y_true, worse, y_pred, n_resamples=2000, seed=1) == p_value  # symmetric
    close = [1 - p if i == 0 else p for i, p in enumerate(y_pred)]  # one sentence apart: noise
    assert S.paired_bootstrap_test(y_true, y_pred, close, n_resamples=2000, seed=1) > 0.5


def test_mcnemar_is_the_exact_binomial_test():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(4)
    for b, c in ((0, 0), (3, 0), (5, 9), (40, 61), (700, 760)):
        y_true = [1] * (b + c + 10)
        pred_a = [1] * b + [0] * c + [1] * 10
        pred_b = [0] * b + [1] * c + [1] * 10
        order = list(range(len(y_true)))
        rng.shuffle(order)
        got = S.mcnemar_test(y_true, [pred_a[i] for i in order], [pred_b[i] for i in order])
        expected = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
        assert got == pytest.approx(expected, rel=1e-9), (b, c)


# ----------------------------------------------------------------------------- entities (seqeval's rule)


@pytest.mark.parametrize(("tags", "spans"), [
    ("B-PER I-PER O B-LOC", [("PER", 0, 1), ("LOC", 3, 3)]),
    ("B-PER B-PER", [("PER", 0, 0), ("PER", 1, 1)]),  # B- always starts a new entity
    ("O I-PER I-PER O", [("PER", 1, 2)]),  # I- after O starts one (conlleval's lenient reading)
    ("B-PER I-LOC", [("PER", 0, 0), ("LOC", 1, 1)]),  # a change of type ends the entity
    ("I-LOC", [("LOC", 0, 0)]),
    ("O O", []),
])
def test_entity_spans_read_bio_tags_as_seqeval_does(tags, spans):
    assert M.entity_spans(tags.split()) == spans


def test_entity_f1_counts_an_entity_only_with_its_type_and_exact_span():
    truth = [["B-DATE", "I-DATE", "I-DATE", "O", "B-NUM"], ["B-NUM", "O"]]
    # sentence 1: the DATE found over two of its three words (a miss), the NUM found; sentence 2: the NUM
    # typed as a DATE (a miss). Hand-worked: 1 of 3 predicted right, 1 of 3 true found.
    guess = [["B-DATE", "I-DATE", "O", "O", "B-NUM"], ["B-DATE", "O"]]
    assert M.entity_scores(truth, guess) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert M.entity_scores(truth, truth) == (1.0, 1.0, 1.0)
    # one true entity, two predicted, one right: precision 1/2, recall 1, F1 2/3
    assert M.entity_scores([["B-NUM", "O"]], [["B-NUM", "B-NUM"]]) == pytest.approx((0.5, 1.0, 2 / 3))
    assert M.entity_scores([["O"]], [["O"]]) == (0.0, 0.0, 0.0)  # nothing to find: 0, as seqeval


def test_entity_scores_name_bad_input():
    with pytest.raises(M.MetricsError, match="tag 1 is 'X-PER'"):
        M.entity_spans(["O", "X-PER"])
    with pytest.raises(M.MetricsError, match="sentence 0: 2 true tags but 1 predicted"):
        M.entity_scores([["O", "O"]], [["O"]])
    with pytest.raises(M.MetricsError, match="1 true sentences but 2 predicted"):
        M.entity_scores([["O"]], [["O"], ["O"]])
