"""`bertcourse autograde`: grade a whole class's submissions, losing nothing.

Input is nbgrader's layout, `submitted/<student>/<exercise>/<notebook>.ipynb`. Each submission is
graded by the engine (student code in a worker process, hidden checks in a judge process), in
`--jobs` parallel lanes. The lanes only return results; this process alone writes the gradebook, so
parallel grading cannot lose a grade to a locked SQLite file.

What makes a batch safe to kill and re-run: every finished submission leaves a result file written
atomically under `autograded/<student>/<exercise>/`, keyed by a hash of the submission, the exercise's
checks and its course.yml entry. A re-run grades only what has no matching result (or everything with
`--force`) and rebuilds the gradebook rows, the CSV and any missing feedback page from the results.
Submissions are only ever read.
"""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import hashlib
import io
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertcourse.course import Course, Exercise
from bertcourse.errors import BertcourseError
from bertcourse.folders import is_artefact

RESULT_NAME = "bertcourse-result.json"
RESULT_FORMAT = 1
TIMESTAMP_NAME = "timestamp.txt"


class BatchError(BertcourseError):
    """The command was given something it cannot work with (no such folder, unknown exercise)."""


# ----------------------------------------------------------------------------- what there is to grade


@dataclass
class Job:
    """One folder `<student>/<exercise>/` of the submissions directory."""

    student: str
    exercise_id: str
    folder: Path
    notebook: Path | None = None  # the notebook to grade; None when there is nothing gradable
    notebook_name: str = ""  # the notebook's name in the exercise (the gradebook's notebook id)
    problem: str = ""  # why the submission cannot be graded at all (then notebook is None)
    notes: list[str] = field(default_factory=list)  # things worth knowing, e.g. a renamed notebook
    key: str = ""

    @property
    def label(self) -> str:
        return f"{self.student}/{self.exercise_id}"


def _visible(path: Path) -> bool:
    """Not an editor's artefact: JupyterLab's checkpoint copies and backups are never graded."""
    return not is_artefact(path.name)


def find_submissions(course: Course, submissions: Path, exercise_ids: Sequence[str] | None = None) -> list[Job]:
    """Every `<student>/<exercise>/` folder, with the notebook to grade or the reason there is none."""
    if not submissions.is_dir():
        raise BatchError(f"{submissions} is not a folder (expected submitted/<student>/<exercise>/<name>.ipynb)")
    for exercise_id in exercise_ids or []:
        course.exercise(exercise_id)  # an unknown id is the user's typo: say so before grading anything
    known = {e.id: e for e in course.exercises}
    jobs = []
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and _visible(p)):
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir() and _visible(p)):
            if exercise_ids and folder.name not in exercise_ids:
                continue
            job = Job(student_dir.name, folder.name, folder)
            jobs.append(job)
            exercise = known.get(folder.name)
            if exercise is None:
                job.problem = (f"'{folder.name}' is not an exercise of this course "
                               f"(course.yml defines: {', '.join(known) or 'none'})")
                continue
            expected = Path(exercise.notebook).name
            job.notebook_name = Path(expected).stem
            found = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and _visible(p))
            if folder / expected in found:
                job.notebook = folder / expected
            elif len(found) == 1:
                job.notebook = found[0]
                job.notes.append(f"the notebook is named {found[0].name}, not {expected}; it was graded as {expected}")
            elif found:
                job.problem = (f"no {expected} in {folder.name}/, and several other notebooks "
                               f"({', '.join(p.name for p in found)}): cannot tell which one to grade")
            else:
                job.problem = f"no notebook submitted (expected {folder.name}/{expected})"
    return jobs


def _hash_files(digest: Any, paths: Iterable[Path]) -> None:
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")


def exercise_fingerprint(course: Course, exercise: Exercise) -> str:
    """What the grade of a submission depends on besides the submission: checks and course.yml entry."""
    digest = hashlib.sha256(f"bertcourse-result-v{RESULT_FORMAT}".encode())
    digest.update(json.dumps(dataclasses.asdict(exercise), sort_keys=True).encode())
    _hash_files(digest, [course.path(exercise.checks), course.path(f"solutions/{exercise.notebook}")])
    return digest.hexdigest()


def submission_key(job: Job, fingerprint: str) -> str:
    digest = hashlib.sha256(fingerprint.encode())
    _hash_files(digest, [job.notebook] if job.notebook else [])
    digest.update(job.problem.encode())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- one submission


