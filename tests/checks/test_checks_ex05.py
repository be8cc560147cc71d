"""Proof of the hidden checks of ex05-metrics: every classic mistake fails the checks aimed at it (and only
checks of its own part), several different correct implementations (loops and Counters, confusion-matrix
tensors, log-space or exact-integer pass@k, numpy or torch bootstraps with other quantile definitions) pass
every check, stubs and the release score 0, and each cell's points are the sum of its checks'."""

from __future__ import annotations

import re

import pytest
from check_proofs import (
    DEF,
    REGION,
    assert_bundle_caught,
    assert_bundles_sound,
    assert_every_check_targeted,
    assert_hints_name,
    assert_passes_every_check,
    assert_points_add_up,
    assert_release_scores_zero,
    assert_scores_zero,
    assert_solution_passes_every_check,
    bundle_ids,
    bundle_misconceptions,
    graded_cells,
    reference_source,
    wrong_entry,
)

pytestmark = pytest.mark.slow  # every proof grades a notebook with the real engine

CHECKS = "autograder/checks/ex05_metrics.py"
NOTEBOOK = "solutions/ex05-metrics/metrics.ipynb"
RELEASE = "exercises/ex05-metrics/metrics.ipynb"

PRELUDE = """
import math
import random
from collections import Counter

import torch

from bertcourse.metrics import accuracy
"""



def solution_source() -> str:
    """The solution notebook's own solution cells, after the imports of its set-up cell."""
    return reference_source(NOTEBOOK, PRELUDE)


# ----------------------------------------------------------------------------- other correct implementations

MATRIX = '''
import re
import string
import numpy as np

def confusion_matrix(y_true, y_pred, labels=None):
    classes = sorted(set(y_true).union(y_pred)) if labels is None else list(labels)
    pos = {c: i for i, c in enumerate(classes)}
    keep = [(pos[t], pos[p]) for t, p in zip(y_true, y_pred) if t in pos and p in pos]
    k = len(classes)
    flat = torch.tensor([i * k + j for i, j in keep], dtype=torch.int64)
    return torch.bincount(flat, minlength=k * k).reshape(k, k)

def precision_recall_f1(y_true, y_pred, *, average="binary", labels=None, pos_label=1, zero_division=0):
    if average == "binary":
        classes = [pos_label]
    else:
        classes = sorted(set(y_true) | set(y_pred)) if labels is None else list(labels)
    # one extra "other" class collects every label that is not listed
    listed = {c: i for i, c in enumerate(classes)}
    k = len(classes)
    cm = torch.zeros(k + 1, k + 1, dtype=torch.float64)
    for t, p in zip(y_true, y_pred):
        cm[listed.get(t, k), listed.get(p, k)] += 1
    tp = cm.diagonal()[:k]
    predicted, support = cm.sum(0)[:k], cm.sum(1)[:k]
    if average == "micro":
        tp, predicted, support = tp.sum(0, keepdim=True), predicted.sum(0, keepdim=True), support.sum(0, keepdim=True)
    def div(a, b):
        return torch.where(b > 0, a / b.clamp(min=1), torch.full_like(a, float(zero_division)))
    p, r, f = div(tp, predicted), div(tp, support), div(2 * tp, predicted + support)
    if average is None:
        return p, r, f
    if average == "weighted" and support.sum() > 0:
        w = support / support.sum()
        return float((p * w).sum()), float((r * w).sum()), float((f * w).sum())
    return float(p.mean()), float(r.mean()), float(f.mean())

def matthews_corrcoef(y_true, y_pred):
    cm = np.asarray(confusion_matrix(y_true, y_pred).tolist(), dtype=np.float64)
    t, p, c, s = cm.sum(1), cm.sum(0), np.trace(cm), cm.sum()
    den = np.sqrt((s * s - p @ p) * (s * s - t @ t))
    return 0.0 if den == 0 else float((c * s - t @ p) / den)

TABLE = str.maketrans("", "", string.punctuation)

def normalize_answer(text):
    return " ".join(re.sub(r"\\b(a|an|the)\\b", " ", text.lower().translate(TABLE)).split())

def exact_match(prediction, references):
    return float(any(normalize_answer(prediction) == normalize_answer(r) for r in references))

def token_f1(prediction, references):
    best = 0.0
    for ref in references:
        a, b = normalize_answer(prediction).split(), normalize_answer(ref).split()
        same = sum(min(a.count(w), b.count(w)) for w in set(a))
        if same:
            best = max(best, 2 * same / (len(a) + len(b)))
    return best

def pass_at_k(n, c, k):
    if n - c < k:
        return 1.0
    return -math.expm1(sum(math.log1p(-k / i) for i in range(n - c + 1, n + 1)))

def bootstrap_ci(y_true, y_pred, metric, *, n_resamples=1000, alpha=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = len(y_true)
    idx = torch.randint(0, n, (n_resamples, n), generator=g).tolist()
    scores = sorted(metric([y_true[i] for i in row], [y_pred[i] for i in row]) for row in idx)
    return scores[int(alpha / 2 * n_resamples)], scores[min(n_resamples - 1, int((1 - alpha / 2) * n_resamples))]
'''

