"""Progress bars: plain lines, at most one per tenth of the work, where they go to a file or a pipe; tqdm's
live bar on a terminal and in Jupyter (`bertcourse.progress`)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time

import pytest

from bertcourse.progress import LINES_PER_BAR, LineProgress, is_live, progress_bar

SLOW_BAR = """
import time
from bertcourse.progress import progress_bar

bar = progress_bar(total=40, desc="work")
for i in range(40):
    time.sleep(0.03)  # a tenth (4 steps) takes longer than tqdm's 0.1 s between refreshes
    bar.set_postfix(loss=f"{i:.3f}", refresh=False)
    bar.update()
    if i == 20:
        bar.write("halfway")
bar.close()
for _ in progress_bar(range(200_000), desc="fast"):
    pass
"""


def _run_piped(code: str) -> str:
    """Run `code` with stdout and stderr to one pipe, as `bertcourse ... > log 2>&1` does."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, check=True)
    return done.stdout


def test_a_bar_written_to_a_pipe_prints_a_line_per_tenth_and_no_carriage_return():
    out = _run_piped(SLOW_BAR)
    assert "\r" not in out
    work = [line for line in out.splitlines() if line.startswith("work:")]
    tenths = [int(line.split("%")[0].split()[-1]) // 10 for line in work]
    assert 3 <= len(work) <= LINES_PER_BAR + 1, out  # lines along the way, at most one a tenth
    assert tenths == sorted(set(tenths)) and tenths[0] == 0 and tenths[-1] == 10, out
    assert "40/40" in work[-1] and "loss=39.000" in work[-1]
    assert "halfway" in out.splitlines()
    fast = [line for line in out.splitlines() if line.startswith("fast:")]
    assert 1 <= len(fast) <= LINES_PER_BAR + 1 and "200000/200000" in fast[-1]


def test_learning_the_vocabulary_into_a_pipe_writes_a_few_lines():
    """The flood the issue saw (`learning WordPiece vocabulary: 0%| ...` redrawn thousands of times)."""
    out = _run_piped("""
        from collections import Counter
        from bertcourse.tokenizer import learn_vocabulary
        words = Counter({f"{a}{b}{c}": 1 + len(a + b + c) for a in "abcdefgh" for b in "ijklmnop" for c in "qrstuvw"})
        print(len(learn_vocabulary(words, 300)))
    """)
    assert "\r" not in out
    lines = [line for line in out.splitlines() if line.startswith("learning WordPiece vocabulary")]
    assert 1 <= len(lines) <= LINES_PER_BAR + 1, out
    assert out.splitlines()[-1] == "300"


@pytest.mark.skipif(sys.platform != "linux", reason="a pseudo-terminal as Linux makes it")
def test_on_a_terminal_the_bar_is_tqdms_own():
    import fcntl
    import struct
    import termios

    parent, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 columns wide
    process = subprocess.Popen([sys.executable, "-c", SLOW_BAR], stdout=subprocess.DEVNULL, stderr=child)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(parent, 4096)
        except OSError:  # Linux: EIO once the child has closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(parent)
    assert process.wait(timeout=120) == 0
    out = b"".join(chunks).decode()
    redraws = out.replace("\r\n", "\n").count("\r")  # the terminal ends each line with \r\n: not a redraw
    assert redraws > LINES_PER_BAR, repr(out)  # redrawn in place, as tqdm does


def test_jupyter_and_terminals_are_live_files_and_pipes_are_not():
    class KernelStream(io.StringIO):  # stands in for ipykernel.iostream.OutStream (not a terminal)
        pass

    KernelStream.__module__ = "ipykernel.iostream"
    assert is_live(KernelStream())
    assert not is_live(io.StringIO()) and not is_live(None)
    closed = io.StringIO()
    closed.close()
    assert not is_live(closed)
    assert isinstance(progress_bar(total=1, file=io.StringIO()), LineProgress)
    assert not isinstance(progress_bar(total=1, file=KernelStream()), LineProgress)


def test_a_bar_without_a_total_writes_one_line_when_it_closes():
    log = io.StringIO()
    with progress_bar(desc="grading", unit="nb", file=log) as bar:
        for _ in range(3):
            bar.update()
        assert log.getvalue() == ""
    assert log.getvalue().count("\n") == 1 and log.getvalue().startswith("grading: 3nb")


def test_a_bar_that_ends_within_its_delay_writes_nothing_and_a_disabled_bar_never_writes():
    log = io.StringIO()
    with progress_bar(total=10, desc="tokenizing", delay=2, file=log) as bar:
        bar.update(10)
    with progress_bar(total=10, desc="off", disable=True, file=log) as bar:
        bar.update(10)
    assert log.getvalue() == ""


def test_a_resumed_bar_starts_at_its_tenth_and_the_last_line_is_not_repeated():
    log = io.StringIO()
    bar = progress_bar(total=100, initial=50, desc="pretrain bert", file=log, mininterval=0)
    time.sleep(0.01)
    bar.update(50)
    bar.close()
    lines = log.getvalue().splitlines()
    assert [line.split("%")[0].split()[-1] for line in lines] == ["50", "100"]