def empty_result(exercise: Exercise, notebook: str, error: str, cell_points: dict[str, float]) -> dict[str, Any]:
    """A NotebookResult (as a dict) scoring 0 on every part, for a submission that could not run."""
    from bertcourse.grading.results import NotebookResult, PartScore

    result = NotebookResult(notebook=notebook, exercise=exercise.id, error=error)
    result.parts = {cell: PartScore(cell, 0.0, points) for cell, points in cell_points.items()}
    result.max_score = sum(cell_points.values())
    return result.to_dict()


@dataclass
class Record:
    """What the batch keeps about one submission (written as its result file)."""

    student: str
    exercise: str
    notebook: str  # the notebook's name in the exercise
    submission: str  # the graded file, relative to the submissions folder ("" when none)
    key: str
    status: str  # graded (reasons may list cells that failed) | void (could not be graded: score 0, see
    # reasons) | missing (no gradable notebook in the folder, or not an exercise of the course)
    score: float
    max_score: float
    parts: dict[str, float]  # grade_id -> score
    part_max: dict[str, float]
    reasons: list[str]
    result: dict[str, Any]  # the engine's NotebookResult.to_dict() (includes instructor-only detail)
    seconds: float = 0.0
    format: int = RESULT_FORMAT

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)


def summarise(job: Job, result: dict[str, Any], cell_points: dict[str, float], seconds: float,
              submissions: Path) -> Record:
    """A Record from the engine's result: per-part scores over the exercise's graded cells."""
    parts = {cell: 0.0 for cell in cell_points}
    for cell, part in (result.get("parts") or {}).items():
        if cell in parts or not cell_points:
            parts[cell] = float(part["score"]) if not result.get("error") else 0.0
    reasons = list(job.notes)
    if result.get("error"):
        reasons.append(result["error"])
    reasons += [note["message"] for note in result.get("notes", []) if note.get("kind") not in _QUIET_NOTES]
    status = "missing" if job.problem else ("void" if result.get("error") else "graded")
    part_max = dict(cell_points) or {c: float(p["max_score"]) for c, p in (result.get("parts") or {}).items()}
    return Record(
        student=job.student,
        exercise=job.exercise_id,
        notebook=job.notebook_name,
        submission=str(job.notebook.relative_to(submissions)) if job.notebook else "",
        key=job.key,
        status=status,
        score=round(sum(parts.values()), 6),
        max_score=round(sum(part_max.values()), 6),
        parts=parts,
        part_max=part_max,
        reasons=reasons,
        result=result,
        seconds=round(seconds, 3),
    )


# Engine notes about the grading machine rather than the submission: reported once per batch, not per row.
_QUIET_NOTES = {"sandbox-unavailable"}


# ----------------------------------------------------------------------------- the lanes

_lane: dict[str, Any] = {}  # per-process state of a grading lane: the engine's Grader, the course


def _lane_grader(course: Course) -> Any:
    if "grader" in _lane and _lane["grader"].course.root != course.root:
        _close_lane()
    if "grader" not in _lane:
        from bertcourse.grading.engine import Grader

        grader = Grader(course)
        _lane["grader"] = grader
        # Closes the engine's helper processes when the lane exits: atexit does not run in
        # multiprocessing children, multiprocessing's own finalizers do (and in the parent at exit).
        from multiprocessing.util import Finalize

        Finalize(None, grader.close, exitpriority=10)  # closing twice is harmless
    return _lane["grader"]


def _new_lane(course: Course, exercise_ids: list[str]) -> None:
    """Start a lane's engine and load nbconvert before the first submission arrives."""
    _lane.clear()  # a forked lane starts without the parent's engine: its helpers belong to the parent
    # The parent decides when a batch stops: Ctrl-C interrupts it, and it ends the lanes with SIGTERM,
    # on which a lane closes its engine (helpers and temporary folder) and leaves at once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_lane)
    grader = _lane_grader(course)
    for exercise_id in exercise_ids:
        try:
            grader.checks(exercise_id)  # starts the zygote and the judge, which collects the checks
        except BertcourseError:
            pass  # reported where it matters: on the submissions of that exercise
    from bertcourse.grading.feedback import warm_up

    warm_up()


def _close_lane() -> None:
    grader = _lane.pop("grader", None)
    if grader is not None:
        grader.close()