EXACT = '''
import re
import string
import numpy as np

def confusion_matrix(y_true, y_pred, labels=None):
    classes = sorted(set(y_true) | set(y_pred)) if labels is None else labels
    return [[sum(1 for t, p in zip(y_true, y_pred) if t == a and p == b) for b in classes] for a in classes]

def precision_recall_f1(y_true, y_pred, *, average="binary", labels=None, pos_label=1, zero_division=0):
    classes = [pos_label] if average == "binary" else (
        sorted(set(y_true) | set(y_pred)) if labels is None else list(labels))
    stats = []
    for c in classes:
        tp = sum(1 for t, p in zip(y_true, y_pred) if t == c and p == c)
        fp = sum(1 for t, p in zip(y_true, y_pred) if t != c and p == c)
        fn = sum(1 for t, p in zip(y_true, y_pred) if t == c and p != c)
        stats.append((tp, fp, fn))
    if average == "micro":
        stats = [tuple(map(sum, zip(*stats)))]
    scores = []
    for tp, fp, fn in stats:
        p = tp / (tp + fp) if tp + fp else zero_division
        r = tp / (tp + fn) if tp + fn else zero_division
        f = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else zero_division
        scores.append((p, r, f))
    columns = [list(col) for col in zip(*scores)]
    if average is None:
        return tuple(columns)
    if average == "weighted":
        support = [tp + fn for tp, fp, fn in stats]
        if sum(support):
            return tuple(sum(s * v for s, v in zip(support, col)) / sum(support) for col in columns)
    return tuple(sum(col) / len(col) for col in columns)

def matthews_corrcoef(y_true, y_pred):
    classes = sorted(set(y_true) | set(y_pred))
    if len(classes) == 2:
        neg, pos = classes
        tp = sum(t == pos and p == pos for t, p in zip(y_true, y_pred))
        tn = sum(t == neg and p == neg for t, p in zip(y_true, y_pred))
        fp = sum(t == neg and p == pos for t, p in zip(y_true, y_pred))
        fn = sum(t == pos and p == neg for t, p in zip(y_true, y_pred))
        den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
        return (tp * tn - fp * fn) / math.sqrt(den) if den else 0.0
    s, t, p = len(y_true), Counter(y_true), Counter(y_pred)
    c = sum(a == b for a, b in zip(y_true, y_pred))
    num = c * s - sum(t[k] * p[k] for k in classes)
    den = (s * s - sum(v * v for v in p.values())) * (s * s - sum(v * v for v in t.values()))
    return num / math.sqrt(den) if den else 0.0

def normalize_answer(text):
    text = text.lower()
    for ch in string.punctuation:
        text = text.replace(ch, "")
    return " ".join(w for w in re.sub(r"\\b(a|an|the)\\b", " ", text).split())

def exact_match(prediction, references):
    return max(1.0 if normalize_answer(prediction) == normalize_answer(r) else 0.0 for r in references)

def token_f1(prediction, references):
    def one(ref):
        a, b = Counter(normalize_answer(prediction).split()), Counter(normalize_answer(ref).split())
        same = sum((a & b).values())
        return 0.0 if same == 0 else 2 * same / (sum(a.values()) + sum(b.values()))
    return max(one(r) for r in references)

def pass_at_k(n, c, k):
    return 1 - math.comb(n - c, k) / math.comb(n, k)

def bootstrap_ci(y_true, y_pred, metric, *, n_resamples=1000, alpha=0.05, seed=0):
    rng = np.random.default_rng(seed)
    t, p = np.array(y_true), np.array(y_pred)
    scores = []
    for _ in range(n_resamples):
        i = rng.integers(0, len(t), len(t))
        scores.append(metric(t[i].tolist(), p[i].tolist()))
    low, high = np.quantile(scores, [alpha / 2, 1 - alpha / 2], method="nearest")
    return float(low), float(high)
'''

