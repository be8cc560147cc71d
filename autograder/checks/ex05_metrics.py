"""Hidden checks of ex05-metrics: `confusion_matrix`, `precision_recall_f1`, `matthews_corrcoef`, the SQuAD
v1.1 answer metrics, `pass_at_k`, `bootstrap_ci` and four concept answers.

Every function is compared with the course's reference, `bertcourse.metrics` (itself proven against
scikit-learn and the official SQuAD script in tests/test_metrics.py), on random inputs from fixed seeds and
on the edge cases that separate right from almost right. Each check aims at one property of the contract
and is built so that other mistakes do not trip it (the label-set check accepts either orientation of the
matrix; the per-class and averaging checks use data where every class is present and predicted, so no
0/0 arises; tests/checks/test_checks_ex05.py proves it per misconception). A side condition (an undefined MCC is
0, the v1.1 empty-answer rule, the seed) is credited only with a valid result, so a stub scores 0.

The bootstrap is checked against its exact distribution: resampling n examples of which k are right gives
an accuracy distributed as Binomial(n, k/n) / n, so the alpha/2 quantile of B resampled scores lies, except
with probability < 1e-9 per side, between exact quantiles at levels alpha/2 -+ the binomial spread of a
rank among B draws. Any correct implementation passes, whatever generator or quantile definition it uses.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from _common import binomial_interval_ok, concept_answer, global_draws, reseed_globals

from bertcourse import metrics as reference
from bertcourse.grading import Diagnosis, StudentError

TOL = 1e-9
TAIL = 1e-9


def interval_ok(got: tuple[float, float], n: int, correct: int, alpha: float, resamples: int) -> bool:
    return binomial_interval_ok(got, n, correct, alpha, resamples, TAIL)


def floats(value, what: str) -> list[float]:
    """A list or 1-D tensor of numbers as floats, or an AssertionError naming `what`."""
    if isinstance(value, torch.Tensor):
        assert value.dim() == 1, f"{what} must be a list (one value per class)"
        return [float(v) for v in value.tolist()]
    assert isinstance(value, (list, tuple)), f"{what} must be a list (one value per class)"
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value), f"{what} must hold numbers"
    return [float(v) for v in value]


def number(value, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{what} must return a number"
    assert math.isfinite(value), f"{what} returned {value} where a finite number was due"
    return float(value)


def triple(value, per_class: bool) -> list:
    """The (precision, recall, f1) a student returned: three lists (per class) or three numbers."""
    assert isinstance(value, (tuple, list)) and len(value) == 3, (
        "precision_recall_f1 must return (precision, recall, f1)")
    if per_class:
        return [floats(v, "with average=None each of the three") for v in value]
    return [number(v, "an averaged precision_recall_f1") for v in value]


def close(got, expected) -> bool:
    if isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(close(g, e) for g, e in zip(got, expected))
    return abs(got - expected) <= TOL


def shown(value) -> str:
    """What the student's code returned, for a failure's message: numbers to 4 significant digits."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def matrix(value) -> list[list[int]]:
    """A (K, K) tensor or list of lists of counts as a nested list of ints."""
    if isinstance(value, torch.Tensor):
        assert value.dim() == 2, "confusion_matrix must return a (K, K) tensor or a list of K lists"
        value = value.tolist()
    assert isinstance(value, (list, tuple)) and all(isinstance(row, (list, tuple)) for row in value), (
        "confusion_matrix must return a (K, K) tensor or a list of K lists")
    return [[int(v) for v in row] for row in value]


def reference_matrix(y_true, y_pred, labels=None) -> list[list[int]]:
    return reference.confusion_matrix(y_true, y_pred, labels=labels).tolist()


def transpose(m: list[list[int]]) -> list[list[int]]:
    return [list(col) for col in zip(*m)]


