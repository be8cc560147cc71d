"""NSP and SOP pairs (bertcourse.after_bert.sentence_pairs): the pairs, their labels (transformers' convention, 0 =
original), where NSP's random sentence comes from, the 50/50 balance, `[CLS] A [SEP] B [SEP]` against the
tokenizer's own pair encoding, and WikiText's article boundaries."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from stats_support import plausible

from bertcourse.after_bert.sentence_pairs import (
    documents_from_lines,
    encode_pair,
    nsp_pairs,
    sop_pairs,
    truncate_longest_first,
)
from bertcourse.tokenizer import train_tokenizer


def documents(sizes: list[int]) -> list[list[str]]:
    """Documents of unique sentences "d{doc} s{index}", so a sentence says where it came from."""
    return [[f"d{d} s{i}" for i in range(n)] for d, n in enumerate(sizes)]


def where(sentence: str) -> tuple[int, int]:
    d, s = sentence.split()
    return int(d[1:]), int(s[1:])


def test_nsp_pairs_every_consecutive_pair_once_with_true_next_labelled_0():
    docs = documents([5, 1, 0, 7, 3])
    pairs = nsp_pairs(docs, torch.Generator().manual_seed(0))
    assert [a for a, _, _ in pairs] == [s for doc in docs for s in doc[:-1]]  # one-sentence docs give none
    assert {label for _, _, label in pairs} == {0, 1}
    for a, b, label in pairs:
        (da, ia), (db, ib) = where(a), where(b)
        if label == 0:
            assert (db, ib) == (da, ia + 1)
        else:
            assert db != da  # from another document: never a itself, never its true next sentence


def test_nsp_random_sentence_is_never_the_sentence_itself_even_with_two_documents():
    docs = documents([2, 2])
    for seed in range(200):
        for a, b, label in nsp_pairs(docs, torch.Generator().manual_seed(seed), random_prob=1.0):
            assert label == 1 and a != b and where(a)[0] != where(b)[0]


def test_nsp_balance_is_half_and_follows_random_prob():
    docs = documents([30] * 10)  # 290 pairs a call
    for prob in (0.5, 0.2):
        labels = [label for seed in range(10) for _, _, label in
                  nsp_pairs(docs, torch.Generator().manual_seed(seed), random_prob=prob)]
        assert plausible(sum(labels), len(labels), prob), (sum(labels), len(labels))


def test_nsp_random_sentence_is_uniform_over_the_other_documents_sentences():
    docs = documents([4, 8, 12])  # 24 sentences: from doc 0 the others hold 20, from doc 2 they hold 12
    counts: Counter = Counter()
    for seed in range(300):
        for a, b, _ in nsp_pairs(docs, torch.Generator().manual_seed(seed), random_prob=1.0):
            counts[(where(a)[0], where(b))] += 1
    for d in range(len(docs)):
        trials = sum(n for (da, _), n in counts.items() if da == d)
        outside = [(e, i) for e, other in enumerate(docs) if e != d for i in range(len(other))]
        assert set(where_b for (da, where_b) in counts if da == d) == set(outside)
        for sentence in outside:  # each of the other documents' sentences with chance 1 / len(outside)
            assert plausible(counts[(d, sentence)], trials, 1 / len(outside), tail=1e-10), (d, sentence)


def test_nsp_is_reproducible_and_refuses_bad_input():
    docs = documents([6, 6, 6])
    assert nsp_pairs(docs, torch.Generator().manual_seed(3)) == nsp_pairs(docs, torch.Generator().manual_seed(3))
    assert nsp_pairs(docs, torch.Generator().manual_seed(3)) != nsp_pairs(docs, torch.Generator().manual_seed(4))
    with pytest.raises(ValueError, match="two documents"):
        nsp_pairs(documents([5]), torch.Generator())
    with pytest.raises(ValueError, match="random_prob"):
        nsp_pairs(docs, torch.Generator(), random_prob=1.5)
    with pytest.raises(ValueError, match="plain string"):
        nsp_pairs(["a sentence", "another"], torch.Generator())


def test_sop_pairs_swap_the_same_two_sentences_with_label_1():
    docs = documents([6, 1, 9])
    consecutive = [(doc[i], doc[i + 1]) for doc in docs for i in range(len(doc) - 1)]
    labels = []
    for seed in range(40):
        pairs = sop_pairs(docs, torch.Generator().manual_seed(seed))
        assert len(pairs) == len(consecutive)
        for (a, b), (first, second, label) in zip(consecutive, pairs):
            assert (first, second) == ((a, b) if label == 0 else (b, a))
            labels.append(label)
    assert plausible(sum(labels), len(labels), 0.5)
    swapped = [label for seed in range(40) for *_, label in
               sop_pairs(docs, torch.Generator().manual_seed(seed), swap_prob=0.25)]
    assert plausible(sum(swapped), len(swapped), 0.25)


@pytest.fixture(scope="module")
def tokenizer():
    text = ["the cat sat on the mat", "a dog ran in the park today", "birds sing loudly every morning"] * 20
    return train_tokenizer(text, 80, progress=False)


@pytest.mark.parametrize("max_seq_len", [64, 12, 9, 7])
def test_encode_pair_matches_the_tokenizers_own_pair_encoding(tokenizer, max_seq_len):
    first, second = "the cat sat on the mat in the park", "a dog ran"
    ours = encode_pair(tokenizer, first, second, max_seq_len)
    theirs = tokenizer(first, second, truncation="longest_first", max_length=max_seq_len)
    assert ours["input_ids"] == theirs["input_ids"]
    assert ours["token_type_ids"] == theirs["token_type_ids"]
    assert ours["attention_mask"] == [1] * len(ours["input_ids"]) and len(ours["input_ids"]) <= max_seq_len
    sep = tokenizer.sep_token_id
    ids, types = ours["input_ids"], ours["token_type_ids"]
    first_sep = ids.index(sep)
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == sep and ids.count(sep) == 2
    assert types[: first_sep + 1] == [0] * (first_sep + 1)  # the first [SEP] belongs to segment A
    assert types[first_sep + 1 :] == [1] * (len(ids) - first_sep - 1)  # the last [SEP] to segment B


def test_truncate_longest_first_cuts_the_longer_from_its_end():
    assert truncate_longest_first([1, 2, 3, 4, 5, 6], [7, 8], 5) == ([1, 2, 3], [7, 8])
    assert truncate_longest_first([1, 2, 3], [4, 5, 6], 4) == ([1, 2], [4, 5])
    assert truncate_longest_first([1], [2, 3], 10) == ([1], [2, 3])


LINES = [
    "= Homarus gammarus = Homarus gammarus , known as the European lobster , is a species .",
    "It is closely related to the American lobster .",
    "= = Description = = Homarus gammarus is a large <unk> .",
    "The current route was built in the late 1970s = = Route description = = M @-@ 82 begins here .",
    "= = Major intersections = = = Rock Lee = Rock Lee is a fictional character .",
    "He likes <unk> .",
    "= = = In Naruto = = = His first major appearance in the series is in an exam .",
]


def test_documents_from_lines_split_at_article_titles_only():
    docs = documents_from_lines(LINES)
    assert len(docs) == 2  # "= Title =" starts an article, also behind a section heading; "= = X = =" does not
    assert docs[0][0] == "Homarus gammarus , known as the European lobster , is a species ."
    assert docs[0][2] == "Homarus gammarus is a large [UNK] ."
    assert docs[1] == ["Rock Lee is a fictional character .", "He likes [UNK] .",
                       "His first major appearance in the series is in an exam ."]
    assert documents_from_lines(LINES, min_words=4)[1] == [docs[1][0], docs[1][2]]


def test_documents_from_lines_on_the_real_wikitext(data_dir):
    lines = (data_dir / "wikitext2" / "valid.txt").read_text(encoding="utf-8").splitlines()
    docs = documents_from_lines(lines, min_words=4)
    titles = sum(1 for line in lines if line.startswith("= ") and not line.startswith("= = "))
    assert len(docs) >= 0.9 * titles and len(docs) <= titles + sum(" = " in line for line in lines)
    assert all(len(doc) >= 1 for doc in docs) and sum(len(doc) > 10 for doc in docs) > 0.5 * len(docs)
    pairs = nsp_pairs(docs, torch.Generator().manual_seed(0))
    assert len(pairs) == sum(len(doc) - 1 for doc in docs)