ANSWERS = 'answer_q1, answer_q2, answer_q3, answer_q4 = "c", " B", "(d)", "b"\n'

CORRECT = {
    "matrices, log-space pass@k, torch bootstrap": lambda: PRELUDE + MATRIX + ANSWERS,
    "loops, exact integers, numpy bootstrap": lambda: PRELUDE + EXACT + ANSWERS,
}


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_implementations_pass_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name](), name)


def test_the_solution_notebook_passes_every_check():
    assert_solution_passes_every_check(NOTEBOOK, "ex05-metrics")


# ----------------------------------------------------------------------------- misconceptions


def mutate(old: str, new: str, count: int = 1) -> str:
    base = solution_source()
    assert base.count(old) == count, (old, base.count(old))
    return base.replace(old, new)


PRF = {"test_per_class_scores_match_reference", "test_labels_from_both_sequences", "test_macro_average",
       "test_macro_f1_is_mean_of_per_class_f1", "test_micro_average", "test_weighted_average",
       "test_binary_average_scores_pos_label", "test_zero_division", "test_explicit_labels_subset_in_order"}
SQUAD = {"test_normalize_answer_each_step", "test_normalize_answer_step_order", "test_normalize_answer_unicode",
         "test_exact_match_best_normalised_reference", "test_token_f1_matches_reference",
         "test_token_f1_counts_repeated_tokens", "test_token_f1_best_reference", "test_empty_answers"}
BOOT = {"test_bootstrap_interval_quantiles", "test_bootstrap_pairs_labels_and_predictions", "test_bootstrap_seed",
        "test_bootstrap_honours_n_resamples", "test_bootstrap_scores_with_the_metric_given"}


def others(*keep: str, within: set[str]) -> frozenset[str]:
    return frozenset(within - set(keep))