def every_class_twice(seed: int, classes: list, n: int) -> tuple[list, list]:
    """Random (y_true, y_pred) in which every class is both a label and a prediction at least once: the label
    set is the same from y_true alone, and no precision or recall has a zero denominator."""
    rng = random.Random(seed)
    y_true = list(classes) + [rng.choice(classes) for _ in range(n - len(classes))]
    y_pred = [t if rng.random() < 0.6 else rng.choice(classes) for t in y_true]
    y_pred[: len(classes)] = list(reversed(classes))
    order = list(range(n))
    rng.shuffle(order)
    return [y_true[i] for i in order], [y_pred[i] for i in order]


CLASS_SETS = [[0, 1, 2], [3, 7, 10, 12], ["neg", "neu", "pos"], [-1, 0, 1, 2, 5], ["b", "a", "c", "d"]]


def random_cases(count: int, base_seed: int):
    for i in range(count):
        classes = CLASS_SETS[i % len(CLASS_SETS)]
        yield every_class_twice(base_seed + i, classes, 12 + 7 * i)


# ----------------------------------------------------------------------------- part 1: confusion_matrix


@pytest.mark.check(cell="confusion_matrix_checks", points=1.0,
                   feedback="entry [i][j] counts examples whose TRUE label is class i and PREDICTED label class j "
                   "(rows are true labels)")
def test_confusion_matrix_rows_are_true_labels(student):
    for y_true, y_pred in random_cases(6, base_seed=100):
        got = matrix(student.call("confusion_matrix", y_true, y_pred))
        assert got == reference_matrix(y_true, y_pred), "the counts differ from the confusion matrix of the data"


@pytest.mark.check(cell="confusion_matrix_checks", points=1.0,
                   feedback="the classes are the sorted union of the labels in y_true AND y_pred; labels= gives "
                   "the order and leaves out examples with an unlisted label")
def test_confusion_matrix_label_set_and_order(student):
    cases = [
        ([3, 7, 7, 10, 3], [3, 12, 7, 10, 10], None),  # 12 only predicted, labels with gaps
        (["pos", "neg", "neg"], ["pos", "neg", "neu"], None),  # strings, "neu" only predicted
        ([5, 2, 3, 5, 2, 2], [5, 3, 3, 2, 2, 5], [5, 2]),  # a subset in a given order; 3 left out
        ([1, 2, 1, 2], [1, 1, 2, 2], [2, 9, 1]),  # a listed class that never occurs
    ]
    for y_true, y_pred, labels in cases:
        got = matrix(student.call("confusion_matrix", y_true, y_pred, labels=labels) if labels is not None
                     else student.call("confusion_matrix", y_true, y_pred))
        expected = reference_matrix(y_true, y_pred, labels)
        assert got in (expected, transpose(expected)), (
            "the rows and columns are not the expected classes in the expected order")


# ----------------------------------------------------------------------------- part 2: precision_recall_f1


def student_prf(student, y_true, y_pred, **kwargs) -> list:
    value = student.call("precision_recall_f1", y_true, y_pred, **kwargs)
    return triple(value, per_class=kwargs.get("average", "binary") is None)


def reference_prf(y_true, y_pred, **kwargs) -> list:
    return list(reference.precision_recall_f1(y_true, y_pred, **kwargs))


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="per class: precision = tp/(tp+fp), recall = tp/(tp+fn), F1 = 2tp/(2tp+fp+fn), one "
                   "value per class in sorted order")
def test_per_class_scores_match_reference(student):
    for y_true, y_pred in random_cases(10, base_seed=200):
        got = student_prf(student, y_true, y_pred, average=None)
        assert close(got, reference_prf(y_true, y_pred, average=None)), (
            f"on {len(y_true)} examples of the classes {sorted(set(y_true) | set(y_pred), key=str)} average=None "
            f"returned precision, recall, F1 {shown(got)}")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="a label that only appears in y_pred is a class too: take the union of y_true and y_pred")
def test_labels_from_both_sequences(student):
    cases = [([0, 0, 1, 1, 0, 1], [0, 2, 1, 1, 0, 2]), (["a", "b", "b", "a"], ["a", "b", "c", "a"])]
    for y_true, y_pred in cases:
        for average in (None, "macro"):
            got = student_prf(student, y_true, y_pred, average=average)
            assert close(got, reference_prf(y_true, y_pred, average=average)), (
                f"average={average!r}: the classes of a prediction-only label are missing")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="macro precision and recall are the plain mean of the per-class values (each class "
                   "counts the same), not pooled counts")
