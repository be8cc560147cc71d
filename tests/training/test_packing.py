"""Compact packing (issue 13: WikiText-103 on a Colab): the same blocks as the list code it replaced, in a few
bytes a token, read like lists by every caller; the token cache keeps its files; the epoch's shuffle is drawn once.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertcourse.training.packing import NOT_A_WORD, PackedData, batch_indices, pack_sentences, tokenize, tokenize_prefix
from bertcourse.training.heldout import _token_counts
from bertcourse.training.ragged import Ragged, smallest_dtype
from bertcourse.after_bert.sentence_objectives import PairData, with_unlabelled


def list_packing(sentence_ids, max_seq_len, cls_id, sep_id, word_ids=None):
    """The list-of-lists packing this module had before (issue 13), kept here as the reference."""
    blocks, segments, words = [], [], []
    block, segment, word = [cls_id], [0], [NOT_A_WORD]
    for i, ids in enumerate(sentence_ids):
        piece = list(ids[: max_seq_len - 2]) + [sep_id]
        if len(block) + len(piece) > max_seq_len:
            blocks.append(block)
            segments.append(segment)
            words.append(word)
            block, segment, word = [cls_id], [0], [NOT_A_WORD]
        kind = 0 if len(block) < max_seq_len // 2 else 1
        block.extend(piece)
        segment.extend([kind] * len(piece))
        if word_ids is not None:
            word.extend(list(word_ids[i][: max_seq_len - 2]) + [NOT_A_WORD])
    if len(block) > 1:
        blocks.append(block)
        segments.append(segment)
        words.append(word)
    return blocks, segments, words if word_ids is not None else None


@pytest.fixture(scope="module")
def wikitext_tokens(corpus, quick_tokenizer):
    """Token and word ids of 4,000 real WikiText-2 sentences (the corpus's first ones), as lists and as Ragged."""
    tokens = tokenize(quick_tokenizer, corpus.train[:4000], word_ids=True, progress=False)
    return tokens, tokens.ids.tolist(), tokens.word_ids.tolist()


@pytest.mark.parametrize("width", [128, 64, 16, 5])
def test_packing_gives_the_list_codes_blocks_segments_and_words_on_real_sentences(wikitext_tokens, width):
    tokens, ids, words = wikitext_tokens
    assert max(map(len, ids)) > 64  # some sentences are cut at the smaller widths
    expected = list_packing(ids, width, 2, 3, words)
    for given in ((tokens.ids, tokens.word_ids), (ids, words)):  # Ragged rows in, or plain lists
        packed = pack_sentences(given[0], width, 2, 3, given[1])
        assert (packed.blocks, packed.segments, packed.words) == expected
        assert packed.n_tokens == sum(map(len, expected[0]))
    plain = pack_sentences(tokens.ids, width, 2, 3)
    assert plain.words is None and (plain.blocks, plain.segments) == expected[:2]


def test_packed_rows_cost_a_few_bytes_a_token_not_the_lists_forty(wikitext_tokens, quick_tokenizer):
    tokens = wikitext_tokens[0]
    packed = pack_sentences(tokens.ids, 128, quick_tokenizer.cls_token_id, quick_tokenizer.sep_token_id,
                            tokens.word_ids)
    assert packed.blocks.offsets is packed.segments.offsets is packed.words.offsets  # one offsets array for three
    arrays = packed.blocks.nbytes + packed.segments.values.nbytes + packed.words.values.nbytes
    assert arrays / packed.n_tokens < 4.5  # 2 (ids) + 1 (segment) + 1 (word id) + 8 per block of ~128
    assert packed.blocks.values.itemsize == 2 and packed.segments.values.itemsize == packed.words.values.itemsize == 1
    per_token = (tokens.ids.nbytes + tokens.word_ids.values.nbytes) / tokens.ids.n_values
    assert per_token < 5  # tokenized: 2 (ids) + 1-2 (word ids) + 8 per sentence of ~25 tokens


def test_ragged_rows_read_like_a_list_of_lists():
    rows = [[5, 6, 7], [], [300], [1, 2]]
    ragged = Ragged.from_rows(rows)
    assert ragged == rows and rows == ragged and ragged != rows[:3] and ragged != [[5, 6, 7], [], [301], [1, 2]]
    assert len(ragged) == 4 and ragged.n_values == 6 and ragged.lengths().tolist() == [3, 0, 1, 2]
    assert ragged[0] == [5, 6, 7] and ragged[-1] == [1, 2] and isinstance(ragged[2][0], int)
    assert ragged[1:3] == [[], [300]] and ragged[::-2] == [[1, 2], []]
    assert list(ragged) == rows and ragged.tolist() == rows and Ragged.from_rows(ragged) is ragged
    with pytest.raises(IndexError):
        ragged[4]
    assert ragged.values.dtype == np.int16  # the smallest dtype holding 1..300
    assert Ragged.from_rows([]) == [] and len(Ragged.from_rows([[]])) == 1
    with pytest.raises(ValueError, match="offsets"):
        Ragged(np.zeros(3), np.array([0, 2]))
    assert (smallest_dtype(-1, 126), smallest_dtype(0, 255), smallest_dtype(0, 30521)) == (np.int8, np.uint8, np.int16)


def test_pack_refuses_word_ids_that_do_not_match_the_tokens():
    with pytest.raises(ValueError, match="2 word-id lists for 1 sentences"):
        pack_sentences([[5, 6]], 8, 2, 3, [[0, 1], [0]])
    with pytest.raises(ValueError, match="sentence 1 has 2 token ids but 1 word ids"):
        pack_sentences([[5], [6, 7]], 8, 2, 3, [[0], [0]])
    assert len(pack_sentences([], 8, 2, 3)) == 0


def test_the_token_cache_keeps_its_file_names_and_is_read_without_tokenizing(corpus, quick_tokenizer, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("BERTCOURSE_CACHE", str(tmp_path))
    sentences = corpus.train[100:400]
    first = tokenize(quick_tokenizer, sentences, word_ids=True)
    digest = hashlib.sha256(quick_tokenizer.backend_tokenizer.to_str().encode())
    for sentence in sentences:
        digest.update(sentence.encode() + b"\n")
    path = tmp_path / "pretokenized" / f"{digest.hexdigest()[:24]}.npz"
    assert path.is_file()  # the name earlier versions gave it: their caches are found
    with np.load(path) as saved:  # ... and the layout they wrote: flat int32 ids and word ids, int64 offsets
        assert (saved["ids"].dtype, saved["words"].dtype, saved["offsets"].dtype) == (np.int32, np.int32, np.int64)
        assert saved["ids"].tolist() == [t for row in first.ids for t in row]

    def no_encoding(*args, **kwargs):
        raise AssertionError("tokenized again instead of reading the cache")

    backend = SimpleNamespace(to_str=quick_tokenizer.backend_tokenizer.to_str, encode_batch=no_encoding,
                              padding=None, truncation=None)
    cached = type("Cached", (), {"backend_tokenizer": backend, "__len__": lambda self: len(quick_tokenizer)})()
    again = tokenize(cached, sentences, word_ids=True)
    assert again.ids == first.ids and again.word_ids == first.word_ids
    prefix = tokenize_prefix(quick_tokenizer, sentences, budget=2000, chunk=100)  # 100 sentences a cache file
    assert len(prefix) in (100, 200, 300) and prefix.ids == first.ids[: len(prefix)]
    assert sum(map(len, prefix.ids)) + len(prefix) >= 2000


def test_the_epoch_shuffle_drawn_once_is_the_one_drawn_every_step():
    for step in (1, 2, 5, 6, 11):
        epoch, index = divmod(step - 1, 5)
        order = torch.randperm(21, generator=torch.Generator().manual_seed(3 * 100_003 + epoch))
        assert batch_indices(step, 21, 4, seed=3) == order[index * 4 : (index + 1) * 4].tolist()


def test_unigram_counts_and_pair_rows_take_ragged_blocks(wikitext_tokens):
    ids = wikitext_tokens[1]
    packed = pack_sentences(wikitext_tokens[0].ids, 64, 2, 3)
    lists = PackedData(*list_packing(ids, 64, 2, 3)[:2])
    expected = torch.bincount(torch.tensor([t for block in lists.blocks for t in block[1:]]), minlength=2000).numpy()
    assert np.array_equal(_token_counts(packed, 2000), expected)
    assert np.array_equal(_token_counts(lists, 2000), expected)
    pairs = PairData([[2, 9, 3, 8, 3]], [[0, 0, 0, 1, 1]], pair_labels=[1])
    joined = with_unlabelled(pairs, packed)
    assert joined.blocks == [[2, 9, 3, 8, 3], *lists.blocks] and joined.pair_labels == [1] + [-100] * len(packed)


def test_tokenizing_ignores_the_padding_a_call_with_padding_true_left_switched_on(corpus, quick_tokenizer):
    sentences = corpus.train[500:520]
    before = tokenize(quick_tokenizer, sentences, word_ids=True)
    quick_tokenizer(sentences, padding="max_length", truncation=True, max_length=12)  # transformers keeps both on
    assert quick_tokenizer.backend_tokenizer.padding is not None  # ... in the core, until the next call
    try:
        after = tokenize(quick_tokenizer, sentences, word_ids=True)
        assert after.ids == before.ids and after.word_ids == before.word_ids
        assert quick_tokenizer.pad_token_id not in {t for row in after.ids for t in row}
    finally:
        quick_tokenizer("reset")  # a call without padding switches it off again, for the tests after this one
    assert quick_tokenizer.backend_tokenizer.padding is None
