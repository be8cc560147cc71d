"""The pretraining corpus as training rows: sentences tokenized once (cached on disk), packed into blocks,
and the rows each training step draws.

Packing keeps almost every position a real token (sentences average ~28 tokens; one sentence per row
would pad most of the compute away). Which rows a step draws is a pure function of (seed, step), so a
resumed run draws exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bertcourse.progress import progress_bar
from bertcourse.training.ragged import Ragged, narrowed, smallest_dtype
from bertcourse.training.token_cache import cache_path, read_cache, write_cache

NOT_A_WORD = -1  # the word id of [CLS], [SEP] and padding: never part of a word
ENCODE_BATCH = 10_000  # sentences handed to the tokenizer at once


@dataclass
class PackedData:
    """Sentences packed into blocks `[CLS] s1 [SEP] s2 [SEP] ...` of at most max_seq_len tokens.

    The first half of a block is segment A, the rest segment B, so the segment embedding learns two real
    values, as in BERT's sentence pairs. `words` (present when packed with word ids, for whole-word
    masking) holds each position's word id within its sentence, `NOT_A_WORD` at [CLS] and [SEP].
    `pack_sentences` returns them as `Ragged` rows (a few bytes a token: WikiText-103 fits a Colab);
    plain lists of lists work the same everywhere.
    """

    blocks: Sequence[Sequence[int]]
    segments: Sequence[Sequence[int]]
    words: Sequence[Sequence[int]] | None = None

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def n_tokens(self) -> int:
        """Tokens in all blocks, specials included."""
        return self.blocks.n_values if isinstance(self.blocks, Ragged) else sum(len(b) for b in self.blocks)


@dataclass
class Tokenized:
    """Token ids of sentences without specials, and (when asked for) each token's word id, as `Ragged` rows."""

    ids: Sequence[Sequence[int]]
    word_ids: Sequence[Sequence[int]] | None = None

    def __len__(self) -> int:
        return len(self.ids)


def tokenize(tokenizer: Any, sentences: Sequence[str], *, word_ids: bool = False, progress: bool = True) -> Tokenized:
    """Token ids (and word ids) of each sentence without specials, cached on disk: tokenizing 60k
    sentences takes ~10 s on 2 cores, and a cached run should start at once."""
    return tokenize_prefix(tokenizer, sentences, None, chunk=max(len(sentences), 1), word_ids=word_ids,
                           progress=progress)


def tokenize_sentences(tokenizer: Any, sentences: Sequence[str]) -> list[list[int]]:
    """Token ids of each sentence without specials, as plain lists (cached; see `tokenize`)."""
    return tokenize(tokenizer, sentences).ids.tolist()