def test_macro_average(student):
    for y_true, y_pred in random_cases(8, base_seed=300):
        got = student_prf(student, y_true, y_pred, average="macro")
        assert close(got[:2], reference_prf(y_true, y_pred, average="macro")[:2]), (
            f"on {len(y_true)} examples of {len(set(y_true) | set(y_pred))} classes average='macro' returned "
            f"precision {shown(got[0])} and recall {shown(got[1])}")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="macro-F1 is the mean of the per-class F1 values, not the F1 of macro precision and "
                   "macro recall")
def test_macro_f1_is_mean_of_per_class_f1(student):
    for y_true, y_pred in random_cases(8, base_seed=400):
        got = student_prf(student, y_true, y_pred, average="macro")
        assert close(got[2], reference_prf(y_true, y_pred, average="macro")[2]), (
            f"average='macro' returned F1 {shown(got[2])} beside precision {shown(got[0])} and recall {shown(got[1])}")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="micro: sum tp, fp and fn over the listed classes first, then take each ratio once")
def test_micro_average(student):
    for i, (y_true, y_pred) in enumerate(random_cases(6, base_seed=500)):
        got = student_prf(student, y_true, y_pred, average="micro")
        assert close(got, reference_prf(y_true, y_pred, average="micro")), (
            f"on {len(y_true)} examples average='micro' returned precision, recall, F1 {shown(got)}")
        subset = sorted(set(y_true), key=str)[: 2 + i % 2]  # micro over some classes only is not accuracy
        got = student_prf(student, y_true, y_pred, average="micro", labels=subset)
        assert close(got, reference_prf(y_true, y_pred, average="micro", labels=subset)), (
            f"average='micro' over labels={subset} only (not every class) returned precision, recall, F1 {shown(got)}")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="weighted: the mean of the per-class values weighted by support (true examples per "
                   "class)")
def test_weighted_average(student):
    for y_true, y_pred in random_cases(8, base_seed=600):
        got = student_prf(student, y_true, y_pred, average="weighted")
        assert close(got, reference_prf(y_true, y_pred, average="weighted")), (
            f"on {len(y_true)} examples average='weighted' returned precision, recall, F1 {shown(got)}")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="average='binary' (the default) reports the scores of class pos_label alone")
def test_binary_average_scores_pos_label(student):
    rng = random.Random(7)
    for i in range(6):
        y_true = [0, 1, 0, 1] + [rng.randint(0, 1) for _ in range(20 + i)]
        y_pred = [0, 1, 1, 0] + [t if rng.random() < 0.7 else 1 - t for t in y_true[4:]]
        assert close(triple(student.call("precision_recall_f1", y_true, y_pred), False),
                     reference_prf(y_true, y_pred)), "the default (binary, pos_label=1) scores differ"
        assert close(student_prf(student, y_true, y_pred, pos_label=0),
                     reference_prf(y_true, y_pred, pos_label=0)), "the scores for pos_label=0 differ"
    y_true, y_pred = ["neg", "pos", "pos", "neg", "neg"], ["neg", "neg", "pos", "pos", "neg"]
    assert close(student_prf(student, y_true, y_pred, average="binary", pos_label="neg"),
                 reference_prf(y_true, y_pred, average="binary", pos_label="neg")), "string pos_label scores differ"


F1_NOT_ZERO_DIVISION = ("F1 is 2tp / (2tp + fp + fn): a class with no true positive but some false positive or "
                        "negative has F1 0, whatever zero_division says; zero_division stands only for a 0/0 (for F1: "
                        "a class neither present nor predicted)")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="a 0/0 ratio (a class never predicted, never present, or neither) is `zero_division` "
                   "(0 or 1); only a 0/0: a class predicted and present but never right has F1 0")