def _end_lane(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM (the pool sends its own) must not cut this short
    try:
        _close_lane()
    finally:
        os._exit(128 + signum)


def grade_job(course: Course, job: Job, cell_points: dict[str, float], submissions: Path,
              feedback_root: Path) -> Record:
    """Grade one submission and write its feedback page; never raises for a bad submission."""
    from bertcourse.grading.feedback import write_feedback

    start = time.monotonic()
    if job.problem:
        result = empty_result(_exercise_or_stub(course, job), job.notebook_name, job.problem, cell_points)
    else:
        exercise = course.exercise(job.exercise_id)
        try:
            result = _lane_grader(course).grade(job.notebook, exercise).to_dict()
        except BertcourseError as exc:  # e.g. not a notebook: the engine says what is wrong
            result = empty_result(exercise, job.notebook_name, str(exc), cell_points)
        except Exception as exc:  # a bug in the grader must not stop the class's batch
            result = empty_result(exercise, job.notebook_name,
                                  f"the autograder failed on this submission ({type(exc).__name__}: {exc}); "
                                  "ask the instructor to look at it", cell_points)
    result = _without_instructor_paths(result, job)
    record = summarise(job, result, cell_points, time.monotonic() - start, submissions)
    write_feedback(feedback_root / job.student / job.exercise_id, record, job.notebook)
    return record


def _without_instructor_paths(result: dict, job: Job) -> dict:
    """Reasons name the submission by its file name: the instructor's folders stay out of feedback pages."""
    if job.notebook is None:
        return result
    text = json.dumps(result)
    for path in {str(job.notebook.resolve()), str(job.notebook)}:
        text = text.replace(json.dumps(path)[1:-1], job.notebook.name)
    return json.loads(text)


def _exercise_or_stub(course: Course, job: Job) -> Exercise:
    try:
        return course.exercise(job.exercise_id)
    except BertcourseError:
        return Exercise(id=job.exercise_id, title="", notebook="", points=0.0, checks="")


def _grade_in_lane(args: tuple) -> Record:
    return grade_job(*args)


# ----------------------------------------------------------------------------- files


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a killed batch never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_record(path: Path) -> Record | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != RESULT_FORMAT:
            return None
        return Record(**data)
    except (OSError, ValueError, TypeError):
        return None  # unreadable or from another version: grade again


def write_csv(path: Path, records: Sequence[Record]) -> None:
    """One row per submission: totals, status and reasons, then one column per graded part."""
    part_columns = list(dict.fromkeys(cell for r in records for cell in r.part_max))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["student", "exercise", "score", "max_score", "status", "reason", *part_columns])
    for r in records:
        writer.writerow([r.student, r.exercise, _number(r.score), _number(r.max_score), r.status,
                         " | ".join(r.reasons), *(_number(r.parts[c]) if c in r.parts else "" for c in part_columns)])
    write_atomic(path, buffer.getvalue())


def _number(value: float) -> str:
    return f"{value:g}"


# ----------------------------------------------------------------------------- the batch


@dataclass
class BatchOptions:
    submissions: Path
    output_dir: Path | None = None  # default: the folder holding the submissions folder
    exercise_ids: Sequence[str] | None = None
    jobs: int = 1
    db_url: str | None = None
    force: bool = False
    progress: bool = True


@dataclass
class BatchSummary:
    records: list[Record]
    graded_now: int
    reused: int
    csv_path: Path
    feedback_dir: Path
    db_url: str

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.status] = counts.get(record.status, 0) + 1
        return counts


def autograde(course: Course, options: BatchOptions, log: Callable[[str], None] = print) -> BatchSummary:
    """Grade every submission (reusing finished results), then write gradebook, CSV and feedback."""
    from bertcourse.grading.feedback import feedback_exists, write_feedback
    from bertcourse.grading.gradebook import default_db_url, open_gradebook, record_grades
    from bertcourse.grading.release import exercise_cells, register_exercises

    if options.jobs < 1:
        raise BatchError(f"--jobs must be at least 1, got {options.jobs}")
    submissions = options.submissions.resolve()
    jobs = find_submissions(course, submissions, options.exercise_ids)
    out = (options.output_dir or submissions.parent).resolve()
    if out == submissions or submissions in out.parents:
        raise BatchError(f"the output folder {out} is inside the submissions folder; submissions are never written to")
    results_root, feedback_root = out / "autograded", out / "feedback"
    db_url = options.db_url or default_db_url(course)

    known = {e.id for e in course.exercises}
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
    reused = len(records)
    log(f"{len(jobs)} submissions in {options.submissions}: {reused} already graded, {len(todo)} to grade "
        f"with {options.jobs} lane{'s' if options.jobs > 1 else ''}")

    tasks = [(course, job, cells.get(job.exercise_id, {}), submissions, feedback_root) for job in todo]
    lanes = _Lanes(course, tasks, options.jobs, options.progress)  # grading starts now, in parallel lanes
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
                                  flagged=bool(record.reasons), timestamp=_timestamp(submissions, record))

            for record in list(records.values()):
                finish(record, write_result=False)
                if not feedback_exists(feedback_root / record.student / record.exercise):
                    job = next(j for j in jobs if j.label == f"{record.student}/{record.exercise}")
                    write_feedback(feedback_root / record.student / record.exercise, record, job.notebook)
            for record in lanes:
                finish(record, write_result=True)
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or failed: stop grading, leave nothing behind
        lanes.terminate()
        _close_lane()
        raise
    finally:
        lanes.close()

    ordered = [records[j.label] for j in jobs]
    unconfined = {n["message"] for r in ordered for n in r.result.get("notes", []) if n.get("kind") in _QUIET_NOTES}
    for message in sorted(unconfined):
        log(f"warning: {message}")
    csv_path = out / "grades.csv"
    write_csv(csv_path, ordered)
    return BatchSummary(ordered, len(todo), reused, csv_path, feedback_root, db_url)


