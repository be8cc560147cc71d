"""The class report on a generated class: each check's share of failing students with the misconception
it names, the score histogram, and the submissions that could not be graded (no engine needed: the
records are built as the engine would give them)."""

from __future__ import annotations

import csv
import random

from bertcourse.grading.batch.class_report import class_stats, write_class_report
from bertcourse.grading.batch.records import Record
from bertcourse.grading.results import CheckResult, NotebookResult

CHECKS = [  # name, part, points, misconception, how many of the 20 graded students fail it
    ("test_specials_never_masked", "mask_checks", 2.0, "special tokens were selected for masking", 12),
    ("test_mask_share", "mask_checks", 1.0, "about 15% of tokens should be selected", 5),
    ("test_labels_ignored_elsewhere", "loss_checks", 2.0, "labels must be -100 where nothing is predicted", 0),
]
NOT_WRITTEN = 3  # of the students failing test_specials_never_masked, this many never wrote the code


def _record(student: str, failing: set[str], stub: bool, status: str = "graded") -> Record:
    checks = []
    for name, part, points, feedback, _ in CHECKS:
        failed = name in failing
        message = ("your code raised NotImplementedError in `mask_tokens`" if stub and failed
                   else "the result is not what was expected" if failed else "")
        checks.append(CheckResult(name, part, 0.0 if failed else points, points, not failed, feedback, message))
    result = NotebookResult(notebook="masking.ipynb", exercise="ex01-masking", checks=checks)
    result.total()
    if status != "graded":
        result.error, result.checks = "not valid JSON", []
    score = result.score if status == "graded" else 0.0
    return Record(student=student, exercise="ex01-masking", notebook="masking", submission="", key="k",
                  status=status, score=score, max_score=5.0, parts={},
                  part_max={"mask_checks": 3.0, "loss_checks": 2.0},
                  reasons=["not valid JSON"] if status != "graded" else [], result=result)


def generated_class() -> list[Record]:
    rng = random.Random(0)
    students = [f"s{i:02d}" for i in range(20)]
    failing = {s: set() for s in students}
    for name, *_, count in CHECKS:
        for student in rng.sample(students, count):
            failing[student].add(name)
    specials = sorted(s for s in students if "test_specials_never_masked" in failing[s])
    stubs = set(specials[:NOT_WRITTEN])
    records = [_record(s, failing[s], stub=s in stubs) for s in students]
    return records + [_record("zed", set(), stub=False, status="void")]


def test_shares_misconceptions_histogram_and_not_graded(tmp_path):
    records = generated_class()
    (stats,) = class_stats(records).values()
    assert len(stats.scores) == 20 and [r.student for r in stats.not_graded] == ["zed"]
    by_name = {c.name: c for c in stats.checks.values()}
    for name, _, _, misconception, count in CHECKS:
        assert by_name[name].failed == count and by_name[name].misconception == misconception
    assert by_name["test_specials_never_masked"].not_written == NOT_WRITTEN
    histogram = stats.histogram()
    assert sum(n for *_, n in histogram) == 20 and histogram[-1][1] == 5.0
    assert histogram[-1][2] == sum(1 for r in records[:20] if r.score == 5.0)  # full marks fall in the last bin

    html_path, csv_path = write_class_report(tmp_path, records)
    rows = list(csv.DictReader(csv_path.open(newline="")))
    assert [r["check"] for r in rows] == [c[0] for c in CHECKS]  # most failed first
    first = rows[0]
    assert (first["failed"], first["failed_share"], first["not_written"]) == ("12", "0.600", str(NOT_WRITTEN))
    assert first["misconception"] == "special tokens were selected for masking" and first["graded"] == "20"
    page = html_path.read_text()
    assert "60%" in page and "special tokens were selected for masking" in page
    assert "zed" in page and "not valid JSON" in page and "<script" not in page.lower()


def test_student_text_is_escaped(tmp_path):
    record = _record("<b>eve</b>", set(), stub=False, status="void")
    record.reasons = ["<script>alert(1)</script>"]
    html_path, _ = write_class_report(tmp_path, [record])
    page = html_path.read_text()
    assert "<script>alert" not in page and "&lt;b&gt;eve&lt;/b&gt;" in page