WRONG = {
    # confusion matrix
    "transposed confusion matrix": (
        mutate("counts[index[t], index[p]] += 1", "counts[index[p], index[t]] += 1"),
        {"test_confusion_matrix_rows_are_true_labels"}, frozenset({"test_confusion_matrix_label_set_and_order"})),
    "confusion classes from y_true only": (
        mutate("classes = sorted(set(y_true) | set(y_pred)) if labels is None else list(labels)\n    index",
               "classes = sorted(set(y_true)) if labels is None else list(labels)\n    index"),
        {"test_confusion_matrix_label_set_and_order"}, frozenset({"test_confusion_matrix_rows_are_true_labels"})),
    "confusion labels= ignored": (
        mutate("classes = sorted(set(y_true) | set(y_pred)) if labels is None else list(labels)\n    index",
               "classes = sorted(set(y_true) | set(y_pred))\n    index"),
        {"test_confusion_matrix_label_set_and_order"}, frozenset({"test_confusion_matrix_rows_are_true_labels"})),
    # precision, recall, F1
    "macro computed as micro": (
        mutate('    if average == "micro":\n        tp, fp, fn',
               '    if average in ("micro", "macro"):\n        tp, fp, fn'),
        {"test_macro_average", "test_macro_f1_is_mean_of_per_class_f1"},
        others("test_macro_average", "test_macro_f1_is_mean_of_per_class_f1", "test_labels_from_both_sequences",
               "test_zero_division", "test_explicit_labels_subset_in_order", within=PRF)),
    "macro-F1 as the F1 of macro precision and recall": (
        mutate("    return tuple(sum(w * v for w, v in zip(weights, values)) for values in (precision, recall, f1))",
               "    p, r = (sum(w * v for w, v in zip(weights, values)) for values in (precision, recall))\n"
               "    return p, r, (2 * p * r / (p + r) if p + r else 0.0)"),
        {"test_macro_f1_is_mean_of_per_class_f1"},
        frozenset({"test_per_class_scores_match_reference", "test_macro_average", "test_micro_average"})),
    "P/R/F1 classes from y_true only": (
        mutate("classes = sorted(set(y_true) | set(y_pred)) if labels is None else list(labels)\n    pairs",
               "classes = sorted(set(y_true)) if labels is None else list(labels)\n    pairs"),
        {"test_labels_from_both_sequences"},
        others("test_labels_from_both_sequences", "test_zero_division", within=PRF)),
    "micro as plain accuracy": (
        mutate('    if average == "micro":\n        tp, fp, fn = [sum(tp)], [sum(fp)], [sum(fn)]',
               '    if average == "micro":\n        acc = sum(t == p for t, p in zip(y_true, y_pred)) / len(y_true)\n'
               '        return acc, acc, acc'),
        {"test_micro_average"}, others("test_micro_average", within=PRF)),
    "weighted by predicted count": (
        mutate("    support = [a + b for a, b in zip(tp, fn)]", "    support = [a + b for a, b in zip(tp, fp)]"),
        {"test_weighted_average"}, others("test_weighted_average", "test_zero_division",
                                          "test_explicit_labels_subset_in_order", within=PRF)),
    "pos_label ignored": (
        mutate('        classes = [pos_label]', '        classes = [1]'),
        {"test_binary_average_scores_pos_label"}, others("test_binary_average_scores_pos_label", within=PRF)),
    "zero_division ignored": (
        mutate("return num / den if den else float(zero_division)", "return num / den if den else 0.0"),
        {"test_zero_division"}, others("test_zero_division", within=PRF)),
    "F1 = zero_division when P + R = 0": (
        mutate("    f1 = [ratio(2 * a, 2 * a + b + c) for a, b, c in zip(tp, fp, fn)]",
               "    f1 = [2 * p * r / (p + r) if p + r else float(zero_division) for p, r in zip(precision, recall)]"),
        {"test_zero_division"}, others("test_zero_division", within=PRF)),
    "weighted by supports that are all 0": (
        mutate("    if average == \"weighted\" and sum(support) > 0:", "    if average == \"weighted\":"),
        {"test_zero_division"}, others("test_zero_division", within=PRF)),
    "accuracy written into bootstrap_ci": (
        mutate("        scores.append(metric([y_true[i] for i in idx], [y_pred[i] for i in idx]))",
               "        scores.append(sum(y_true[i] == y_pred[i] for i in idx) / n)"),
        {"test_bootstrap_scores_with_the_metric_given"}, others("test_bootstrap_scores_with_the_metric_given",
                                                                within=BOOT)),
    "labels= sorted": (
        mutate("if labels is None else list(labels)\n    pairs", "if labels is None else sorted(labels)\n    pairs"),
        {"test_explicit_labels_subset_in_order"},
        others("test_explicit_labels_subset_in_order", "test_zero_division", within=PRF)),
    "examples with unlisted labels dropped": (
        mutate("    pairs = Counter(zip(y_true, y_pred))\n",
               "    if labels is not None:\n"
               "        kept = [(t, p) for t, p in zip(y_true, y_pred) if t in labels and p in labels]\n"
               "        y_true, y_pred = [t for t, _ in kept], [p for _, p in kept]\n"
               "    pairs = Counter(zip(y_true, y_pred))\n"),
        {"test_explicit_labels_subset_in_order"},
        frozenset({"test_per_class_scores_match_reference", "test_macro_average", "test_weighted_average"})),
    "precision and recall swapped": (
        mutate("    precision = [ratio(a, a + b) for a, b in zip(tp, fp)]\n"
               "    recall = [ratio(a, a + b) for a, b in zip(tp, fn)]",
               "    precision = [ratio(a, a + b) for a, b in zip(tp, fn)]\n"
               "    recall = [ratio(a, a + b) for a, b in zip(tp, fp)]"),
        {"test_per_class_scores_match_reference"}),
    # MCC
    "MCC as 2 x accuracy - 1": (
        mutate("    return cov_tp / (math.sqrt(cov_pp) * math.sqrt(cov_tt))", "    return 2 * c / s - 1"),
        {"test_mcc_binary_matches_reference"}),
    "MCC of class 1 against the rest": (
        mutate("    s = len(y_true)\n",
               "    positive = max(y_true)\n"
               "    y_true = [int(t == positive) for t in y_true]\n"
               "    y_pred = [int(p == positive) for p in y_pred]\n    s = len(y_true)\n"),
        {"test_mcc_multiclass_matches_reference"}, frozenset({"test_mcc_binary_matches_reference"})),
    "MCC nan when undefined": (
        mutate("    if cov_pp == 0 or cov_tt == 0:\n        return 0.0\n", ""),
        {"test_mcc_undefined_is_zero"},
        frozenset({"test_mcc_binary_matches_reference", "test_mcc_multiclass_matches_reference"})),
    "MCC in int64 tensors": (
        mutate("    return cov_tp / (math.sqrt(cov_pp) * math.sqrt(cov_tt))",
               "    counts = torch.tensor([cov_tp, cov_pp, cov_tt], dtype=torch.int64)\n"
               "    return float(counts[0]) / math.sqrt(float(counts[1] * counts[2]))"),
        {"test_mcc_large_inputs"},
        frozenset({"test_mcc_binary_matches_reference", "test_mcc_multiclass_matches_reference"})),
    # SQuAD
    "no lower-casing": (
        mutate("    text = text.lower()\n", ""),
        {"test_normalize_answer_each_step", "test_exact_match_best_normalised_reference"}),
    "articles removed before punctuation": (
        mutate('    text = "".join(ch for ch in text if ch not in set(string.punctuation))\n'
               '    text = re.sub(r"\\b(a|an|the)\\b", " ", text)\n',
               '    text = re.sub(r"\\b(a|an|the)\\b", " ", text)\n'
               '    text = "".join(ch for ch in text if ch not in set(string.punctuation))\n'),
        {"test_normalize_answer_step_order"}, frozenset({"test_normalize_answer_each_step"})),
    "articles removed before lower-casing": (
        mutate('    text = text.lower()\n    text = "".join(ch for ch in text if ch not in set(string.punctuation))\n'
               '    text = re.sub(r"\\b(a|an|the)\\b", " ", text)\n',
               '    text = re.sub(r"\\b(a|an|the)\\b", " ", text)\n    text = text.lower()\n'
               '    text = "".join(ch for ch in text if ch not in set(string.punctuation))\n'),
        {"test_normalize_answer_step_order"}, frozenset({"test_normalize_answer_each_step"})),
    "unicode punctuation removed too": (
        mutate('if ch not in set(string.punctuation))',
               'if not __import__("unicodedata").category(ch).startswith("P"))'),
        {"test_normalize_answer_unicode"},
        frozenset({"test_normalize_answer_each_step", "test_normalize_answer_step_order"})),
    "whitespace split on spaces only": (
        mutate('    return " ".join(text.split())', '    return " ".join(w for w in text.split(" ") if w)'),
        {"test_normalize_answer_unicode", "test_normalize_answer_each_step"},
        frozenset({"test_normalize_answer_step_order"})),
    "exact match against the first reference": (
        mutate("for ref in references)\n    ### END SOLUTION\n\n\ndef token_f1",
               "for ref in references[:1])\n    ### END SOLUTION\n\n\ndef token_f1"),
        {"test_exact_match_best_normalised_reference"}, others("test_exact_match_best_normalised_reference",
                                                               within=SQUAD)),
    "exact match without normalising": (
        mutate("    return max(float(normalize_answer(prediction) == normalize_answer(ref)) for ref in references)",
               "    return max(float(prediction == ref) for ref in references)"),
        {"test_exact_match_best_normalised_reference"}, others("test_exact_match_best_normalised_reference",
                                                               "test_empty_answers", within=SQUAD)),
    "token F1 of unnormalised tokens": (
        mutate("    pred = normalize_answer(prediction).split()\n"
               "    return max(f1(pred, normalize_answer(ref).split())",
               "    pred = prediction.split()\n    return max(f1(pred, ref.split())"),
        {"test_token_f1_matches_reference"}),
    "set instead of multiset overlap": (
        mutate("same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())",
               "same = len(set(pred_tokens) & set(ref_tokens))"),
        {"test_token_f1_counts_repeated_tokens"}, others("test_token_f1_counts_repeated_tokens",
                                                         "test_token_f1_matches_reference", within=SQUAD)),
    "token F1 against the first reference": (
        mutate("    return max(f1(pred, normalize_answer(ref).split()) for ref in references)",
               "    return f1(pred, normalize_answer(references[0]).split())"),
        {"test_token_f1_best_reference"}, others("test_token_f1_best_reference", within=SQUAD)),
    "SQuAD 2.0 rule for empty answers": (
        mutate("        same = sum(", "        if not pred_tokens or not ref_tokens:\n"
               "            return float(pred_tokens == ref_tokens)\n        same = sum("),
        {"test_empty_answers"}, others("test_empty_answers", within=SQUAD)),
    # pass@k
    "biased pass@k": (
        mutate("    product = 1.0\n    for i in range(n - c + 1, n + 1):\n        product *= 1.0 - k / i\n",
               "    product = (1 - c / n) ** k\n"),
        {"test_pass_at_k_unbiased", "test_pass_at_k_large_n"}),
    "pass@k from float factorials": (
        mutate("    product = 1.0\n    for i in range(n - c + 1, n + 1):\n        product *= 1.0 - k / i\n",
               "    f = lambda m: float(math.factorial(m))\n"
               "    product = f(n - c) * f(n - k) / (f(n) * f(n - c - k))\n"),
        {"test_pass_at_k_large_n"}, frozenset({"test_pass_at_k_unbiased", "test_pass_at_k_edge_cases"})),
    "log-space pass@k without the n - c < k case": (
        mutate("    if n - c < k:\n        return 1.0\n    product = 1.0\n    for i in range(n - c + 1, n + 1):\n"
               "        product *= 1.0 - k / i\n",
               "    product = math.exp(sum(math.log(1.0 - k / i) for i in range(n - c + 1, n + 1)))\n"),
        {"test_pass_at_k_edge_cases"}, frozenset({"test_pass_at_k_unbiased", "test_pass_at_k_large_n"})),
    # bootstrap
    "a fixed number of resamples": (
        mutate("    for _ in range(n_resamples):\n", "    for _ in range(1000):\n"),
        {"test_bootstrap_honours_n_resamples"}, frozenset({"test_bootstrap_pairs_labels_and_predictions"})),
    "alpha not halved": (
        mutate("q = torch.tensor([alpha / 2, 1 - alpha / 2]", "q = torch.tensor([alpha, 1 - alpha]"),
        {"test_bootstrap_interval_quantiles"}, frozenset({"test_bootstrap_pairs_labels_and_predictions"})),
    "unpaired resampling": (
        mutate("scores.append(metric([y_true[i] for i in idx], [y_pred[i] for i in idx]))",
               "scores.append(metric([y_true[i] for i in idx], [y_pred[i] for i in rng.choices(range(n), k=n)]))"),
        {"test_bootstrap_pairs_labels_and_predictions", "test_bootstrap_interval_quantiles"}),
    "resampling without replacement": (
        mutate("idx = rng.choices(range(n), k=n)", "idx = rng.sample(range(n), n)"),
        {"test_bootstrap_interval_quantiles"}, frozenset({"test_bootstrap_pairs_labels_and_predictions"})),
    "the global generator, reseeded": (
        mutate("    rng = random.Random(seed)\n", "    random.seed(seed)\n    rng = random\n"),
        {"test_bootstrap_seed"}, others("test_bootstrap_seed", within=BOOT)),
    "the seed ignored": (
        mutate("    rng = random.Random(seed)\n", "    rng = random.Random(0)\n"),
        {"test_bootstrap_seed"}, others("test_bootstrap_seed", within=BOOT)),
    # concepts
    "Q1: a random guesser credited for its lucky hits": (
        mutate('answer_q1 = "c"', 'answer_q1 = "b"'), {"test_q1_mcc_of_answers_that_ignore_the_sentence"}),
    "Q2: macro as smoothing": (
        mutate('answer_q2 = "b"', 'answer_q2 = "a"'), {"test_q2_macro_vs_micro_under_imbalance"}),
    "Q3: the pass@1 ranking thought to hold at every k": (
        mutate('answer_q3 = "d"', 'answer_q3 = "a"'), {"test_q3_pass_at_k_rankings_change_with_k"}),
    "Q4: the interval thought not to depend on the test set's size": (
        mutate('answer_q4 = "b"', 'answer_q4 = "a"'), {"test_q4_interval_width_and_test_set_size"}),
}


