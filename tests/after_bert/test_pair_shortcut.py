"""The bag-of-words shortcut: on documents with their own topics it solves NSP and not SOP, because NSP's
negatives change the topic and SOP's only the order."""

from __future__ import annotations

import random

import pytest

from bertcourse.after_bert.pair_shortcut import PairShortcut, ShortcutError, held_out_split, shortcut_score


def topical_documents(n_documents: int = 120, sentences: int = 6, topics: int = 15, seed: int = 0) -> list[list[str]]:
    """Documents each drawing 70% of their words from the vocabulary of one of `topics` topics, the rest
    from common words (so a document's words are seen in training, in other documents on its topic)."""
    rng = random.Random(seed)
    common = ["the", "a", "of", "and", "is", "was", "in", "to"]
    documents = []
    for d in range(n_documents):
        topic = [f"topic{d % topics}word{i}" for i in range(12)]
        documents.append([" ".join(rng.choice(topic if rng.random() < 0.7 else common) for _ in range(10))
                          for _ in range(sentences)])
    return documents


def pairs(documents, kind: str, seed: int):
    """NSP: the true next sentence or one from another document; SOP: the true order or swapped."""
    rng = random.Random(seed)
    built = []
    for d, document in enumerate(documents):
        for a, b in zip(document, document[1:]):
            if rng.random() < 0.5:
                built.append((a, b, 0))
            elif kind == "nsp":
                other = rng.choice([i for i in range(len(documents)) if i != d])
                built.append((a, rng.choice(documents[other]), 1))
            else:
                built.append((b, a, 1))
    return built


def test_the_shortcut_solves_nsp_and_not_sop():
    train_docs, test_docs = held_out_split(topical_documents(), test_share=0.3, seed=0)
    nsp = shortcut_score(pairs(train_docs, "nsp", 1), pairs(test_docs, "nsp", 2), n_resamples=500)
    sop = shortcut_score(pairs(train_docs, "sop", 1), pairs(test_docs, "sop", 2), n_resamples=500)
    assert nsp.low > 0.75, nsp.describe()
    assert sop.low < 0.5 < sop.high + 0.05 and sop.accuracy < 0.62, sop.describe()  # chance, within noise
    assert nsp.low <= nsp.accuracy <= nsp.high and nsp.n_test == len(pairs(test_docs, "nsp", 2))
    assert 0.5 <= nsp.majority <= 0.6 and "held-out pairs" in nsp.describe()


def test_the_overlap_features_do_not_depend_on_which_sentence_comes_first():
    docs = topical_documents(20)
    model = PairShortcut().fit(pairs(docs, "nsp", 0))
    a, b = docs[0][0], docs[0][1]
    forward, backward = model.features([(a, b, 0)]), model.features([(b, a, 0)])
    width = len(model.vectorizer.vocabulary_)
    assert forward.shape == (1, 3 * width + 1)
    assert (forward[:, 2 * width :] != backward[:, 2 * width :]).nnz == 0  # shared words and cosine
    assert (forward[:, :width] != backward[:, width : 2 * width]).nnz == 0  # the two bags trade places
    assert 0 < forward[0, -1] <= 1


def test_bad_pairs_are_refused_with_what_was_wrong():
    with pytest.raises(ShortcutError, match="no pairs"):
        shortcut_score([], [("a", "b", 0)])
    with pytest.raises(ShortcutError, match=r"training pairs\[1\]"):
        PairShortcut().fit([("a b", "c d", 0), ("a b", 1)])
    with pytest.raises(ShortcutError, match="same label"):
        PairShortcut().fit([("a b", "c d", 0), ("e f", "g h", 0)])
    with pytest.raises(ShortcutError, match="test_share"):
        held_out_split([1, 2, 3], test_share=1.0)


def test_held_out_split_is_a_fixed_partition():
    train, test = held_out_split(list(range(50)), test_share=0.2, seed=3)
    assert len(test) == 10 and sorted(train + test) == list(range(50))
    assert held_out_split(list(range(50)), test_share=0.2, seed=3) == (train, test)
