"""The token cache: a corpus tokenized once, kept as one file per corpus and tokenizer (`training/packing.py`
reads and extends it). The file holds the longest prefix of the corpus tokenized so far: flat int32 token ids
and word ids and int64 sentence offsets, named by a sha256 of the tokenizer core and of every sentence, and
written atomically (a side file, then a rename)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertcourse.folders import cache_dir


def cache_path(core: Any, sentences: Sequence[str]) -> Path:
    """The corpus's one cache file: named by a sha256 of the tokenizer core and of every sentence (the name
    `tokenize` has always given a whole corpus's file, so those are found)."""
    digest = hashlib.sha256(core.to_str().encode())
    for sentence in sentences:
        digest.update(sentence.encode())
        digest.update(b"\n")
    return cache_dir() / "pretokenized" / f"{digest.hexdigest()[:24]}.npz"


def read_cache(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(token ids, word ids, offsets) of the prefix the cache file holds; None without a readable one (a damaged
    or older, word-id-less file is tokenized again and overwritten)."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as saved:
            return saved["ids"], saved["words"], saved["offsets"]
    except (OSError, ValueError, KeyError):
        return None


def write_cache(path: Path, have: tuple[np.ndarray, ...] | None,
                 new: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """The cached prefix and the sentences tokenized after it, as one file: flat int32 ids and word ids, int64
    offsets (sentence i is [offsets[i], offsets[i + 1])), written to a side file and renamed (atomic)."""
    parts = ([have[:2] + (np.diff(have[2]),)] if have is not None else []) + new
    lengths = np.concatenate([p[2] for p in parts])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    np.savez(staging, ids=np.concatenate([p[0] for p in parts]).astype(np.int32, copy=False),
             words=np.concatenate([p[1] for p in parts]).astype(np.int32, copy=False), offsets=offsets)
    os.replace(staging, path)


__all__ = ["cache_path", "read_cache", "write_cache"]