BUNDLES = bundle_misconceptions(CHECKS, WRONG, solution_source())


@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_each_misconception_fails_its_checks_and_only_those_aimed_at_it(bundle):
    """Misconceptions of different functions, graded in one notebook (check_proofs.bundle_misconceptions)."""
    assert_bundle_caught(CHECKS, WRONG, solution_source(), bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, WRONG, solution_source(), BUNDLES)


def test_every_check_is_the_target_of_a_misconception():
    cells = set(graded_cells(NOTEBOOK))
    assert_every_check_targeted(CHECKS, WRONG, cells)


def test_check_points_add_up_to_the_autograded_cells():
    assert_points_add_up(CHECKS, NOTEBOOK)


# ----------------------------------------------------------------------------- stubs earn nothing

def stubbed(source: str, stub: str) -> str:
    """`source` with each solution region replaced by nbgrader's NotImplementedError ("raise"), by returning
    the function's first argument ("return"), or by a well-formed nothing ("zero": 0.0, or an empty tuple)."""

    def replace(match: re.Match) -> str:
        indent = match.group(1)
        if stub == "raise":
            return f"{indent}raise NotImplementedError()\n"
        top_level = [line for line in source[: match.start()].splitlines() if line and not line[0].isspace()]
        if not top_level or not top_level[-1].startswith("def "):
            return f"{indent}pass\n"  # the answers' region, at the top level of its cell
        name, params = DEF.match(top_level[-1]).groups()
        if stub == "zero":
            return f"{indent}return (0.0, 0.0)\n" if name == "bootstrap_ci" else f"{indent}return 0.0\n"
        return f"{indent}return {params.split(',')[0].strip()}\n"

    return REGION.sub(replace, source)


