"""`bertcourse autograde`: grade a whole class's submissions, losing nothing.

Input is nbgrader's layout, `submitted/<student>/<exercise>/<notebook>.ipynb` (layout.py). Each
submission is graded by the engine (student code in a worker process, hidden checks in a judge
process), in `--jobs` parallel lanes (lanes.py). The lanes only return records (records.py) and write
feedback pages (feedback.py); this process alone writes the gradebook (gradebook.py), so parallel
grading cannot lose a grade to a locked SQLite file.

What makes a batch safe to kill and re-run: every finished submission leaves a result file written
atomically under `autograded/<student>/<exercise>/`, keyed by a hash of the submission, the exercise's
checks and its course.yml entry. A re-run grades only what has no matching result (or everything with
`--force`) and rebuilds the gradebook rows, the CSV and any missing feedback page from the results.
Submissions are only ever read.

With a PostgreSQL gradebook, any number of such processes (on any machines that see the submissions)
share the class: each claims one submission at a time in the database (claims.py), and every one of
them, once the whole class is done, writes the CSV and any missing feedback page from the records
kept there. SQLite keeps one grader.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcourse.course import Course, load_course
from bertcourse.folders import write_atomic
from bertcourse.grading.batch.claims import DEFAULT_LEASE_S, Claims, shared
from bertcourse.grading.batch.class_report import REPORT_NAME, write_class_report
from bertcourse.grading.batch.feedback import FEEDBACK_MODE, feedback_exists, write_feedback
from bertcourse.grading.batch.gradebook import (
    class_db_url,
    open_gradebook,
    record_grades,
    redact,
    register_exercises,
    url_password,
)
from bertcourse.grading.batch.lanes import GradingLanes, close_lane
from bertcourse.grading.batch.layout import (
    BatchError,
    exercise_fingerprint,
    find_submissions,
    misplaced,
    submission_key,
)
from bertcourse.grading.batch.records import QUIET_NOTES, RESULT_NAME, Record, load_record, write_csv
from bertcourse.grading.exercises import exercise_cells

__all__ = ["RESULT_NAME", "BatchError", "BatchOptions", "BatchSummary", "autograde", "autograde_command",
           "resolve_db_url"]


@dataclass
class BatchOptions:
    """What `bertcourse autograde` was asked to do."""

    submissions: Path
    output_dir: Path | None = None  # default: the folder holding the submissions folder
    exercise_ids: Sequence[str] | None = None
    jobs: int = 1
    db_url: str | None = None
    force: bool = False
    progress: bool = True
    lease_s: float = DEFAULT_LEASE_S  # PostgreSQL: how long a dead grader's claim blocks its submission
    private_feedback: bool = False  # feedback pages readable by their owner only (0600), not by all (0644)


@dataclass
class BatchSummary:
    """What a batch did: every submission's record, how many were graded now and reused, and where the
    grades went."""

    records: list[Record]
    graded_now: int
    reused: int
    csv_path: Path
    feedback_dir: Path
    db_url: str

    def counts(self) -> dict[str, int]:
        """{status: number of submissions} (graded, void, missing)."""
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.status] = counts.get(record.status, 0) + 1
        return counts


def autograde(course: Course, options: BatchOptions, log: Callable[[str], None] = print) -> BatchSummary:
    """Grade every submission (reusing finished results), then write gradebook, CSV and feedback."""
    if options.jobs < 1:
        raise BatchError(f"--jobs must be at least 1, got {options.jobs}")
    if options.lease_s <= 0:
        raise BatchError(f"--lease must be a positive number of seconds, got {options.lease_s:g}")
    submissions = options.submissions.resolve()
    jobs = find_submissions(course, submissions, options.exercise_ids)
    out = (options.output_dir or submissions.parent).resolve()
    if out == submissions or submissions in out.parents:
        raise BatchError(f"the output folder {out} is inside the submissions folder; submissions are never written to")
    results_root, feedback_root = out / "autograded", out / "feedback"
    mode = 0o600 if options.private_feedback else FEEDBACK_MODE
    db_url = options.db_url or class_db_url(course, out)
    known = {e.id for e in course.exercises}
    for problem in misplaced(submissions, known):
        log(f"warning: not graded: {problem}")

    exercises = [course.exercise(i) for i in dict.fromkeys(j.exercise_id for j in jobs) if i in known]
    cells = {e.id: exercise_cells(course, e) for e in exercises}
    fingerprints = {e.id: exercise_fingerprint(course, e) for e in exercises}
    todo, records = [], {}
    for job in jobs:
        job.key = submission_key(job, fingerprints.get(job.exercise_id, ""))
        previous = load_record(results_root / job.student / job.exercise_id / RESULT_NAME)
        if previous and previous.key == job.key and not options.force:
            records[job.label] = previous
        else:
            todo.append(job)
    if shared(db_url):
        return _autograde_shared(course, options, jobs, exercises, cells, submissions, out, db_url, log)
    reused = len(records)
    log(f"{len(jobs)} submissions in {options.submissions}: {reused} already graded, {len(todo)} to grade "
        f"with {options.jobs} lane{'s' if options.jobs > 1 else ''}")

    tasks = [(course, job, cells.get(job.exercise_id, {}), submissions, feedback_root, mode) for job in todo]
    lanes = GradingLanes(course, tasks, options.jobs, options.progress)  # grading starts now, in parallel lanes
    try:
        register_exercises(course, exercises, db_url)
        with open_gradebook(db_url) as gradebook:

            def finish(record: Record, write_result: bool) -> None:
                # The result file first: once it exists the submission counts as done on a re-run,
                # which records it in the gradebook again (idempotent) instead of grading it again.
                if write_result and record.key:
                    write_atomic(results_root / record.student / record.exercise / RESULT_NAME, record.to_json())
                records[f"{record.student}/{record.exercise}"] = record
                if record.exercise in cells:
                    record_grades(gradebook, record.exercise, record.notebook, record.student, record.parts,
                                  flagged=bool(record.reasons), timestamp=record.submitted_at or None)

            for record in list(records.values()):
                finish(record, write_result=False)
                if not feedback_exists(feedback_root / record.student / record.exercise):
                    job = next(j for j in jobs if j.label == f"{record.student}/{record.exercise}")
                    write_feedback(feedback_root / record.student / record.exercise, record, job.notebook, mode)
            for record in lanes:
                finish(record, write_result=True)
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or failed: stop grading, leave nothing behind
        lanes.terminate()
        close_lane()
        raise
    finally:
        lanes.close()

    ordered = [records[j.label] for j in jobs]
    csv_path = _write_class_files(out, ordered, log)
    return BatchSummary(ordered, len(todo), reused, csv_path, feedback_root, db_url)


def _autograde_shared(course: Course, options: BatchOptions, jobs: list, exercises: list, cells: dict,
                      submissions: Path, out: Path, db_url: str, log: Callable[[str], None]) -> BatchSummary:
    """Grade the class together with every other grader on this PostgreSQL gradebook (claims.py).

    Each submission is claimed before it is graded and recorded only while the claim is still this
    grader's, so the class is recorded exactly once however many graders join or die. Result files are
    written as usual but not read: the claims table says what is done. This grader returns once the
    whole class is done (waiting for the others, and taking over the claims of any that died); its
    summary counts as reused what another grader (or an earlier run) recorded."""
    results_root, feedback_root = out / "autograded", out / "feedback"
    mode = 0o600 if options.private_feedback else FEEDBACK_MODE
    by_label = {job.label: job for job in jobs}
    lanes = GradingLanes(course, [], options.jobs, options.progress,  # forks now, before any connection
                         exercise_ids=sorted({j.exercise_id for j in jobs if j.exercise_id in cells}))
    graded_now = 0
    try:
        with Claims(db_url, options.lease_s) as claims:
            with claims.exclusive():  # graders starting together would collide creating the same rows
                claims.enlist({job.label: job.key for job in jobs}, force=options.force)
                register_exercises(course, exercises, db_url)
                with open_gradebook(db_url) as gradebook:
                    for student in sorted({job.student for job in jobs if job.exercise_id in cells}):
                        gradebook.update_or_create_student(student)
            log(f"{len(jobs)} submissions in {options.submissions}: {claims.remaining()} not graded yet, shared "
                f"with any other grader of this gradebook (this one: {claims.owner}, {options.jobs} "
                f"lane{'s' if options.jobs > 1 else ''}, lease {options.lease_s:g} s)")

            def feed(wait: bool) -> tuple | None:
                label = claims.claim(wait)
                if label is None:
                    return None
                job = by_label[label]
                return (course, job, cells.get(job.exercise_id, {}), submissions, feedback_root, mode)

            with open_gradebook(db_url) as gradebook:
                for record in lanes.fed(feed):
                    label = f"{record.student}/{record.exercise}"
                    if record.key:
                        write_atomic(results_root / record.student / record.exercise / RESULT_NAME, record.to_json())
                    if not claims.holds(label):
                        log(f"{label}: taken over by another grader (this one went past its lease); theirs counts")
                        continue
                    if record.exercise in cells:
                        record_grades(gradebook, record.exercise, record.notebook, record.student, record.parts,
                                      flagged=bool(record.reasons), timestamp=record.submitted_at or None)
                    graded_now += claims.finish(label, record.key, record.to_json())
            stored = claims.records()
    except BaseException:  # as in autograde: stop grading, leave nothing behind (the claims were handed back)
        lanes.terminate()
        close_lane()
        raise
    finally:
        lanes.close()

    ordered = []
    for job in jobs:
        if job.label not in stored:  # another grader started the class over (--force) meanwhile
            log(f"warning: {job.label} is being graded again by another grader; it is not in this CSV")
            continue
        record = Record.from_json(stored[job.label])
        ordered.append(record)
        if not feedback_exists(feedback_root / job.student / job.exercise_id):  # graded on another machine
            write_feedback(feedback_root / job.student / job.exercise_id, record, job.notebook, mode)
    csv_path = _write_class_files(out, ordered, log)
    return BatchSummary(ordered, graded_now, len(ordered) - graded_now, csv_path, feedback_root, db_url)


def _write_class_files(out: Path, ordered: list[Record], log: Callable[[str], None]) -> Path:
    """What both ways of grading a class end with: warnings about unconfined grading, grades.csv and the class
    report beside it. Returns the CSV's path."""
    unconfined = {message for record in ordered for message in record.notes_of_kind(QUIET_NOTES)}
    for message in sorted(unconfined):
        log(f"warning: {message}")
    csv_path = out / "grades.csv"
    write_csv(csv_path, ordered)
    write_class_report(out, ordered)
    return csv_path


