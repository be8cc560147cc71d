"""Nothing left behind: grading leaves no temporary folder and no process, on every way out.

Each test points the temporary directory (TMPDIR, `tempfile.tempdir`) at a fresh folder and checks
that it is empty afterwards: a Grader closed normally or by an exception, a Grader whose process was
killed with SIGKILL (its folder is removed by the next Grader), and `bertcourse autograde` stopped
half-way through a batch. Ctrl-C (SIGINT) stops a real batch; SIGTERM is turned into the same
KeyboardInterrupt by `autograde_command` (proven in-process below), from where both unwind alike.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from batch_support import make_course, solution, submit, with_cells

from bertcourse.course import load_course
from bertcourse.grading import Grader

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "grading"
SOURCE = FIXTURE / "solutions" / "toy" / "toy.ipynb"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A private temporary directory for this process and the processes it starts."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def wait_for(condition, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_closed_grader_leaves_nothing(scratch):
    course = load_course(FIXTURE)
    with Grader(course) as grader:
        assert grader.grade(SOURCE, "toy").score == 5.0
        helpers = [grader._zygote.process.pid, grader._judge.process.pid]
    assert leftovers(scratch) == []  # no bertcourse-grader-*, no bertcourse-judge-*
    assert not any(alive(pid) for pid in helpers)
    with pytest.raises(RuntimeError), Grader(course) as grader:
        grader.start()
        raise RuntimeError("the caller failed")
    assert leftovers(scratch) == []


@pytest.mark.slow
def test_the_folder_of_a_killed_grader_is_removed_by_the_next_one(scratch, tmp_path):
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from bertcourse.course import load_course
        from bertcourse.grading import Grader
        grader = Grader(load_course({str(FIXTURE)!r}))
        grader.grade({str(SOURCE)!r}, "toy")
        print(grader._scratch, grader._zygote.process.pid, grader._judge.process.pid, flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    folder, *helpers = proc.stdout.readline().split()
    assert Path(folder).is_dir()
    proc.kill()  # SIGKILL: no clean-up runs in that process
    proc.wait()
    assert wait_for(lambda: not any(alive(int(pid)) for pid in helpers), 30), "the helpers outlived their grader"
    assert Path(folder).is_dir()
    with Grader(load_course(FIXTURE)) as grader:
        assert not Path(folder).exists()  # removed as stale: its process is gone
        assert Path(grader._scratch).is_dir()
    assert leftovers(scratch) == []


@pytest.mark.slow
def test_a_stopped_batch_leaves_nothing(scratch, tmp_path):
    """Stopped by SIGINT; SIGTERM reaches the same KeyboardInterrupt (next test), so one batch is stopped."""
    course = make_course(tmp_path / "course")
    submitted = course.root / "submitted"
    slow = with_cells(solution(course), {"q1": 'import time\ntime.sleep(60)\nanswer_q1 = "b"\n'})
    for student in ("s1", "s2", "s3"):
        submit(submitted, student, slow)
    env = {**os.environ, "BERTCOURSE_ROOT": str(course.root), "TMPDIR": str(scratch)}
    # As a terminal's Ctrl-C finds it: SIGINT handled, even where this test runs as a background job (whose
    # children inherit SIGINT ignored)
    proc = subprocess.Popen([sys.executable, "-m", "bertcourse.cli", "autograde", "submitted", "--jobs", "2",
                             "--no-progress"], env=env, cwd=course.root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # Both lanes are grading (a worker folder exists in each lane's grader folder).
        assert wait_for(lambda: len(list(scratch.glob("bertcourse-grader-*/worker-*"))) >= 2), leftovers(scratch)
        pids = {int(p) for p in os.listdir("/proc") if p.isdigit() and _started_by(int(p), scratch)}
        proc.send_signal(signal.SIGINT)  # the batch's own process only, as Ctrl-C on it would
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert "interrupted" in err
    assert wait_for(lambda: not any(alive(pid) for pid in pids), 30), "grading processes outlived the batch"
    assert leftovers(scratch) == []


def test_sigterm_stops_a_batch_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    """`kill` (SIGTERM) on `bertcourse autograde` raises KeyboardInterrupt wherever the batch is, as Ctrl-C does:
    the same unwinding (lanes ended, folders removed) and exit 130. The handler is put back afterwards."""
    from bertcourse import cli
    from bertcourse.grading.batch import autograde as batch

    monkeypatch.setattr(batch, "load_course", lambda: load_course(FIXTURE))
    reached = []

    def stopped_batch(course, options):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this (the main) thread before the next line runs
        reached.append("after the signal")
        raise AssertionError("SIGTERM did not stop the batch")

    def callers_handler(signum, frame):
        raise RuntimeError("SIGTERM reached the caller's handler, not the batch's")

    monkeypatch.setattr(batch, "autograde", stopped_batch)
    before = signal.signal(signal.SIGTERM, callers_handler)  # without the batch's handler: this one, not a kill
    try:
        assert cli.main(["autograde", str(tmp_path), "--no-progress"]) == 130
        assert signal.getsignal(signal.SIGTERM) is callers_handler  # put back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert "bertcourse: interrupted" in capsys.readouterr().err and not reached


def _started_by(pid: int, scratch: Path) -> bool:
    """Whether a process belongs to the batch under test (it has the test's TMPDIR in its environment)."""
    try:
        return f"TMPDIR={scratch}".encode() in Path(f"/proc/{pid}/environ").read_bytes() or \
            str(scratch).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_helpers_get_an_allow_listed_environment_with_one_openmp_thread(tmp_path, monkeypatch):
    """The judge and the zygote take turns with the worker: a second OpenMP thread would only spin on a core that
    another grading lane needs. Nothing outside the allow-list (a secret in the grader's environment) goes along."""
    from bertcourse.grading.processes import helper_env

    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.setenv("GRADER_SECRET_TOKEN", "do-not-pass")
    env = helper_env(tmp_path, tmp_path / "scratch", str(tmp_path / "cache"))
    assert env["OMP_NUM_THREADS"] == "1" and "GRADER_SECRET_TOKEN" not in env
    assert env["TMPDIR"] == str(tmp_path / "scratch") and env["BERTCOURSE_ROOT"] == str(tmp_path)
