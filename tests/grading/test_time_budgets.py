"""A hang costs only what depends on it: every graded part has its own time budget.

The rule (autograder/README.md, "Limits and determinism"): a check gets `check_time_limit_s`, or what is
left of its part's `part_time_limit_s` when that is less; running the notebook's cells (restarts
included) has `time_limit_s`. So an infinite loop in one graded function spends its part's time and
the other parts keep their points. Limits are made small here so that hangs are cheap to wait for.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bertcourse.course import CourseError, load_course, parse_course
from bertcourse.grading import Grader

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "grading"
TOY = FIXTURE / "solutions" / "toy" / "toy.ipynb"
ROOT = Path(__file__).resolve().parents[2]
HANG = "def _hang(*args, **kwargs):\n    while True:\n        pass\n"
# The course's exercises hang by sleeping: the budgets are wall-clock, so a sleeping hang spends them exactly as a busy
# one does (the toy's busy loop above proves a running loop is stopped), and leaves the CPU to the suite's other worker.
SLEEPING = "def _hang(*args, **kwargs):\n    import time\n    while True:\n        time.sleep(0.05)\n"
STUBBORN = ("def _hang(*args, **kwargs):\n    import time\n    while True:\n        try:\n            time.sleep(10)\n"
            "        except BaseException:\n            pass\n")


def with_cell_appended(source: Path, folder: Path, extra: dict[str, str]) -> Path:
    """A copy of `source` with code appended to the solution cells named in `extra` (by grade_id)."""
    nb = json.loads(source.read_text())
    for cell in nb["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in extra:
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = text + "\n\n" + extra[grade_id]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / source.name
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture(scope="module")
def toy_grader():
    with Grader(load_course(FIXTURE)) as grader:
        grader.grade(TOY, "toy")  # warm: the durations below are the notebook's own
        yield grader


def test_a_hang_costs_only_its_part(toy_grader, tmp_path):
    hurried = dataclasses.replace(toy_grader.exercise("toy"), time_limit_s=3, check_time_limit_s=2,
                                 part_time_limit_s=3)
    path = with_cell_appended(TOY, tmp_path, {"add": HANG + "add = _hang\n"})
    result = toy_grader.grade(path, hurried)
    assert {k: p.score for k, p in result.parts.items()} == {"add_checks": 0.0, "mask_checks": 2.0,
                                                             "concept_checks": 1.0}
    assert result.check("test_add_numbers").message == "your code did not finish within 2 s"
    part_over = "grading of this part stopped: its checks used up their time limit of 3 s"
    assert result.check("test_add_tensors").message == part_over
    assert result.error is None and result.duration_s < 3 + 2 + 4  # the part's budget, grace, the rest


def test_a_hang_that_swallows_the_alarm_is_killed_and_other_parts_get_a_new_worker(toy_grader, tmp_path):
    hurried = dataclasses.replace(toy_grader.exercise("toy"), time_limit_s=3, check_time_limit_s=2,
                                 part_time_limit_s=3)
    path = with_cell_appended(TOY, tmp_path, {"mask": STUBBORN + "sample_mask = _hang\n"})
    result = toy_grader.grade(path, hurried)
    assert {k: p.score for k, p in result.parts.items()} == {"add_checks": 2.0, "mask_checks": 0.0,
                                                             "concept_checks": 1.0}
    # Killed at the check's limit plus grace (4 s): the part's 3 s are spent, its next check is not run.
    part_over = "grading of this part stopped: its checks used up their time limit of 3 s"
    assert result.check("test_mask_uses_generator").message == part_over


def test_part_time_limit_default_and_validation(tmp_path):
    course = load_course(FIXTURE)
    toy = course.exercise("toy")
    assert toy.part_time_limit_s is None and toy.part_limit_s == 2 * toy.check_time_limit_s
    for exercise in load_course(ROOT).exercises:
        assert exercise.part_limit_s >= exercise.check_time_limit_s  # a part can always afford one full check
    text = (FIXTURE / "course.yml").read_text().replace("check_time_limit_s: 3}", "check_time_limit_s: 3, "
                                                         "part_time_limit_s: -1}", 1)
    with pytest.raises(CourseError, match=r"course.yml:\d+: exercises 'toy': part_time_limit_s must be positive"):
        parse_course(text, FIXTURE, check_files=False)


# ----------------------------------------------------------------------------- the course's exercises

# Each graded function of each exercise, made to hang (appended to its solution cell): (cell, its part, the hang).
# Hangs in different parts share a grading: each part has its own budget (budgets.py), which the test below sees
# whole when each hung part's hang starts. Every grading but ex02's (one part) leaves parts unhung.
HANGS = [
    ("ex01-masking", [("mask_tokens", "mask_tokens_checks", "mask_tokens = _hang"),
                      ("mlm_loss", "mlm_loss_checks", "mlm_loss = _hang")]),
    ("ex02-whole-word-masking", [("whole_word_mask", "whole_word_mask_checks", "whole_word_mask = _hang")]),
    ("ex03-tiny-bert", [("embeddings", "embeddings_checks", "Embeddings.forward = _hang"),
                        ("attention", "attention_checks", "extended_attention_mask = _hang")]),
    ("ex03-tiny-bert", [("attention", "attention_checks", "SelfAttention.forward = _hang"),
                        ("mlm_head", "mlm_head_checks", "MLMHead.forward = _hang")]),
]


@pytest.fixture(scope="module")
def course_grader():
    with Grader(load_course(ROOT)) as grader:
        yield grader


@pytest.mark.slow
@pytest.mark.parametrize(("exercise_id", "hangs"), HANGS,
                         ids=[" + ".join(h[2].split(" =")[0] for h in hangs) for _, hangs in HANGS])
def test_an_infinite_loop_in_a_graded_function_costs_only_its_part(course_grader, tmp_path, exercise_id, hangs):
    exercise = course_grader.exercise(exercise_id)
    # A hang costs its part 12 s. The unhung parts need that much room on a loaded machine: with 6 s, ex03's MLM head
    # part ran out of time in a CI rehearsal (two test workers and the graders' processes on 2 cores).
    hurried = dataclasses.replace(exercise, time_limit_s=90, check_time_limit_s=3, part_time_limit_s=12)
    solution = ROOT / "solutions" / exercise.notebook
    result = course_grader.grade(with_cell_appended(solution, tmp_path, {cell: SLEEPING + hang + "\n"
                                                                          for cell, _, hang in hangs}), hurried)
    assert result.error is None
    full = {grade_id: p.max_score for grade_id, p in result.parts.items()}
    scores = {grade_id: p.score for grade_id, p in result.parts.items()}
    hung_parts = {part for _, part, _ in hangs}
    for part in hung_parts:
        assert scores[part] < full[part], part
        hung = [c.message for c in result.checks if c.cell == part and not c.passed]
        # a whole check's 3 s: the other part's hang did not spend this part's budget
        assert "your code did not finish within 3 s" in hung, (part, hung)
    assert {k: v for k, v in scores.items() if k not in hung_parts} == {
        k: v for k, v in full.items() if k not in hung_parts}
    assert len(full) > len(hung_parts) or exercise_id == "ex02-whole-word-masking"
