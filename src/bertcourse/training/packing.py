"""The pretraining corpus as training rows: sentences tokenized once (cached on disk), packed into blocks,
and the rows each training step draws.

Packing keeps almost every position a real token (sentences average ~28 tokens; one sentence per row
would pad most of the compute away). Which rows a step draws is a pure function of (seed, step), so a
resumed run draws exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bertcourse.folders import cache_dir
from bertcourse.progress import progress_bar
from bertcourse.training.ragged import Ragged, narrowed, smallest_dtype

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

    Chunks of `chunk` sentences are cached one by one; each is narrowed to the smallest dtype as it comes,
    so a corpus of WikiText-103's size never exists as Python lists (a bar shows after 2 seconds)."""
    core = _plain_backend(tokenizer)
    base = hashlib.sha256(core.to_str().encode())
    id_type = smallest_dtype(0, max(len(tokenizer) - 1, 0))
    ids, words, lengths, total = [], [], [], 0
    bar = progress_bar(total=len(sentences), desc="tokenizing", unit=" sentences", delay=2, disable=not progress)
    for start in range(0, len(sentences), chunk):
        part = sentences[start : start + chunk]
        flat, part_words, offsets = _cached_encoding(core, part, base.copy(), bar)
        ids.append(flat.astype(id_type))
        if word_ids:
            words.append(part_words.astype(smallest_dtype(NOT_A_WORD, int(part_words.max(initial=0)))))
        lengths.append(np.diff(offsets))
        total += len(flat) + len(part)  # with one [SEP] a sentence
        if budget is not None and total >= budget:
            break
    bar.close()
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


def _cached_encoding(core: Any, sentences: Sequence[str], digest: Any,
                     bar: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token ids, word ids, offsets) of all sentences, flat: sentence i is [offsets[i], offsets[i + 1]).
    `digest` is a sha256 of the tokenizer core, to which the sentences are added for the cache file's name.
    The tokenizer sees 10,000 sentences at a time, so its Encoding objects (tokens, offsets, masks: many
    times the ids) never hold a whole corpus."""
    for sentence in sentences:
        digest.update(sentence.encode())
        digest.update(b"\n")
    path = cache_dir() / "pretokenized" / f"{digest.hexdigest()[:24]}.npz"
    if path.is_file():
        try:
            with np.load(path) as saved:
                found = saved["ids"], saved["words"], saved["offsets"]
            bar.update(len(sentences))
            return found
        except (OSError, ValueError, KeyError):
            pass  # a damaged (or older, word-id-less) cache file: tokenize again and overwrite it
    ids, words, lengths = [], [], []
    for start in range(0, len(sentences), ENCODE_BATCH):
        encodings = core.encode_batch(list(sentences[start : start + ENCODE_BATCH]), add_special_tokens=False)
        lengths.append(np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings)))
        count = int(lengths[-1].sum())
        ids.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32, count=count))
        words.append(np.fromiter((NOT_A_WORD if w is None else w for e in encodings for w in e.word_ids),
                                 dtype=np.int32, count=count))
        bar.update(len(encodings))
    offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lengths) if lengths else [], out=offsets[1:])
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int32)
    words = np.concatenate(words) if words else np.zeros(0, np.int32)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    np.savez(staging, ids=flat, words=words, offsets=offsets)
    os.replace(staging, path)
    return flat, words, offsets


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