def resolve_db_url(db_url: str | None, db_url_file: str | None, log: Callable[[str], None] = print) -> str | None:
    """The gradebook URL from --db-url or --db-url-file (None: $BERTCOURSE_DB_URL or the course default).

    A command line is readable by every user of the machine (`ps`, /proc): a URL with a password given
    there gets a warning; a file or the environment keeps it private."""
    if db_url and db_url_file:
        raise BatchError("give the gradebook URL with --db-url or with --db-url-file, not both")
    if db_url_file:
        try:
            lines = [line.strip() for line in Path(db_url_file).read_text(encoding="utf-8").splitlines()]
        except (OSError, UnicodeDecodeError) as exc:
            raise BatchError(f"--db-url-file {db_url_file}: cannot read it ({exc})") from None
        lines = [line for line in lines if line and not line.startswith("#")]
        if len(lines) != 1:
            raise BatchError(f"--db-url-file {db_url_file}: expected one line with the database URL, "
                             f"found {len(lines)}")
        return lines[0]
    if db_url and url_password(db_url):
        log("warning: --db-url carries a password, which every user of this machine can read in the process "
            "list; put the URL in BERTCOURSE_DB_URL or in a file named by --db-url-file instead")
    return db_url


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C: lanes are ended and temporary folders removed


