"""Evaluation metrics, written once: classification scores, entities, SQuAD answers, pass@k.

These are the course's reference versions (lesson 5, `compare` and `evaluate` report through them; exercise
5 asks students to write them to the same contract, and its hidden checks compare with these).

Classification follows scikit-learn's conventions exactly (tests/test_metrics.py proves it against
scikit-learn):
- labels are any hashable values that sort (ints with gaps, strings, bools), never a mix of strings and
  numbers; the label set is the sorted union of `y_true` and `y_pred` unless `labels=` gives a list, whose
  order is then the order of every per-class result (and of the confusion matrix's rows and columns);
- a ratio with a zero denominator (precision of a class never predicted, recall of a class never present,
  F1 of a class that is neither) is `zero_division` (0 or 1), never NaN and never a crash;
- F1 is 2·tp / (2·tp + fp + fn) per class, i.e. the harmonic mean of that class's precision and recall;
  macro-F1 averages the per-class F1 values (it is NOT the F1 of macro precision and macro recall);
  micro sums tp, fp and fn over the classes first; weighted averages by support (true count).

How sure a score is (bootstrap intervals, paired tests) lives in `bertcourse.stats`.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import torch

from bertcourse.errors import BertcourseError

AVERAGES = ("binary", "macro", "micro", "weighted", None)


class MetricsError(BertcourseError, ValueError):
    """Inputs a metric cannot score (lengths differ, empty input, unknown average, bad labels)."""


class PRF(NamedTuple):
    """Precision, recall and F1: floats when averaged, lists in label order when `average=None`."""

    precision: Any
    recall: Any
    f1: Any


# ---------------------------------------------------------------------------------------------------------
# Inputs


def _as_list(values: Any, name: str) -> list:
    """A 1-D sequence of labels as a Python list (tensors and arrays converted, scalars made Python)."""
    if isinstance(values, (str, bytes)):
        raise MetricsError(f"{name} must be a sequence of labels, got a single string {values!r}")
    if hasattr(values, "tolist") and hasattr(values, "shape"):
        if len(values.shape) != 1:
            raise MetricsError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        return values.tolist()
    try:
        out = list(values)
    except TypeError:
        raise MetricsError(f"{name} must be a sequence of labels, got {type(values).__name__}") from None
    for v in out:
        if not isinstance(v, Hashable) or isinstance(v, (list, tuple)):
            raise MetricsError(f"{name} must be 1-D labels, got an element {v!r}")
    return out


def _pair(y_true: Any, y_pred: Any, name_pred: str = "y_pred") -> tuple[list, list]:
    """Both label sequences as lists of equal, non-zero length."""
    t, p = _as_list(y_true, "y_true"), _as_list(y_pred, name_pred)
    if len(t) != len(p):
        raise MetricsError(f"y_true and {name_pred} differ in length: {len(t)} vs {len(p)}")
    if not t:
        raise MetricsError("no samples: y_true and y_pred are empty")
    return t, p


def _sorted_labels(values: Sequence) -> list:
    """The distinct labels, sorted; strings and numbers cannot be mixed (as in scikit-learn)."""
    distinct = set(values)
    kinds = {isinstance(v, str) for v in distinct}
    if len(kinds) > 1:
        raise MetricsError(f"labels mix strings and numbers: {sorted(map(repr, distinct))}")
    try:
        return sorted(distinct)
    except TypeError as error:
        raise MetricsError(f"labels cannot be sorted: {error}") from None


def _label_list(labels: Any, t: list, p: list) -> list:
    """`labels` as given (checked), or the sorted union of the labels in y_true and y_pred."""
    if labels is None:
        return _sorted_labels(t + p)
    out = _as_list(labels, "labels")
    if not out:
        raise MetricsError("labels= is empty: give at least one label")
    if len(set(out)) != len(out):
        raise MetricsError(f"labels= repeats a label: {out}")
    return out


def _check_zero_division(zero_division: Any) -> float:
    if isinstance(zero_division, bool) or zero_division not in (0, 1):
        raise MetricsError(f"zero_division must be 0 or 1, got {zero_division!r}")
    return float(zero_division)


# ---------------------------------------------------------------------------------------------------------
# Counts (shared by the single calls and the vectorised bootstrap)


def _confusion_counts(t: list, p: list, labels: list) -> torch.Tensor:
    """(K, K) int64 counts, rows = true label, columns = predicted; samples outside `labels` are dropped."""
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    cells = [index[a] * k + index[b] for a, b in zip(t, p, strict=True) if a in index and b in index]
    flat = torch.bincount(torch.tensor(cells, dtype=torch.int64), minlength=k * k) if cells else torch.zeros(
        k * k, dtype=torch.int64)
    return flat.view(k, k)


def _safe_divide(num: torch.Tensor, den: torch.Tensor, zero_division: float) -> torch.Tensor:
    """num / den in float64, `zero_division` where den == 0."""
    num, den = num.to(torch.float64), den.to(torch.float64)
    return torch.where(den == 0, torch.full_like(num, zero_division), num / torch.where(den == 0, 1.0, den))


def _mcc_from_confusion(cm: torch.Tensor) -> torch.Tensor:
    """Matthews correlation (Gorodkin's K-class form) of (..., K, K) counts; 0 where undefined."""
    cm = cm.to(torch.int64)
    t_sum, p_sum = cm.sum(-1), cm.sum(-2)
    correct = cm.diagonal(dim1=-2, dim2=-1).sum(-1)
    n = cm.sum((-2, -1))
    # int64 differences are exact up to n ~ 3e9; the product is taken in float64 as two square roots.
    cov_tp = (correct * n - (t_sum * p_sum).sum(-1)).to(torch.float64)
    cov_pp = (n * n - (p_sum * p_sum).sum(-1)).to(torch.float64)
    cov_tt = (n * n - (t_sum * t_sum).sum(-1)).to(torch.float64)
    den = cov_tt.sqrt() * cov_pp.sqrt()
    mcc = torch.where(den == 0, torch.zeros_like(den), cov_tp / torch.where(den == 0, 1.0, den))
    return mcc.clamp(-1.0, 1.0)


# ---------------------------------------------------------------------------------------------------------
# Classification


def accuracy(y_true: Any, y_pred: Any) -> float:
    """The fraction of samples whose prediction equals the label."""
    t, p = _pair(y_true, y_pred)
    return sum(a == b for a, b in zip(t, p, strict=True)) / len(t)


def confusion_matrix(y_true: Any, y_pred: Any, labels: Any = None) -> torch.Tensor:
    """(K, K) int64 counts: row i = true label `labels[i]`, column j = predicted `labels[j]`.

    As scikit-learn: labels default to the sorted union of both sequences; with `labels=` given, samples
    whose true or predicted label is not listed are left out, and at least one listed label must occur
    in `y_true`.
    """
    t, p = _pair(y_true, y_pred)
    label_list = _label_list(labels, t, p)
    if labels is not None and not set(label_list) & set(t):
        raise MetricsError(f"labels= {label_list} contains no label that occurs in y_true")
    return _confusion_counts(t, p, label_list)


def _binary_labels(t: list, p: list, pos_label: Hashable) -> list:
    present = _sorted_labels(t + p)
    if len(present) > 2:
        raise MetricsError(
            f"average='binary' needs at most two labels, found {len(present)} ({present[:5]}...); "
            "choose average='macro', 'micro', 'weighted' or None")
    if pos_label not in present and len(present) == 2:
        raise MetricsError(f"pos_label={pos_label!r} is not one of the labels {present}")
    return [pos_label]


def precision_recall_f1(
    y_true: Any,
    y_pred: Any,
    *,
    average: str | None = "binary",
    labels: Any = None,
    pos_label: Hashable = 1,
    zero_division: float = 0,
) -> PRF:
    """Precision, recall and F1, per class (`average=None`, lists in label order) or averaged (floats).

    - "binary": the scores of `pos_label` alone (at most two labels; `labels=` is ignored, as in
      scikit-learn); "macro": the unweighted mean of the per-class scores (each class counts the same,
      so a rare class weighs as much as a frequent one); "weighted": their mean weighted by support;
      "micro": tp, fp and fn summed over classes first (with every class included it equals accuracy).
    - per-class F1 = 2·tp / (2·tp + fp + fn); a zero denominator gives `zero_division`.
    """
    if average not in AVERAGES:
        raise MetricsError(f"average must be one of {AVERAGES}, got {average!r}")
    zero = _check_zero_division(zero_division)
    t, p = _pair(y_true, y_pred)
    label_list = _binary_labels(t, p, pos_label) if average == "binary" else _label_list(labels, t, p)
    if average != "binary":
        _sorted_labels(t + p)  # refuses a mix of strings and numbers, as scikit-learn does
    index = {label: i for i, label in enumerate(label_list)}
    k = len(label_list)
    # one-vs-rest counts per listed class: a sample outside the list still counts as a miss or a false alarm
    tp = [0] * k
    predicted = [0] * k
    support = [0] * k
    for a, b in zip(t, p, strict=True):
        ia, ib = index.get(a), index.get(b)
        if ia is not None:
            support[ia] += 1
        if ib is not None:
            predicted[ib] += 1
        if ia is not None and a == b:
            tp[ia] += 1
    scores = _prf_from_counts(torch.tensor(tp), torch.tensor(predicted), torch.tensor(support),
                              "macro" if average == "binary" else average, zero)
    if average is None:
        return PRF(*(v.tolist() for v in scores))
    return PRF(*(float(v) for v in scores))


def _prf_from_counts(tp: torch.Tensor, predicted: torch.Tensor, support: torch.Tensor, average: str | None,
                     zero: float) -> tuple[torch.Tensor, ...]:
    """The scores from per-class tp, predicted and true counts (..., K)."""
    if average == "micro":
        tp, predicted, support = (x.sum(-1, keepdim=True) for x in (tp, predicted, support))
    precision = _safe_divide(tp, predicted, zero)
    recall = _safe_divide(tp, support, zero)
    f1 = _safe_divide(2 * tp, predicted + support, zero)  # 2tp / (2tp + fp + fn)
    if average is None:
        return precision, recall, f1
    if average == "weighted":
        weights = support.to(torch.float64)
        total = weights.sum(-1, keepdim=True)
        weights = torch.where(total > 0, weights / torch.where(total > 0, total, 1.0), 1.0 / weights.shape[-1])
        return tuple((v * weights).sum(-1) for v in (precision, recall, f1))
    return tuple(v.mean(-1) for v in (precision, recall, f1))


def matthews_corrcoef(y_true: Any, y_pred: Any) -> float:
    """Matthews correlation coefficient (multi-class form, as scikit-learn); 0.0 when undefined.

    Undefined means every label or every prediction is the same class (a zero variance). The counts are
    integers, so large inputs do not overflow.
    """
    t, p = _pair(y_true, y_pred)
    return float(_mcc_from_confusion(_confusion_counts(t, p, _sorted_labels(t + p))))


# ---------------------------------------------------------------------------------------------------------
# SQuAD v1.1

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's normalisation, its four steps in the official order.

    1. lower-case; 2. remove punctuation (Python's `string.punctuation`: ASCII only, so curly quotes or
    an em dash stay, exactly as the official script); 3. replace the words a, an, the by a space
    (`\\b(a|an|the)\\b`, after punctuation is gone, so "the-end" becomes "theend", not "end");
    4. split on any whitespace (unicode included) and join with single spaces.
    """
    if not isinstance(text, str):
        raise MetricsError(f"an answer must be a string, got {type(text).__name__}")
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _references(references: str | Sequence[str]) -> list[str]:
    refs = [references] if isinstance(references, str) else list(references)
    if not refs:
        raise MetricsError("no reference answers: give at least one")
    for ref in refs:
        if not isinstance(ref, str):
            raise MetricsError(f"a reference answer must be a string, got {type(ref).__name__}")
    return refs


def exact_match(prediction: str, references: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised reference, else 0.0 (the max over them).

    Two answers that both normalise to "" (say "the" and ".") match: EM = 1.0.
    """
    pred = normalize_answer(prediction)
    return max(float(pred == normalize_answer(ref)) for ref in _references(references))


def _f1_one(pred_tokens: list[str], ref_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(ref_tokens)  # multiset overlap: a repeated word counts per copy
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, references: str | Sequence[str]) -> float:
    """Token-level F1 of the normalised answers (multiset overlap), the maximum over the references.

    SQuAD v1.1 behaviour on empty answers: when the prediction or the reference normalises to no tokens
    the overlap is empty and F1 is 0.0, even when both are empty (while their EM is 1.0). SQuAD 2.0's
    script differs there: if either side is empty it returns 1.0 when both are empty and 0.0 otherwise,
    since an empty answer means "unanswerable" and abstaining correctly is a full hit.
    """
    pred = normalize_answer(prediction).split()
    return max(_f1_one(pred, normalize_answer(ref).split()) for ref in _references(references))


# ---------------------------------------------------------------------------------------------------------
# Entities: the F1 of named-entity recognition (CoNLL's, seqeval's default)


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entities (type, first word, last word) of one sentence's BIO tags, read as conlleval and seqeval
    (its default mode) read them: B-X starts an entity; I-X continues one of type X, and starts one after O
    or after another type (a lenient reading of a tagger that forgot the B-); O and B- end the current one.
    """
    spans, start, kind = [], None, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        if tag != "O" and (prefix not in ("B", "I") or not label):
            raise MetricsError(f"tag {i} is {tag!r}: BIO tags are 'O', 'B-TYPE' or 'I-TYPE'")
        if start is not None and (prefix in ("B", "O") or label != kind):
            spans.append((kind, start, i - 1))
            start = None
        if prefix == "B" or (prefix == "I" and start is None):
            start, kind = i, label
    return spans


def entity_scores(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> PRF:
    """Entity-level micro precision, recall and F1 over sentences of BIO tags (seqeval's `f1_score`).

    An entity counts as found only if a predicted entity has its type AND its exact first and last word:
    a DATE predicted over two of its three words scores nothing, not two thirds. Words tagged right
    inside an entity earn nothing on their own, which is why entity F1 sits below per-word accuracy.
    Zero denominators give 0 (seqeval's default, with a warning there, silently here).
    """
    if len(y_true) != len(y_pred):
        raise MetricsError(f"{len(y_true)} true sentences but {len(y_pred)} predicted")
    found = true_count = predicted_count = 0
    for row, (truth, guess) in enumerate(zip(y_true, y_pred)):
        if len(truth) != len(guess):
            raise MetricsError(f"sentence {row}: {len(truth)} true tags but {len(guess)} predicted")
        true_set, pred_set = set(entity_spans(truth)), set(entity_spans(guess))
        found += len(true_set & pred_set)
        true_count += len(true_set)
        predicted_count += len(pred_set)
    precision = found / predicted_count if predicted_count else 0.0
    recall = found / true_count if true_count else 0.0
    f1 = 2 * found / (true_count + predicted_count) if true_count + predicted_count else 0.0
    return PRF(precision, recall, f1)


# ---------------------------------------------------------------------------------------------------------
# pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of Chen et al. (2021): 1 - C(n-c, k) / C(n, k).

    The probability that at least one of k samples drawn without replacement from n generations, c of
    them correct, passes. Computed as 1 - prod_{i=n-c+1..n} (1 - k/i) in log space, stable for n in the
    thousands (the binomials themselves overflow a float). 1 - (1 - c/n)^k is biased (it assumes
    drawing with replacement) and is not this.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise MetricsError(f"{name} must be an int, got {value!r}")
    if not 0 <= c <= n:
        raise MetricsError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise MetricsError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    log_fail = math.fsum(math.log1p(-k / i) for i in range(n - c + 1, n + 1))
    return -math.expm1(log_fail)


__all__ = [
    "AVERAGES", "MetricsError", "PRF", "accuracy", "confusion_matrix",
    "entity_scores", "entity_spans", "exact_match", "matthews_corrcoef", "normalize_answer", "pass_at_k",
    "precision_recall_f1", "token_f1",
]
