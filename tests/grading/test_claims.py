"""Several graders, one PostgreSQL gradebook (claims.py): each submission is claimed by one grader, a dead
grader's claims are taken over once its lease runs out, and the class is recorded exactly once, with the
scores one grader alone gives (those test_autograde proves for the same notebooks). Uses the real server of
conftest.py's `postgres_url`."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy
from batch_support import EXERCISE, make_course, solution, submit, with_cells

from bertcourse.grading.batch.claims import TABLE, Claims, shared
from bertcourse.grading.batch.gradebook import open_gradebook


def test_only_postgresql_is_shared():
    assert shared("postgresql+psycopg2://grader@/gradebook?host=/tmp/x")
    assert shared("postgresql://host/db")
    assert not shared("sqlite:///gradebook.db")


def _reset(url: str) -> None:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {TABLE}"))
    engine.dispose()


@pytest.mark.slow
def test_a_claim_is_one_graders_until_its_lease_runs_out(postgres_url):
    _reset(postgres_url)
    first, second = Claims(postgres_url, lease_s=1.5), Claims(postgres_url, lease_s=1.5)  # no heartbeat: not entered
    for claims in (first, second):
        with claims.exclusive():
            claims.enlist({"ann/ex": "k1", "ben/ex": "k1"})
    assert first.claim(wait=False) == "ann/ex"
    assert second.claim(wait=False) == "ben/ex"
    assert second.claim(wait=False) is None  # ann/ex is first's while its lease lasts
    time.sleep(2.0)
    assert second.claim(wait=False) == "ann/ex"  # first stopped renewing: taken over
    assert not first.holds("ann/ex") and not first.finish("ann/ex", "k1", "{}")  # too late: its result is dropped
    assert second.finish("ann/ex", "k1", '{"a": 1}') and second.finish("ben/ex", "k1", '{"b": 1}')
    assert second.remaining() == 0 and second.claim(wait=True) is None
    assert second.records() == {"ann/ex": '{"a": 1}', "ben/ex": '{"b": 1}'}
    with first.exclusive():
        first.enlist({"ann/ex": "k2", "ben/ex": "k1"})  # ann's submission changed: graded again, ben's stays done
    assert first.remaining() == 1 and first.claim(wait=False) == "ann/ex"


@pytest.mark.slow
def test_a_live_grader_keeps_its_claims_and_hands_them_back_on_exit(postgres_url):
    _reset(postgres_url)
    other = Claims(postgres_url, lease_s=1.5)
    with Claims(postgres_url, lease_s=1.5) as grader:  # entered: its heartbeat renews the lease
        with grader.exclusive():
            grader.enlist({"ann/ex": "k1"})
        with other.exclusive():
            other.enlist({"ann/ex": "k1"})
        assert grader.claim(wait=False) == "ann/ex"
        time.sleep(3.0)  # twice the lease
        assert other.claim(wait=False) is None and grader.holds("ann/ex")
    assert other.claim(wait=False) == "ann/ex"  # an interrupted grader's claim is free at once


def _rows(url: str) -> dict[str, tuple]:
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(sqlalchemy.text(f"SELECT label, state, owner, attempts FROM {TABLE}")).all()
    engine.dispose()
    return {label: (state, owner, attempts) for label, state, owner, attempts in rows}


def _grader(course, url: str, out: Path, name: str) -> subprocess.Popen:
    env = {**os.environ, "BERTCOURSE_ROOT": str(course.root), "BERTCOURSE_DB_URL": url}
    log = (out.parent / f"{name}.log").open("w")
    return subprocess.Popen([sys.executable, "-m", "bertcourse.cli", "autograde", str(course.root / "submitted"),
                             "--output-dir", str(out), "--lease", "6", "--no-progress"],
                            env=env, cwd=course.root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _grades(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    with path.open(newline="") as handle:
        return {(r["student"], r["exercise"]): (r["score"], r["status"]) for r in csv.DictReader(handle)}


@pytest.mark.slow
def test_graders_share_a_class_and_one_dying_loses_nothing(tmp_path, postgres_url):
    _reset(postgres_url)
    course = make_course(tmp_path / "course")
    submitted = course.root / "submitted"
    right = solution(course)
    wrong = with_cells(right, {"add": "def add(a, b):\n    return a - b\n"})
    class_ = [("ann", right), ("ben", wrong), ("cat", right), ("dan", wrong), ("eve", right)]
    for student, notebook in class_:
        submit(submitted, student, notebook)
    # What one grader alone gives these notebooks (test_autograde: the solution scores 3, `a - b` scores 1)
    expected = {(student, EXERCISE): ("3" if notebook is right else "1", "graded") for student, notebook in class_}

    victim = _grader(course, postgres_url, tmp_path / "out-victim", "victim")
    others = []
    try:
        deadline = time.monotonic() + 180
        while not any(o.startswith(f"{_host()}:{victim.pid}:") for _, o, _ in _rows_or_empty(postgres_url).values()):
            assert victim.poll() is None and time.monotonic() < deadline, "the first grader never claimed anything"
            time.sleep(0.2)
        others = [_grader(course, postgres_url, tmp_path / f"out-{name}", name) for name in ("b", "c")]
        while not any(o and not o.startswith(f"{_host()}:{victim.pid}:") for _, o, _ in _rows(postgres_url).values()):
            assert time.monotonic() < deadline, "the other graders never claimed anything"
            time.sleep(0.2)
        while True:  # kill the first grader (and its engine's processes, as if its machine died) holding a claim
            os.killpg(victim.pid, signal.SIGSTOP)
            stale = {label for label, (state, owner, _) in _rows(postgres_url).items()
                     if state == "claimed" and owner.startswith(f"{_host()}:{victim.pid}:")}
            if stale:
                os.killpg(victim.pid, signal.SIGKILL)
                break
            os.killpg(victim.pid, signal.SIGCONT)  # between two claims: try again
            assert victim.poll() is None, "the first grader finished before it could be killed"
            time.sleep(0.1)
        victim.wait(timeout=30)
        for grader in others:
            assert grader.wait(timeout=300) == 0, (tmp_path / "b.log").read_text() + (tmp_path / "c.log").read_text()
    finally:
        for process in [victim, *others]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)

    rows = _rows(postgres_url)
    assert {state for state, _, _ in rows.values()} == {"done"} and len(rows) == 5
    for label in stale:  # taken over after the lease and graded by a survivor
        state, owner, attempts = rows[label]
        assert attempts == 2 and not owner.startswith(f"{_host()}:{victim.pid}:")
    # every other submission was graded once: nobody graded what someone else held
    assert all(attempts == 1 for label, (_, _, attempts) in rows.items() if label not in stale)
    assert sum(1 for label in rows if label in stale) >= 1
    for name in ("b", "c"):  # each survivor wrote the whole class, feedback included, from the gradebook
        assert _grades(tmp_path / f"out-{name}" / "grades.csv") == expected
        assert all((tmp_path / f"out-{name}" / "feedback" / s / EXERCISE / "feedback.html").is_file()
                   for s, _ in expected)
        assert "taken over" not in (tmp_path / f"{name}.log").read_text()
    with open_gradebook(postgres_url) as gradebook:
        assert sorted(s.id for s in gradebook.students) == sorted(s for s, _ in expected)
        assert len(gradebook.find_assignment(EXERCISE).submissions) == 5
        for (student, exercise), (score, _) in expected.items():
            assert gradebook.find_submission(exercise, student).score == pytest.approx(float(score))


def _host() -> str:
    import socket

    return socket.gethostname()


def _rows_or_empty(url: str) -> dict[str, tuple]:
    try:
        return {label: (s, o or "", a) for label, (s, o, a) in _rows(url).items()}
    except sqlalchemy.exc.ProgrammingError:  # the first grader has not created the table yet
        return {}