def autograde_command(args: Any) -> int:
    """`bertcourse autograde SUBMISSIONS_DIR [...]` (arguments: cli.py)."""
    course = load_course()
    db_url = resolve_db_url(args.db_url, getattr(args, "db_url_file", None),
                            log=lambda line: print(line, file=sys.stderr))
    options = BatchOptions(
        submissions=Path(args.submissions), output_dir=Path(args.output_dir) if args.output_dir else None,
        exercise_ids=args.exercise_ids, jobs=args.jobs, db_url=db_url, force=args.force,
        progress=not args.no_progress,
        lease_s=DEFAULT_LEASE_S if getattr(args, "lease", None) is None else args.lease,
        private_feedback=getattr(args, "private_feedback", False),
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        summary = autograde(course, options)
    finally:
        signal.signal(signal.SIGTERM, previous)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary.counts().items()))
    print(f"{len(summary.records)} submissions ({counts}); graded now: {summary.graded_now}, "
          f"reused: {summary.reused}")
    for record in summary.records:
        if record.status != "graded":
            print(f"  {record.student}/{record.exercise}: {record.status}: {'; '.join(record.reasons)}")
    print(f"grades: {summary.csv_path}\nclass report: {summary.csv_path.parent / REPORT_NAME}.html (and .csv)\n"
          f"feedback: {summary.feedback_dir}/<student>/<exercise>/feedback.html\n"
          f"gradebook: {redact(summary.db_url, summary.db_url)}")
    return 0
