"""Every progress bar of the course, made here: a live bar on a terminal or in Jupyter, plain lines in a log.

Why: tqdm redraws its bar in place with a carriage return several times a second. On a terminal or in a
notebook that reads as one line; written to a file or a pipe (`make demo > log 2>&1`, CI, `nohup`), every
redraw stays, thousands of them a run. So where the bar's stream is not a terminal or a Jupyter kernel's
output, `progress_bar` gives a `LineProgress`: the same tqdm (counting, rate, `write`, `set_postfix`), which
prints a whole line, never a carriage return, when the work passes each tenth of its total (a bar without a
total prints one line when it closes).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from typing import IO, Any

from tqdm.std import tqdm

LINES_PER_BAR = 10  # a log line each tenth of the work (plus the first), so at most 11 a bar
# "lines": plain lines even in Jupyter (set by `bertcourse execute-lessons`: a committed lesson keeps no widget,
# which a reader on GitHub would see frozen)
PROGRESS_ENV = "BERTCOURSE_PROGRESS"


def is_live(stream: IO[str] | None) -> bool:
    """True where a bar redrawn in place reads as one line: a terminal, or a Jupyter kernel's output stream
    (Jupyter and Colab render carriage returns and tqdm's widgets)."""
    if stream is None:
        return False
    if type(stream).__module__.split(".")[0] == "ipykernel":
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LineProgress(tqdm):
    """tqdm for a log: one whole line per tenth of the total, and at the end; no carriage return, no
    clearing (a log keeps what was written)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._tenths_shown = -1  # before tqdm's __init__, which displays the bar once
        self._n_shown: float | None = None
        super().__init__(*args, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        """Write a line when the work has reached a tenth not written yet; tqdm's other displays (a
        message, the clearing at close) write nothing."""
        if msg is not None or not self.total:
            return False
        tenths = int(LINES_PER_BAR * min(self.n / self.total, 1.0))
        if tenths <= self._tenths_shown:
            return False
        self._tenths_shown = tenths
        self._write_line()
        return True

    def clear(self, nolock: bool = False) -> None:
        """Nothing to clear: a written line stays (tqdm clears a bar before `write` prints a message)."""

    def close(self) -> None:
        """Write the final count once (unless the last line says it already, or the bar never showed,
        as one that closes within its `delay`), then close as tqdm does, without clearing anything."""
        if not self.disable and self._n_shown != self.n and time.time() >= self.start_t + self.delay:
            self._write_line()
        self.leave = False  # tqdm's close then "clears" the bar through display(msg=""), which writes nothing
        super().close()

    def _write_line(self) -> None:
        self.fp.write(self.__str__() + "\n")
        self.fp.flush()
        self._n_shown = self.n


def progress_bar(iterable: Iterable[Any] | None = None, **kwargs: Any) -> tqdm:
    """A progress bar with tqdm's arguments (`total`, `desc`, `disable`, `file`, ...): `tqdm.auto`'s on a
    terminal or in Jupyter, as before; a `LineProgress` elsewhere (a file or a pipe), or wherever
    $BERTCOURSE_PROGRESS is "lines"."""
    stream = kwargs.get("file") or sys.stderr
    if is_live(stream) and os.environ.get(PROGRESS_ENV) != "lines":
        from tqdm.auto import tqdm as live_bar  # a notebook widget in Jupyter, tqdm's bar on a terminal

        return live_bar(iterable, **kwargs)
    return LineProgress(iterable, **{**kwargs, "file": stream})