def _timestamp(submissions: Path, record: Record) -> str | None:
    path = submissions / record.student / record.exercise / TIMESTAMP_NAME
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    from nbgrader.utils import parse_utc

    try:
        parse_utc(text)
    except Exception:  # nbgrader's own collect writes this file; anything else is ignored
        return None
    return text


class _Lanes:
    """Grades tasks in `jobs` lanes; iterating yields each Record as soon as it is ready.

    Parallel lanes are forked processes, each with its own engine. They are forked here, at once,
    before the caller imports nbgrader and opens the gradebook (no database connection crosses a
    fork, and the lanes start their engines while the parent does that) and before the progress bar
    starts its thread.
    """

    def __init__(self, course: Course, tasks: list[tuple], jobs: int, progress: bool):
        self.tasks, self.progress = tasks, progress
        self.pool: concurrent.futures.ProcessPoolExecutor | None = None
        self.pending: dict[concurrent.futures.Future, tuple] = {}
        if jobs > 1 and len(tasks) > 1:
            exercise_ids = sorted({task[1].exercise_id for task in tasks if not task[1].problem})
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("fork"),
                initializer=_new_lane, initargs=(course, exercise_ids))
            self.pending = {self.pool.submit(_grade_in_lane, task): task for task in tasks}

    def __iter__(self) -> Iterator[Record]:
        from tqdm.auto import tqdm

        with tqdm(total=len(self.tasks), unit="nb", desc="grading", disable=not self.progress or not self.tasks,
                  file=sys.stderr) as bar:
            if self.pool is None:
                for task in self.tasks:
                    bar.set_postfix_str(task[1].label, refresh=False)
                    yield _grade_in_lane(task)
                    bar.update()
                return
            for future in concurrent.futures.as_completed(self.pending):
                yield self._record(future)
                bar.update()

    def _record(self, future: concurrent.futures.Future) -> Record:
        task = self.pending[future]
        try:
            return future.result()
        except Exception as exc:  # the lane itself died: say so, and grade it again on the next run
            course, job, cell_points, submissions, _ = task
            result = empty_result(_exercise_or_stub(course, job), job.notebook_name,
                                  f"the grading lane failed ({type(exc).__name__}: {exc})", cell_points)
            record = summarise(job, result, cell_points, 0.0, submissions)
            record.key = ""
            return record

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def terminate(self) -> None:
        """End the lanes now (each closes its engine on SIGTERM), without waiting for their notebooks."""
        if self.pool is None:
            return
        processes = list(getattr(self.pool, "_processes", {}).values())
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = None


def resolve_db_url(db_url: str | None, db_url_file: str | None, log: Callable[[str], None] = print) -> str | None:
    """The gradebook URL from --db-url or --db-url-file (None: $BERTCOURSE_DB_URL or the course default).

    A command line is readable by every user of the machine (`ps`, /proc): a URL with a password given
    there gets a warning; a file or the environment keeps it private."""
    from bertcourse.grading.gradebook import url_password

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
    from bertcourse.course import load_course
    from bertcourse.grading.gradebook import redact

    course = load_course()
    db_url = resolve_db_url(args.db_url, getattr(args, "db_url_file", None),
                            log=lambda line: print(line, file=sys.stderr))
    options = BatchOptions(
        submissions=Path(args.submissions), output_dir=Path(args.output_dir) if args.output_dir else None,
        exercise_ids=args.exercise_ids, jobs=args.jobs, db_url=db_url, force=args.force,
        progress=not args.no_progress,
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
    print(f"grades: {summary.csv_path}\nfeedback: {summary.feedback_dir}/<student>/<exercise>/feedback.html\n"
          f"gradebook: {redact(summary.db_url, summary.db_url)}")
    return 0
