"""What the class got wrong: `class-report.html` and `class-report.csv` beside grades.csv.

Every hidden check names the misconception it catches (its `feedback`), so the share of the class that
failed a check is the share that holds that misconception. Per exercise, the report lists each check
with that share (how many of the failures were parts not written yet, which are not misconceptions),
the score distribution as a histogram, and the submissions that could not be graded. Only graded
submissions count towards the shares and the histogram; void and missing ones are listed apart.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertcourse.folders import write_atomic
from bertcourse.grading.batch.records import Record
from bertcourse.grading.report import not_written

REPORT_NAME = "class-report"
HISTOGRAM_BINS = 10


@dataclass
class CheckStats:
    """How the class did on one hidden check."""

    name: str
    part: str
    points: float
    misconception: str  # the check's feedback: what a failure means
    failed: int = 0
    not_written: int = 0  # of the failures: the part was still nbgrader's stub

    def share(self, graded: int) -> float:
        """The share of graded submissions that failed it."""
        return self.failed / graded if graded else 0.0


@dataclass
class ExerciseStats:
    """One exercise's column of the class: its checks, scores and the submissions that did not run."""

    exercise: str
    max_score: float = 0.0
    checks: dict[str, CheckStats] = field(default_factory=dict)
    scores: list[float] = field(default_factory=list)  # of the graded submissions
    not_graded: list[Record] = field(default_factory=list)  # void or missing

    def histogram(self, bins: int = HISTOGRAM_BINS) -> list[tuple[float, float, int]]:
        """(low, high, count) over [0, max_score]; the last bin includes full marks."""
        top = self.max_score or max(self.scores, default=0.0) or 1.0
        width = top / bins
        counts = [0] * bins
        for score in self.scores:
            counts[min(int(score / width), bins - 1)] += 1
        return [(i * width, (i + 1) * width, n) for i, n in enumerate(counts)]


def class_stats(records: Sequence[Record]) -> dict[str, ExerciseStats]:
    """{exercise: its statistics}, exercises in the order the records first name them."""
    stats: dict[str, ExerciseStats] = {}
    for record in records:
        exercise = stats.setdefault(record.exercise, ExerciseStats(record.exercise))
        exercise.max_score = max(exercise.max_score, record.max_score)
        if record.status != "graded":
            exercise.not_graded.append(record)
            continue
        exercise.scores.append(record.score)
        for check in record.result.checks:
            entry = exercise.checks.setdefault(check.name,
                                               CheckStats(check.name, check.cell, check.max_points, check.feedback))
            if not check.passed:
                entry.failed += 1
                entry.not_written += not_written(check)
    return stats


def _ranked(exercise: ExerciseStats) -> list[CheckStats]:
    """The checks most failed first (the misconceptions most of the class holds)."""
    return sorted(exercise.checks.values(), key=lambda c: (-(c.failed - c.not_written), -c.failed, c.name))


def report_csv(stats: dict[str, ExerciseStats]) -> str:
    """One row per exercise and check: how many graded submissions failed it, and the misconception."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["exercise", "part", "check", "points", "graded", "failed", "failed_share", "not_written",
                     "misconception"])
    for exercise in stats.values():
        graded = len(exercise.scores)
        for check in _ranked(exercise):
            writer.writerow([exercise.exercise, check.part, check.name, f"{check.points:g}", graded, check.failed,
                             f"{check.share(graded):.3f}", check.not_written, check.misconception])
    return buffer.getvalue()


_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; base-uri 'none'"
_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; color: #222; max-width: 70em; margin: 1em auto; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em 0; } td, th { padding: 0.2em 0.6em; text-align: left;
vertical-align: top; border-bottom: 1px solid #ddd; } .num { text-align: right; white-space: nowrap; }
.bar { display: inline-block; height: 0.9em; background: #c62828; vertical-align: middle; }
.bar.score { background: #1565c0; } .dim { color: #777; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _bar(share: float, kind: str = "") -> str:
    return f'<span class="bar {kind}" style="width:{share * 12:.2f}em"></span>'


def _exercise_html(exercise: ExerciseStats) -> str:
    graded = len(exercise.scores)
    parts = [f"<h2>{_e(exercise.exercise)}</h2>",
             f"<p>{graded} graded submission{'s' if graded != 1 else ''}"
             + (f", {len(exercise.not_graded)} not graded (below)" if exercise.not_graded else "")
             + (f"; mean score {sum(exercise.scores) / graded:.2f} / {exercise.max_score:g}" if graded else "")
             + ".</p>"]
    rows = "".join(
        f"<tr><td class=num>{check.share(graded):.0%}</td><td>{_bar(check.share(graded))}</td>"
        f"<td class=num>{check.failed}</td><td class='num dim'>{check.not_written or ''}</td>"
        f"<td><code>{_e(check.name)}</code><br><span class=dim>{_e(check.part)}, {check.points:g} pt</span></td>"
        f"<td>{_e(check.misconception)}</td></tr>"
        for check in _ranked(exercise))
    parts.append("<h3>Checks, most failed first</h3><table><tr><th>failed</th><th></th><th>students</th>"
                 "<th>of them not written</th><th>check</th><th>misconception it names</th></tr>"
                 f"{rows}</table>")
    histogram = exercise.histogram()
    most = max((n for _, _, n in histogram), default=0) or 1
    bins = "".join(f"<tr><td class=num>{low:g} to {'' if i < len(histogram) - 1 else '≤ '}{high:g}</td>"
                   f"<td>{_bar(n / most, 'score')}</td><td class=num>{n}</td></tr>"
                   for i, (low, high, n) in enumerate(histogram))
    parts.append(f"<h3>Scores</h3><table><tr><th>points</th><th></th><th>students</th></tr>{bins}</table>")
    if exercise.not_graded:
        missing = "".join(f"<tr><td>{_e(r.student)}</td><td>{_e(r.status)}</td><td>{_e(' | '.join(r.reasons))}</td>"
                          "</tr>" for r in exercise.not_graded)
        parts.append("<h3>Submissions that could not be graded</h3><table><tr><th>student</th><th>status</th>"
                     f"<th>why</th></tr>{missing}</table>")
    return "\n".join(parts)


def report_html(stats: dict[str, ExerciseStats]) -> str:
    """The class report page: self-contained, no script, nothing loaded from elsewhere."""
    body = "\n".join(_exercise_html(exercise) for exercise in stats.values()) or "<p>No submissions.</p>"
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n<title>Class report</title>\n'
            f"<style>{_STYLE}</style>\n</head>\n<body>\n<h1>Class report</h1>\n"
            "<p>The share of graded submissions that failed each hidden check, with the misconception the "
            "check names; failures on parts not written yet are counted apart.</p>\n"
            f"{body}\n</body>\n</html>\n")


def write_class_report(out: Path, records: Sequence[Record]) -> tuple[Path, Path]:
    """Write `out/class-report.html` and `out/class-report.csv`; their paths."""
    stats = class_stats(records)
    html_path, csv_path = out / f"{REPORT_NAME}.html", out / f"{REPORT_NAME}.csv"
    write_atomic(html_path, report_html(stats))
    write_atomic(csv_path, report_csv(stats))
    return html_path, csv_path