def test_zero_division(student):
    y_true, y_pred = [0, 0, 1, 1, 2, 0], [0, 1, 1, 0, 1, 3]  # 2 is never predicted, 3 never present
    # classes 1 and 2 predicted and present but never right: P = R = 0, so F1 = 0 (no 0/0)
    missed_true, missed_pred = [0, 1, 2, 2, 0], [0, 2, 1, 0, 1]
    cases = [
        (y_true, y_pred, {"average": None}),
        (y_true, y_pred, {"average": "macro"}),
        (y_true, y_pred, {"average": None, "labels": [0, 1, 2, 3, 4]}),  # 4: in neither list
        (y_true, y_pred, {"average": "weighted", "labels": [4, 2]}),  # support 0 and 2
        ([0, 0, 0], [0, 0, 0], {"average": "binary"}),  # the positive class 1 never occurs
        (missed_true, missed_pred, {"average": None}),
        (missed_true, missed_pred, {"average": "macro"}),
        ([0, 1, 1, 0], [1, 0, 0, 1], {"average": "binary"}),  # tp = 0, fp = fn = 2
    ]
    got = student_prf(student, missed_true, missed_pred, average=None, zero_division=1)
    if all(len(v) == 3 for v in got) and close(list(got[0][1:]) + list(got[1][1:]), [0.0] * 4):
        if close(list(got[2][1:]), [1.0, 1.0]):
            raise Diagnosis(F1_NOT_ZERO_DIVISION, "with zero_division=1, classes predicted and present but never "
                                                  "right got F1 1")
    # every listed class with support 0: 'weighted' is then the plain mean (at zero_division 1: 0.5, 1, 0.5)
    unsupported = {"average": "weighted", "labels": [3, 4]}
    try:
        got = student_prf(student, y_true, y_pred, zero_division=1, **unsupported)
    except StudentError as error:
        got = str(error)
    if (isinstance(got, str) or not close(got, reference_prf(y_true, y_pred, zero_division=1, **unsupported))) and all(
            close(student_prf(student, yt, yp, zero_division=1, **kwargs),
                  reference_prf(yt, yp, zero_division=1, **kwargs)) for yt, yp, kwargs in cases[:2]):
        raise Diagnosis("when every listed class has support 0 there is nothing to weight by: 'weighted' is then the "
                        "plain mean over the classes", "with labels=[3, 4] (no true example of either) and "
                        f"zero_division=1, average='weighted' gave {got if isinstance(got, str) else shown(got)}")
    cases.append((y_true, y_pred, unsupported))
    for zero_division in (0, 1):
        for yt, yp, kwargs in cases:
            got = student_prf(student, yt, yp, zero_division=zero_division, **kwargs)
            assert close(got, reference_prf(yt, yp, zero_division=zero_division, **kwargs)), (
                f"with zero_division={zero_division} a score differs")


@pytest.mark.check(cell="prf_checks", points=1.0,
                   feedback="labels= fixes the classes and their order; an example with an unlisted label still "
                   "counts as a miss or a false alarm of the listed class involved")
def test_explicit_labels_subset_in_order(student):
    y_true, y_pred = [5, 2, 3, 5, 2, 3, 5, 3], [5, 3, 3, 2, 2, 5, 3, 5]
    for labels in ([5, 2], [3, 5], [2, 5, 3]):
        for average in (None, "macro", "weighted"):
            got = student_prf(student, y_true, y_pred, average=average, labels=labels)
            assert close(got, reference_prf(y_true, y_pred, average=average, labels=labels)), (
                f"with labels={labels} and average={average!r} a score differs")


# ----------------------------------------------------------------------------- part 3: matthews_corrcoef


def student_mcc(student, y_true, y_pred) -> float:
    return number(student.call("matthews_corrcoef", y_true, y_pred), "matthews_corrcoef")


@pytest.mark.check(cell="mcc_checks", points=1.0,
                   feedback="binary MCC = (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn))")
