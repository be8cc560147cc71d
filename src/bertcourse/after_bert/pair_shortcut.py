"""The topic shortcut of next-sentence prediction, measured: a bag-of-words classifier with no model and no
word order, trained on sentence pairs (lesson 6).

NSP's negatives are sentences from *another document*, so they are usually about something else: "do
these two sentences share words?" answers much of NSP without any sense of coherence (ALBERT, Lan et al.
2020, names this as the reason NSP teaches little). SOP's negatives are the same two sentences swapped:
the same words on both sides, so word overlap says nothing, and only order-sensitive cues remain.

The features of a pair (A, B), from a TF-IDF vectoriser fitted on the training pairs' sentences:
A's bag of words, B's bag of words, their element-wise product (the shared words, weighted) and their
cosine similarity. No feature sees the order of words inside a sentence; the separate A and B parts let
the classifier use any "which sentence comes first" cue a bag of words carries (pronouns, "however"),
so SOP's score is a measurement, not zero by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from bertcourse import metrics, stats
from bertcourse.errors import BertcourseError

Pair = tuple[str, str, int]  # (first sentence, second sentence, label); label 1 = corrupted (random / swapped)


class ShortcutError(BertcourseError, ValueError):
    """Pairs that cannot train or test the shortcut (empty, one label only, malformed)."""


def _check_pairs(pairs: Sequence[Pair], name: str) -> None:
    if not pairs:
        raise ShortcutError(f"{name}: no pairs")
    for i, pair in enumerate(pairs):
        if len(pair) != 3 or not isinstance(pair[0], str) or not isinstance(pair[1], str) or pair[2] not in (0, 1):
            raise ShortcutError(f"{name}[{i}]: expected (first: str, second: str, label 0/1), got {pair!r}")


class PairShortcut:
    """TF-IDF bags of words of both sentences and their overlap, then logistic regression."""

    def __init__(self, C: float = 1.0):
        self.vectorizer = TfidfVectorizer(lowercase=True, token_pattern=r"(?u)\b\w+\b")
        self.classifier = LogisticRegression(C=C, max_iter=2000)

    def features(self, pairs: Sequence[Pair]) -> sparse.csr_matrix:
        """[n, 3 * vocabulary + 1]: bag of A, bag of B, their element-wise product, their cosine."""
        first = self.vectorizer.transform([p[0] for p in pairs])
        second = self.vectorizer.transform([p[1] for p in pairs])
        shared = first.multiply(second).tocsr()
        cosine = sparse.csr_matrix(np.asarray(shared.sum(axis=1)))  # rows are l2-normalised: the dot product
        return sparse.hstack([first, second, shared, cosine], format="csr")

    def fit(self, pairs: Sequence[Pair]) -> PairShortcut:
        """Fit the vectoriser on the training sentences, then the classifier on their pairs."""
        _check_pairs(pairs, "training pairs")
        labels = [p[2] for p in pairs]
        if len(set(labels)) < 2:
            raise ShortcutError("training pairs: all have the same label; the classifier needs both")
        self.vectorizer.fit([p[0] for p in pairs] + [p[1] for p in pairs])
        self.classifier.fit(self.features(pairs), labels)
        return self

    def predict(self, pairs: Sequence[Pair]) -> list[int]:
        """Predicted labels (1 = corrupted) of `pairs`."""
        _check_pairs(pairs, "pairs")
        return self.classifier.predict(self.features(pairs)).tolist()


@dataclass
class ShortcutScore:
    """Held-out accuracy of the shortcut with its 95% bootstrap interval, and the pairs it was measured on."""

    accuracy: float
    low: float
    high: float
    n_test: int
    majority: float  # accuracy of always predicting the more frequent test label

    def describe(self) -> str:
        """One line: accuracy, interval, test size, majority baseline."""
        return (f"accuracy {self.accuracy:.3f} (95% interval {self.low:.3f}-{self.high:.3f}) on {self.n_test:,} "
                f"held-out pairs; majority label {self.majority:.3f}")


def shortcut_score(train: Sequence[Pair], test: Sequence[Pair], *, n_resamples: int = 2000, seed: int = 0,
                   C: float = 1.0) -> ShortcutScore:
    """Fit `PairShortcut` on `train`, score it on `test`: accuracy and a percentile bootstrap interval."""
    _check_pairs(test, "test pairs")
    predicted = PairShortcut(C).fit(train).predict(test)
    truth = [p[2] for p in test]
    interval = stats.bootstrap_ci(truth, predicted, "accuracy", n_resamples=n_resamples, seed=seed)
    share = float(np.mean(truth))
    return ShortcutScore(metrics.accuracy(truth, predicted), interval.low, interval.high, len(test),
                         max(share, 1 - share))


def held_out_split(items: Sequence[Any], test_share: float = 0.2, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """A random train/test split of `items` (a fixed seed: the same split every run). Split the
    *documents* before building pairs: pairs of one document on both sides would let the classifier
    recognise the document rather than the relation between two sentences."""
    if not 0 < test_share < 1:
        raise ShortcutError(f"test_share must lie in (0, 1), got {test_share}")
    order = np.random.default_rng(seed).permutation(len(items))
    cut = int(round(len(items) * test_share))
    return [items[i] for i in order[cut:]], [items[i] for i in order[:cut]]


__all__ = ["Pair", "ShortcutError", "PairShortcut", "ShortcutScore", "shortcut_score", "held_out_split"]