def tokenize_prefix(tokenizer: Any, sentences: Sequence[str], budget: int | None, chunk: int = 2000, *,
                    word_ids: bool = False, progress: bool = True) -> Tokenized:
    """The first sentences that hold at least `budget` tokens (all when the corpus is smaller, or with
    `budget=None`): a seconds-long run needs a few thousand sentences, not the time to tokenize 60,000.

    The prefix grows by `chunk` sentences at a time; each chunk is narrowed to the smallest dtype as it comes,
    so a corpus of WikiText-103's size never exists as Python lists (a bar shows after 2 seconds). The token
    ids are cached in ONE file per corpus and tokenizer (`_cache_path`), holding the longest prefix tokenized
    so far: a later call reads what it holds and tokenizes only the rest (a few files copy quickly to and from
    a Drive folder, where thousands of small ones would not)."""
    core = _plain_backend(tokenizer)
    id_type = smallest_dtype(0, max(len(tokenizer) - 1, 0))
    path = cache_path(core, sentences)
    have = read_cache(path)  # (ids, words, offsets) of the first len(offsets) - 1 sentences, or None
    n_cached = len(have[2]) - 1 if have is not None else 0
    new: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # encodings of the sentences after the cached ones
    ids, words, lengths, total = [], [], [], 0
    bar = progress_bar(total=len(sentences), desc="tokenizing", unit=" sentences", delay=2, disable=not progress)
    for start in range(0, len(sentences), chunk):
        end = min(start + chunk, len(sentences))
        pieces = []
        if have is not None and start < n_cached:  # the cached part of this chunk
            stop = min(end, n_cached)
            cached_ids, cached_words, offsets = have
            lo, hi = offsets[start], offsets[stop]
            pieces.append((cached_ids[lo:hi], cached_words[lo:hi], np.diff(offsets[start : stop + 1])))
            bar.update(stop - start)
        if end > n_cached:  # the rest: tokenized now
            encoded = _encode(core, sentences[max(start, n_cached) : end], bar)
            new.append(encoded)
            pieces.append(encoded)
        flat = np.concatenate([p[0] for p in pieces])
        part_words = np.concatenate([p[1] for p in pieces])
        ids.append(flat.astype(id_type))
        if word_ids:
            words.append(part_words.astype(smallest_dtype(NOT_A_WORD, int(part_words.max(initial=0)))))
        lengths.append(np.concatenate([p[2] for p in pieces]))
        total += len(flat) + (end - start)  # with one [SEP] a sentence
        if budget is not None and total >= budget:
            break
    bar.close()
    if new:
        write_cache(path, have, new)
    offsets = np.zeros(sum(map(len, lengths)) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lengths) if lengths else [], out=offsets[1:])
    rows = Ragged(np.concatenate(ids) if ids else np.zeros(0, id_type), offsets)
    return Tokenized(rows, Ragged(np.concatenate(words) if words else np.zeros(0, np.int8), offsets)
                     if word_ids else None)


def _plain_backend(tokenizer: Any) -> Any:
    """The tokenizer's `tokenizers` core without padding or truncation. A call such as
    `tokenizer(texts, padding=True)` leaves them switched on in the core until the next call (transformers'
    way), and the sentences would then come back padded with [PAD] ids: a copy without them instead."""
    core = tokenizer.backend_tokenizer
    if core.padding is None and core.truncation is None:
        return core
    core = Tokenizer.from_str(core.to_str())
    core.no_padding()
    core.no_truncation()
    return core