@pytest.mark.parametrize("stub", ["return", "zero"])  # the raise stub is the release (test below)
def test_a_stub_notebook_scores_zero(stub):
    source = stubbed(solution_source(), stub)
    assert "### BEGIN SOLUTION" not in source
    assert_scores_zero(CHECKS, source, f"a {stub} stub")


def test_the_release_scores_zero():
    assert_release_scores_zero(RELEASE, "ex05-metrics")


def test_the_hint_for_a_biased_pass_at_k_is_about_sampling_not_overflow():
    """The large-n check's own hint is about binomials overflowing; code with no binomial, which draws WITH
    replacement, gets the hint about that instead (a hint chosen from what the code did), and code that
    does overflow keeps the check's own hint."""
    from bertcourse.authoring.proofs import grade_source
    from bertcourse.grading.report import format_result

    biased = grade_source(CHECKS, wrong_entry(WRONG["biased pass@k"])[0],
                          only={"test_pass_at_k_large_n", "test_pass_at_k_unbiased"})
    hint = biased.check("test_pass_at_k_large_n").feedback
    assert "WITH replacement" in hint and "float" not in hint, hint
    report = format_result(biased)  # what the student reads: no overflow anywhere, the failing case named
    assert "float" not in report and "differs" not in report, report
    assert re.search(r"why:  pass_at_k\(\d+, \d+, \d+\) returned 0\.\d+", report), report
    floats = grade_source(CHECKS, wrong_entry(WRONG["pass@k from float factorials"])[0],
                          only={"test_pass_at_k_large_n"})
    assert "do not fit in a float" in floats.check("test_pass_at_k_large_n").feedback