def test_mcc_binary_matches_reference(student):
    rng = random.Random(11)
    for i in range(12):
        y_true = [0, 1, 0, 1] + [rng.randint(0, 1) for _ in range(10 + 5 * i)]
        y_pred = [0, 1, 1, 0] + [t if rng.random() < 0.3 + 0.05 * i else 1 - t for t in y_true[4:]]
        assert abs(student_mcc(student, y_true, y_pred) - reference.matthews_corrcoef(y_true, y_pred)) <= TOL


@pytest.mark.check(cell="mcc_checks", points=1.0,
                   feedback="with more than two classes use the multi-class formula (trace, row and column sums), "
                   "not one class against the rest")
def test_mcc_multiclass_matches_reference(student):
    for y_true, y_pred in random_cases(10, base_seed=700):
        assert abs(student_mcc(student, y_true, y_pred) - reference.matthews_corrcoef(y_true, y_pred)) <= TOL


@pytest.mark.check(cell="mcc_checks", points=1.0,
                   feedback="MCC is 0.0 when its denominator is 0 (all predictions, or all labels, one class)")
def test_mcc_undefined_is_zero(student):
    y_true, y_pred = [0, 1, 1, 0, 1, 2], [0, 1, 0, 0, 2, 2]
    assert abs(student_mcc(student, y_true, y_pred) - reference.matthews_corrcoef(y_true, y_pred)) <= TOL, (
        "not credited until MCC is right on ordinary data")
    for y_true, y_pred in (([0, 1, 1, 0], [1, 1, 1, 1]), ([1, 1, 1], [0, 1, 0]), (["a", "a"], ["a", "a"])):
        value = student.call("matthews_corrcoef", y_true, y_pred)
        assert number(value, "matthews_corrcoef") == 0.0, "an undefined MCC must be 0.0"


@pytest.mark.check(cell="mcc_checks", points=1.0,
                   feedback="on large inputs the product of four counts overflows int64: use Python ints or floats")
def test_mcc_large_inputs(student):
    rng = random.Random(13)
    n = 600_000
    y_true = [rng.randint(0, 1) for _ in range(n)]
    y_pred = [t if rng.random() < 0.8 else 1 - t for t in y_true]
    assert abs(student_mcc(student, y_true, y_pred) - reference.matthews_corrcoef(y_true, y_pred)) <= 1e-6


# ----------------------------------------------------------------------------- part 4: SQuAD


def normalized(student, text: str) -> str:
    value = student.call("normalize_answer", text)
    assert isinstance(value, str), "normalize_answer must return a string"
    return value


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="normalisation lower-cases, removes string.punctuation, removes the words a/an/the, and "
                   "collapses whitespace")
def test_normalize_answer_each_step(student):
    for text in ("HELLO World", "don't, stop! (now)", "a cat and the hat an apple", "another theory, thermal",
                 "x\t y  \n z ", "banana the  thesis a"):
        got = normalized(student, text)
        assert got == reference.normalize_answer(text), f"normalize_answer({text!r}) returned {got!r}"


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="the steps go in the official order: lower-case, punctuation, articles, whitespace")
def test_normalize_answer_step_order(student):
    for text in ("The-End", "The Beatles", "a.m. and p.m.", "x a y", "An (the) apple"):
        got = normalized(student, text)
        assert got == reference.normalize_answer(text), f"normalize_answer({text!r}) returned {got!r}"


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="punctuation is ASCII string.punctuation only (curly quotes stay); any unicode "
                   "whitespace separates tokens")
def test_normalize_answer_unicode(student):
    for text in ("\u201cQuoted\u201d \u2014 Text", "x\u00a0y\u2003z", "\u00dcber the CAF\u00c9", "the\u201cend\u201d",
                 "\u00bfQu\u00e9?"):
        got = normalized(student, text)
        assert got == reference.normalize_answer(text), f"normalize_answer({text!r}) returned {got!r}"


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="exact match compares NORMALISED answers and takes the best (max) over all references")
def test_exact_match_best_normalised_reference(student):
    for prediction, refs in (("Paris", ["the city of Paris", "paris."]), ("The Cat!", ["cat"]),
                             ("Lyon", ["Paris", "Marseille"]), ("an  apple", ["Apple", "pear"]),
                             ("red", ["blue", "green", "RED"])):
        got = number(student.call("exact_match", prediction, refs), "exact_match")
        assert got == reference.exact_match(prediction, refs), f"exact_match({prediction!r}, {refs!r}) returned {got:g}"