def _encode(core: Any, sentences: Sequence[str], bar: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token ids, word ids, lengths) of `sentences`, flat int32 ids and word ids. The tokenizer sees 10,000
    sentences at a time, so its Encoding objects (tokens, offsets, masks: many times the ids) never hold a
    whole corpus."""
    ids, words, lengths = [], [], []
    for start in range(0, len(sentences), ENCODE_BATCH):
        encodings = core.encode_batch(list(sentences[start : start + ENCODE_BATCH]), add_special_tokens=False)
        lengths.append(np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings)))
        count = int(lengths[-1].sum())
        ids.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32, count=count))
        words.append(np.fromiter((NOT_A_WORD if w is None else w for e in encodings for w in e.word_ids),
                                 dtype=np.int32, count=count))
        bar.update(len(encodings))
    return (np.concatenate(ids) if ids else np.zeros(0, np.int32), np.concatenate(words) if words else
            np.zeros(0, np.int32), np.concatenate(lengths) if lengths else np.zeros(0, np.int64))


def pack_sentences(sentence_ids: Sequence[Sequence[int]], max_seq_len: int, cls_id: int, sep_id: int,
                   word_ids: Sequence[Sequence[int]] | None = None) -> PackedData:
    """Greedy in-order packing; a sentence longer than a block is cut to fit. With `word_ids` (one list
    per sentence, as `tokenize(..., word_ids=True)` gives) the blocks keep each token's word id.

    Lists or `Ragged` rows in, `Ragged` rows out (blocks, segments and words share one offsets array)."""
    if word_ids is not None and len(word_ids) != len(sentence_ids):
        raise ValueError(f"{len(word_ids)} word-id lists for {len(sentence_ids)} sentences")
    sentences = Ragged.from_rows(sentence_ids)
    words = Ragged.from_rows(word_ids) if word_ids is not None else None
    if words is not None and not np.array_equal(words.lengths(), sentences.lengths()):
        first = int(np.flatnonzero(words.lengths() != sentences.lengths())[0])
        raise ValueError(f"sentence {first} has {len(sentences[first])} token ids but {len(words[first])} word ids")
    kept = np.minimum(sentences.lengths(), max_seq_len - 2)  # the tokens of each sentence that go in
    block_of, at, kind = _place((kept + 1).tolist(), max_seq_len)  # + its [SEP]
    n_blocks = int(block_of[-1]) + 1 if len(block_of) else 0
    offsets = np.zeros(n_blocks + 1, dtype=np.int64)
    np.cumsum(np.bincount(block_of, weights=kept + 1, minlength=n_blocks).astype(np.int64) + 1, out=offsets[1:])
    id_type = np.result_type(sentences.values.dtype, smallest_dtype(min(cls_id, sep_id), max(cls_id, sep_id)))
    tokens = np.full(offsets[-1], sep_id, dtype=id_type)  # every position not written below is a [SEP]
    tokens[offsets[:-1]] = cls_id
    segments = np.zeros(offsets[-1], dtype=np.int8)
    word = (np.full(offsets[-1], NOT_A_WORD, dtype=np.result_type(words.values.dtype, np.int8))
            if words is not None else None)
    starts = offsets[block_of] + at  # where each sentence's first token goes
    for lo in range(0, len(kept), 1 << 14):  # in chunks: the index arrays stay ~10 MB
        part = slice(lo, lo + (1 << 14))
        n, source, target = kept[part], sentences.offsets[:-1][part], starts[part]
        within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        tokens[np.repeat(target, n) + within] = sentences.values[np.repeat(source, n) + within]
        if word is not None:
            word[np.repeat(target, n) + within] = words.values[np.repeat(source, n) + within]
        with_sep = np.arange(int(n.sum() + len(n))) - np.repeat(np.cumsum(n + 1) - n - 1, n + 1)
        segments[np.repeat(target, n + 1) + with_sep] = np.repeat(kind[part], n + 1)
    return PackedData(Ragged(tokens, offsets), Ragged(segments, offsets),
                      Ragged(narrowed(word), offsets) if word is not None else None)


def _place(pieces: list[int], max_seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy in-order placement of pieces (a sentence and its [SEP]) into blocks that start with [CLS]:
    each piece's block, its position in the block, and its segment (0 if it starts in the first half)."""
    block_of, at, kind = [], [], []
    block, fill = 0, 1
    for size in pieces:
        if fill + size > max_seq_len:
            block, fill = block + 1, 1
        block_of.append(block)
        at.append(fill)
        kind.append(0 if fill < max_seq_len // 2 else 1)
        fill += size
    return np.array(block_of, dtype=np.int64), np.array(at, dtype=np.int64), np.array(kind, dtype=np.int8)


def batch_indices(step: int, n_blocks: int, batch_size: int, seed: int) -> list[int]:
    """The rows of training step `step` (1-based): a new shuffle each epoch, a pure function of
    (seed, step), so a resumed run draws exactly the batches an uninterrupted one would."""
    per_epoch = max(n_blocks // batch_size, 1)
    epoch, index = divmod(step - 1, per_epoch)
    return _epoch_order(n_blocks, seed, epoch)[index * batch_size : (index + 1) * batch_size].tolist()


@functools.lru_cache(maxsize=2)
def _epoch_order(n_blocks: int, seed: int, epoch: int) -> torch.Tensor:
    """One epoch's shuffle, drawn once per epoch rather than once per step (a million blocks took 55 ms
    to shuffle on a loaded 2-core machine, more than an estimated T4 step); read only, never modified."""
    return torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))


__all__ = [
    "NOT_A_WORD",
    "PackedData",
    "Tokenized",
    "tokenize",
    "tokenize_sentences",
    "tokenize_prefix",
    "pack_sentences",
    "batch_indices",
]