def test_the_visible_large_n_hint_follows_what_small_n_showed():
    """The visible large-n check speaks of binomials too big for a float only when small n is right: a
    with-replacement formula, wrong at every size, is sent back to the pass@2 check (issue 26)."""
    import contextlib
    import io
    import math

    from check_proofs import notebook_cells

    cell = next("".join(c["source"]) for c in notebook_cells(NOTEBOOK)
                if c["metadata"].get("nbgrader", {}).get("grade_id") == "pass_at_k_checks")
    shown = {}
    for name, body in (("biased", "1 - (1 - c / n) ** k"),
                       ("float factorials", "1 - math.factorial(n - c) / math.factorial(n - c - k) "
                        "* math.factorial(n - k) / math.factorial(n) if n - c >= k else 1.0")):
        namespace = {"math": math}
        exec(f"def pass_at_k(n, c, k):\n    return {body}\n", namespace)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(cell, namespace)
        shown[name] = out.getvalue()
    assert "fix that first" in shown["biased"] and "float" not in shown["biased"], shown["biased"]
    assert "far beyond a float" in shown["float factorials"], shown["float factorials"]


@pytest.mark.parametrize("name, words", [("F1 = zero_division when P + R = 0", "whatever zero_division says"),
                                         ("zero_division ignored", "is `zero_division`"),
                                         ("weighted by supports that are all 0", "plain mean")])
def test_the_zero_division_hint_names_the_mistake_made(name, words):
    """Issue 36: an F1 that stands in zero_division for P + R = 0 is told that F1 is then 0 (not the check's own
    hint on 0/0 ratios), and code that ignores zero_division keeps that own hint."""
    others = tuple(w for w in ("whatever zero_division says", "is `zero_division`", "plain mean") if w != words)
    assert_hints_name(CHECKS, wrong_entry(WRONG[name])[0], set(PRF), {"test_zero_division": words}, others)