def random_answer(rng: random.Random) -> str:
    words = ["The", "cat", "sat", "on", "a", "mat", "an", "old", "cat", "sat", "Mat.", "on,", "red", "the"]
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 7)))


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="token F1: precision = overlap / prediction tokens, recall = overlap / reference tokens, "
                   "F1 their harmonic mean, after normalising")
def test_token_f1_matches_reference(student):
    rng = random.Random(17)
    for _ in range(25):
        prediction, refs = random_answer(rng), [random_answer(rng)]
        got = number(student.call("token_f1", prediction, refs), "token_f1")
        assert abs(got - reference.token_f1(prediction, refs)) <= TOL, (
            f"token_f1({prediction!r}, {refs!r}) returned {got:.4g}")


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="the overlap is a multiset intersection: a token repeated in both answers matches as many "
                   "times as it occurs in both, not once as in a set (lesson 5, section 2)")
def test_token_f1_counts_repeated_tokens(student):
    for prediction, ref in (("cat cat", "cat"), ("b b c x", "b b d"), ("go go go", "go go"), ("x y", "y y x")):
        got = number(student.call("token_f1", prediction, [ref]), "token_f1")
        assert abs(got - reference.token_f1(prediction, [ref])) <= TOL, (
            f"token_f1({prediction!r}, [{ref!r}]) returned {got:.4g}")


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="token F1 is the best (max) over all the references, not the first one or the mean")
def test_token_f1_best_reference(student):
    for prediction, refs in (("cat sat", ["dog", "the cat sat"]), ("old mat", ["mat", "a red mat", "old"]),
                             ("red cat", ["cat", "red", "blue"])):
        got = number(student.call("token_f1", prediction, refs), "token_f1")
        assert abs(got - reference.token_f1(prediction, refs)) <= TOL, (
            f"token_f1({prediction!r}, {refs!r}) returned {got:.4g}")


@pytest.mark.check(cell="squad_checks", points=1.0,
                   feedback="SQuAD v1.1: an answer that normalises to nothing has F1 0.0, even against another empty "
                   "one (whose EM is 1.0)")
def test_empty_answers(student):
    assert abs(number(student.call("token_f1", "cat sat", ["the cat"]), "token_f1") - 2 / 3) <= TOL, (
        "not credited until token F1 is right on ordinary answers")
    assert number(student.call("exact_match", "The", ["."]), "exact_match") == 1.0, "two empty answers match exactly"
    for prediction, ref in (("The", "."), ("", "cat"), ("cat", "a"), ("!", "")):
        assert number(student.call("token_f1", prediction, [ref]), "token_f1") == 0.0, (
            "an empty answer must get token F1 0.0 in v1.1")


# ----------------------------------------------------------------------------- part 5: pass@k


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def student_pass(student, n: int, c: int, k: int) -> float:
    return number(student.call("pass_at_k", n, c, k), "pass_at_k")


@pytest.mark.check(cell="pass_at_k_checks", points=1.0,
                   feedback="pass@k = 1 - C(n-c, k) / C(n, k) (k samples drawn WITHOUT replacement), not "
                   "1 - (1 - c/n)^k")
def test_pass_at_k_unbiased(student):
    for n in range(2, 11):
        for c in range(1, n):
            for k in range(2, n - c + 1):
                value = student_pass(student, n, c, k)
                assert abs(value - exact_pass_at_k(n, c, k)) <= TOL, f"pass_at_k({n}, {c}, {k}) returned {value:.6g}"


@pytest.mark.check(cell="pass_at_k_checks", points=1.0,
                   feedback="for large n the binomials do not fit in a float: use a product of ratios, exact "
                   "integers or logs")
