"""Rows of integers of different lengths (tokenized sentences, packed blocks) in one flat numpy array.

A Python list of lists costs 30-40 bytes per integer (an 8-byte pointer, and a 28-byte int object for
every id above 256), so WikiText-103's ~130M tokens would need several GB per list. `Ragged` keeps each
integer in the smallest dtype that holds the values (2 bytes for a vocabulary under 65,536, 1 for segment
and word ids) plus 8 bytes of offset per row, and still reads like the list of lists it replaces:
`rows[i]` is a list of ints, `len(rows)`, iteration, slices (a list of lists) and `==` with a list of
lists work, so code written for lists (batching, padding, tests) needs no change.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64)


def smallest_dtype(low: int, high: int) -> np.dtype:
    """The narrowest integer dtype holding every value in [low, high]."""
    for dtype in _DTYPES:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return np.dtype(dtype)
    raise ValueError(f"no integer dtype holds [{low}, {high}]")


def narrowed(values: np.ndarray) -> np.ndarray:
    """`values` in the smallest dtype that holds them (the same array when it already is)."""
    if values.size == 0:
        return values.astype(np.int8)
    return values.astype(smallest_dtype(int(values.min()), int(values.max())), copy=False)


class Ragged(Sequence):
    """Row i is `values[offsets[i]:offsets[i + 1]]`, read back as a list of ints."""

    def __init__(self, values: np.ndarray, offsets: np.ndarray):
        if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(values):
            raise ValueError(f"offsets must run from 0 to the {len(values)} values")
        self.values = values
        self.offsets = offsets

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[int]]) -> Ragged:
        """`rows` (a list of lists, or any iterable of int sequences) as a Ragged; a Ragged is returned as is."""
        if isinstance(rows, Ragged):
            return rows
        rows = list(rows)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(row) for row in rows], out=offsets[1:])
        values = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(offsets[-1]))
        return cls(narrowed(values), offsets)

    def lengths(self) -> np.ndarray:
        """The length of every row."""
        return np.diff(self.offsets)

    @property
    def n_values(self) -> int:
        """Integers in all rows together."""
        return len(self.values)

    @property
    def nbytes(self) -> int:
        """Bytes of the two arrays (what the rows cost in memory)."""
        return self.values.nbytes + self.offsets.nbytes

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"row {index} of {n}")
        index %= n
        return self.values[self.offsets[index] : self.offsets[index + 1]].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        values, bounds = self.values, self.offsets.tolist()
        return (values[a:b].tolist() for a, b in zip(bounds, bounds[1:]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ragged):
            return np.array_equal(self.offsets, other.offsets) and np.array_equal(self.values, other.values)
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == list(b) for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # mutable arrays inside, like a list

    def tolist(self) -> list[list[int]]:
        """The rows as a plain list of lists."""
        return list(self)

    def __repr__(self) -> str:
        return f"Ragged({len(self):,} rows, {self.n_values:,} values, {self.values.dtype})"


__all__ = ["Ragged", "smallest_dtype", "narrowed"]
