"""The pretraining corpus as training rows: sentences tokenized once (cached on disk), packed into blocks,
and the rows each training step draws.

Packing keeps almost every position a real token (sentences average ~28 tokens; one sentence per row
would pad most of the compute away). Which rows a step draws is a pure function of (seed, step), so a
resumed run draws exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertcourse.folders import cache_dir

NOT_A_WORD = -1  # the word id of [CLS], [SEP] and padding: never part of a word


@dataclass
class PackedData:
    """Sentences packed into blocks `[CLS] s1 [SEP] s2 [SEP] ...` of at most max_seq_len tokens.

    The first half of a block is segment A, the rest segment B, so the segment embedding learns two real
    values, as in BERT's sentence pairs. `words` (present when packed with word ids, for whole-word
    masking) holds each position's word id within its sentence, `NOT_A_WORD` at [CLS] and [SEP].
    """

    blocks: list[list[int]]
    segments: list[list[int]]
    words: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def n_tokens(self) -> int:
        """Tokens in all blocks, specials included."""
        return sum(len(b) for b in self.blocks)


@dataclass
class Tokenized:
    """Token ids of sentences without specials, and (when asked for) each token's word id."""

    ids: list[list[int]]
    word_ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.ids)


def tokenize(tokenizer: Any, sentences: Sequence[str], *, word_ids: bool = False) -> Tokenized:
    """Token ids (and word ids) of each sentence without specials, cached on disk: tokenizing 60k
    sentences takes ~10 s on 2 cores, and a cached run should start at once."""
    flat, words, offsets = _cached_encoding(tokenizer, sentences)
    return Tokenized(_split(flat, offsets), _split(words, offsets) if word_ids else None)


def tokenize_sentences(tokenizer: Any, sentences: Sequence[str]) -> list[list[int]]:
    """Token ids of each sentence without specials (cached; see `tokenize`)."""
    return tokenize(tokenizer, sentences).ids


def tokenize_prefix(tokenizer: Any, sentences: Sequence[str], budget: int, chunk: int = 2000, *,
                    word_ids: bool = False) -> Tokenized:
    """The first sentences that hold at least `budget` tokens (all when the corpus is smaller): a
    seconds-long run needs a few thousand sentences, not the time to tokenize 60,000."""
    found = Tokenized([], [] if word_ids else None)
    total = 0
    for start in range(0, len(sentences), chunk):
        part = tokenize(tokenizer, sentences[start : start + chunk], word_ids=word_ids)
        found.ids.extend(part.ids)
        if found.word_ids is not None and part.word_ids is not None:
            found.word_ids.extend(part.word_ids)
        total += sum(len(x) + 1 for x in part.ids)
        if total >= budget:
            break
    return found


def _cached_encoding(tokenizer: Any, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token ids, word ids, offsets) of all sentences, flat: sentence i is [offsets[i], offsets[i + 1])."""
    digest = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode())
    for sentence in sentences:
        digest.update(sentence.encode())
        digest.update(b"\n")
    path = cache_dir() / "pretokenized" / f"{digest.hexdigest()[:24]}.npz"
    if path.is_file():
        try:
            with np.load(path) as saved:
                return saved["ids"], saved["words"], saved["offsets"]
        except (OSError, ValueError, KeyError):
            pass  # a damaged (or older, word-id-less) cache file: tokenize again and overwrite it
    encodings = tokenizer.backend_tokenizer.encode_batch(list(sentences), add_special_tokens=False)
    offsets = np.zeros(len(encodings) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(e.ids) for e in encodings])
    count = int(offsets[-1])
    flat = np.fromiter((t for e in encodings for t in e.ids), dtype=np.int32, count=count)
    words = np.fromiter((NOT_A_WORD if w is None else w for e in encodings for w in e.word_ids),
                        dtype=np.int32, count=count)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    np.savez(staging, ids=flat, words=words, offsets=offsets)
    os.replace(staging, path)
    return flat, words, offsets


def _split(flat: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    return [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


def pack_sentences(sentence_ids: Sequence[Sequence[int]], max_seq_len: int, cls_id: int, sep_id: int,
                   word_ids: Sequence[Sequence[int]] | None = None) -> PackedData:
    """Greedy in-order packing; a sentence longer than a block is cut to fit. With `word_ids` (one list
    per sentence, as `tokenize(..., word_ids=True)` gives) the blocks keep each token's word id."""
    if word_ids is not None and len(word_ids) != len(sentence_ids):
        raise ValueError(f"{len(word_ids)} word-id lists for {len(sentence_ids)} sentences")
    blocks: list[list[int]] = []
    segments: list[list[int]] = []
    words: list[list[int]] = []
    block: list[int] = [cls_id]
    segment: list[int] = [0]
    word: list[int] = [NOT_A_WORD]
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
    return PackedData(blocks, segments, words if word_ids is not None else None)


def batch_indices(step: int, n_blocks: int, batch_size: int, seed: int) -> list[int]:
    """The rows of training step `step` (1-based): a new shuffle each epoch, a pure function of
    (seed, step), so a resumed run draws exactly the batches an uninterrupted one would."""
    per_epoch = max(n_blocks // batch_size, 1)
    epoch, index = divmod(step - 1, per_epoch)
    order = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return order[index * batch_size : (index + 1) * batch_size].tolist()


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