def test_pass_at_k_large_n(student):
    for n, c, k in ((200, 13, 10), (200, 1, 100), (5000, 300, 200), (10_000, 37, 1000), (10_000, 9000, 100)):
        value = student_pass(student, n, c, k)
        diagnose_biased_pass_at_k(value, n, c, k)
        assert abs(value - exact_pass_at_k(n, c, k)) <= TOL, f"pass_at_k({n}, {c}, {k}) returned {value:.6g}"


def diagnose_biased_pass_at_k(value: float, n: int, c: int, k: int) -> None:
    """A wrong value that is the with-replacement formula gets the hint about that formula, not the
    large-n check's own about binomials overflowing (the code has no binomial to overflow)."""
    if abs(value - exact_pass_at_k(n, c, k)) > TOL and abs(value - (1.0 - (1.0 - c / n) ** k)) <= TOL:
        raise Diagnosis("this is 1 - (1 - c/n)^k, the k samples drawn WITH replacement; pass@k draws them "
                        "WITHOUT replacement: 1 - C(n-c, k) / C(n, k)")


@pytest.mark.check(cell="pass_at_k_checks", points=1.0,
                   feedback="pass@k is 0.0 with no correct sample and 1.0 when n - c < k (every draw holds a correct "
                   "one)")
def test_pass_at_k_edge_cases(student):
    assert abs(student_pass(student, 20, 3, 4) - exact_pass_at_k(20, 3, 4)) <= TOL, (
        "not credited until pass@k is right on an ordinary case")
    for n, c, k, expected in ((10, 0, 3, 0.0), (10, 10, 1, 1.0), (10, 8, 3, 1.0), (6, 1, 6, 1.0), (6, 0, 6, 0.0),
                              (1, 1, 1, 1.0)):
        value = student_pass(student, n, c, k)
        assert abs(value - expected) <= TOL, f"pass_at_k({n}, {c}, {k}) returned {value:.6g}"


# ----------------------------------------------------------------------------- part 6: bootstrap_ci


def accuracy_data(n: int, correct: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    y_true = [rng.randint(0, 1) for _ in range(n)]
    right = set(rng.sample(range(n), correct))
    return y_true, [t if i in right else 1 - t for i, t in enumerate(y_true)]


def interval(value) -> tuple[float, float]:
    assert isinstance(value, (tuple, list)) and len(value) == 2, "bootstrap_ci must return (low, high)"
    low, high = number(value[0], "bootstrap_ci"), number(value[1], "bootstrap_ci")
    assert low <= high, "bootstrap_ci must return the lower bound first"
    return low, high


def student_interval(student, y_true, y_pred, **kwargs) -> tuple[float, float]:
    return interval(student.call("bootstrap_ci", y_true, y_pred, student.ref("accuracy"), **kwargs))


@pytest.mark.check(cell="bootstrap_checks", points=2.0,
                   feedback="resample n indices WITH replacement, score each resample, and take the alpha/2 and "
                   "1 - alpha/2 quantiles (alpha is split between the two tails)")
def test_bootstrap_interval_quantiles(student):
    for n, correct, alpha, seed in ((872, 741, 0.4, 1), (300, 210, 0.5, 2)):
        y_true, y_pred = accuracy_data(n, correct, seed)
        got = student_interval(student, y_true, y_pred, n_resamples=4000, alpha=alpha, seed=seed)
        assert interval_ok(got, n, correct, alpha, 4000), (
            f"the interval is not where the alpha/2 and 1 - alpha/2 quantiles lie (alpha={alpha})")


@pytest.mark.check(cell="bootstrap_checks", points=1.0,
                   feedback="resample PAIRS: one set of indices per resample, taking the label and the prediction at "
                   "the same index")
def test_bootstrap_pairs_labels_and_predictions(student):
    y_true, _ = accuracy_data(200, 200, 3)
    wrong = [1 - t for t in y_true]
    assert student_interval(student, y_true, y_true, n_resamples=100, seed=4) == (1.0, 1.0), (
        "a model right on every example must get the interval (1.0, 1.0)")
    assert student_interval(student, y_true, wrong, n_resamples=100, seed=5) == (0.0, 0.0), (
        "a model wrong on every example must get the interval (0.0, 0.0)")


@pytest.mark.check(cell="bootstrap_checks", points=1.0,
                   feedback="each resample is scored with `metric`, the function passed in (accuracy is only one "
                   "example): not a score written into bootstrap_ci")
def test_bootstrap_scores_with_the_metric_given(student):
    # The course's own MCC (trusted), reached through the notebook's `accuracy` (from the same module): a model
    # wrong on every example of two classes has MCC -1 on every resample (both classes are in each one but with
    # chance < 1e-50), and accuracy 0.
    mcc = student.call_method(student.getattr(student.ref("accuracy"), "__globals__", as_remote=True),
                              "__getitem__", "matthews_corrcoef")
    y_true, _ = accuracy_data(200, 200, 3)
    wrong = [1 - t for t in y_true]
    got = interval(student.call("bootstrap_ci", y_true, wrong, mcc, n_resamples=100, seed=6))
    assert max(abs(v + 1.0) for v in got) < 1e-9, (
        f"with the Matthews correlation as the metric, a model wrong on every example got {shown(list(got))}")


@pytest.mark.check(cell="bootstrap_checks", points=0.5,
                   feedback="same seed, same interval, and another seed another interval: draw from a generator of "
                   "your own made from `seed`; reseeding the global one changes what the rest of the program draws")
def test_bootstrap_seed(student):
    n, correct = 400, 300
    y_true, y_pred = accuracy_data(n, correct, 6)
    reseed_globals(student, 1)
    first = student_interval(student, y_true, y_pred, n_resamples=300, alpha=0.4, seed=10)
    assert interval_ok(first, n, correct, 0.4, 300), "not credited until the interval is right"
    after = global_draws(student)
    reseed_globals(student, 1)
    untouched = global_draws(student)
    assert after == untouched, "bootstrap_ci used or reseeded a global random generator"
    reseed_globals(student, 2)
    again = student_interval(student, y_true, y_pred, n_resamples=300, alpha=0.4, seed=10)
    assert again == first, "the same seed gave another interval"
    others = {student_interval(student, y_true, y_pred, n_resamples=300, alpha=0.4, seed=s) for s in range(11, 21)}
    assert len(others | {first}) > 1, "every seed gave the same interval: the seed is not used"


@pytest.mark.check(cell="bootstrap_checks", points=0.5,
                   feedback="draw exactly n_resamples resamples: the argument, not a fixed count; credited once the "
                   "interval is right")
def test_bootstrap_honours_n_resamples(student):
    n, correct = 400, 300
    y_true, y_pred = accuracy_data(n, correct, 7)
    assert interval_ok(student_interval(student, y_true, y_pred, n_resamples=300, alpha=0.4, seed=12),
                       n, correct, 0.4, 300), "not credited until the interval is right"
    low, high = student_interval(student, y_true, y_pred, n_resamples=1, alpha=0.1, seed=13)
    assert low == high, "with n_resamples=1 there is one resampled score, but the interval has a width"


# ----------------------------------------------------------------------------- part 7: concepts



@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q1: ask whether either model's answer depends on the sentence, and what a correlation "
                            "measures")
def test_q1_mcc_of_answers_that_ignore_the_sentence(student):
    assert concept_answer(student, "answer_q1") == "c"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q2: ask which average lets each class count the same, whatever its size")
def test_q2_macro_vs_micro_under_imbalance(student):
    assert concept_answer(student, "answer_q2") == "b"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q3: work out pass@k problem by problem for each model, at k = 1 and at k = 100, then "
                            "average over the problems")
def test_q3_pass_at_k_rankings_change_with_k(student):
    assert concept_answer(student, "answer_q3") == "d"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q4: ask how the spread of a mean over n resampled sentences depends on n")
def test_q4_interval_width_and_test_set_size(student):
    assert concept_answer(student, "answer_q4") == "b"
