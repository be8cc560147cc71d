"""The exercises as a student meets them: questions that do not give their answers away, self-checks
that each report with a hint, and a blank or half-done notebook that runs to the end saying what is not
done yet (src/bertcourse/selfcheck.py says why a part not done does not stop Run All)."""

from __future__ import annotations

import ast
import re

import nbformat
import pytest
from lesson_support import ROOT

from bertcourse.course import load_course

EXERCISES = load_course(ROOT).exercises
IDS = [exercise.id for exercise in EXERCISES]
OPTION = re.compile(r"^- \(([a-d])\) ")


def solution(exercise) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / exercise.notebook, as_version=4)


def release(exercise) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "exercises" / exercise.notebook, as_version=4)


def grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def visible_test_cells(notebook) -> list:
    return [c for c in notebook.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


def questions(notebook) -> dict[int, dict[str, str]]:
    """{question number: {letter: option text}} from the markdown cells (options may wrap onto indented lines)."""
    found: dict[int, dict[str, str]] = {}
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        number = None
        for line in cell.source.splitlines():
            if match := re.match(r"\*\*Q(\d+)\.\*\*", line):
                number, letter = int(match.group(1)), None
                found[number] = {}
            elif number is not None and (match := OPTION.match(line)):
                letter = match.group(1)
                found[number][letter] = line[match.end():]
            elif number is not None and letter and line.startswith("  "):
                found[number][letter] += " " + line.strip()
            elif not line.strip():
                letter = None
    return found


def answers(notebook) -> dict[int, str]:
    text = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    return {int(n): letter for n, letter in re.findall(r'answer_q(\d+) = "([a-d])"', text)}


# ----------------------------------------------------------------------------- questions


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_the_right_answer_is_not_given_away_by_its_length(exercise):
    notebook = solution(exercise)
    asked, right = questions(notebook), answers(notebook)
    assert set(asked) == set(right), f"questions {sorted(asked)} but answers for {sorted(right)}"
    longest = 0
    for number, options in asked.items():
        assert sorted(options) == ["a", "b", "c", "d"], f"Q{number}: options {sorted(options)}"
        answer = len(options[right[number]])
        distractors = [len(text) for letter, text in options.items() if letter != right[number]]
        longest += answer > max(distractors)
        assert answer <= 1.25 * max(distractors), f"Q{number}: the answer is far longer than any distractor"
        assert answer >= 0.75 * max(distractors), f"Q{number}: the answer is far shorter than the distractors"
    assert longest <= 1, f"the right answer is the longest option in {longest} of {len(asked)} questions"
    if asked:  # nor longer or shorter on average: the mean right answer within 10% of the mean distractor
        answers_mean = sum(len(options[right[n]]) for n, options in asked.items()) / len(asked)
        distractors_mean = sum(len(text) for n, options in asked.items() for letter, text in options.items()
                               if letter != right[n]) / (3 * len(asked))
        assert abs(answers_mean - distractors_mean) <= 0.1 * distractors_mean, (
            f"right answers average {answers_mean:.0f} characters, distractors {distractors_mean:.0f}")


def test_the_parser_sees_every_question():
    counts = {exercise.id: len(questions(solution(exercise))) for exercise in EXERCISES}
    assert counts["ex01-masking"] == 4 and counts["ex03-tiny-bert"] == 4
    assert counts["ex07-self-test"] == 16


# ----------------------------------------------------------------------------- self-checks


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_every_visible_check_reports_inside_a_checks_block_and_has_a_hint(exercise):
    for cell in visible_test_cells(solution(exercise)):
        tree = ast.parse(cell.source)
        blocks = [node for node in tree.body if isinstance(node, ast.With)
                  and ast.unparse(node.items[0].context_expr).startswith("checks(")]
        assert blocks, f"{grade_id(cell)}: its checks are not inside `with checks():`"
        calls = [node for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check"]
        assert calls, grade_id(cell)
        for call in calls:
            has_hint = len(call.args) >= 3 or any(keyword.arg == "hint" for keyword in call.keywords)
            assert has_hint, f"{grade_id(cell)}: {ast.unparse(call.args[0])} has no hint"


def run_cells(notebook, folder, skip=lambda cell: False, allow_errors=False) -> None:
    """Run the code cells in order in one kernel, like Run All (the cells listed by `skip` aside)."""
    from nbclient import NotebookClient

    client = NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(folder)}})
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type == "code" and not skip(cell):
                client.execute_cell(cell, index)


def printed(cell) -> str:
    return "".join(output.get("text", "") for output in cell.get("outputs", []))


def self_grading(cell) -> bool:
    """The last cell grades the notebook in a separate process: covered by the self-grading tests."""
    return grade_id(cell).startswith("self_grade")


FIRST_TODO = {"ex01-masking": "mask_tokens", "ex02-whole-word-masking": "whole_word_mask",
              "ex03-tiny-bert": "Embeddings.__init__", "ex04-finetuning": "cls_pool",
              "ex05-metrics": "confusion_matrix", "ex06-pretraining-tasks": "nsp_pairs",
              "ex07-self-test": "loss_counts"}


@pytest.mark.slow
@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_a_blank_release_runs_to_the_end_and_says_what_is_not_done(exercise, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    notebook = release(exercise)
    run_cells(notebook, ROOT / "exercises" / exercise.id, skip=self_grading)  # raises CellExecutionError on error
    for cell in visible_test_cells(notebook):
        text = printed(cell)
        assert "not done yet" in text, f"{grade_id(cell)} printed {text!r}"
        assert "\u2717" not in text and "Traceback" not in text, text
    first = printed(visible_test_cells(notebook)[0])
    assert f"not done yet: implement `{FIRST_TODO[exercise.id]}` above" in first, first

WRONG_MASK_TOKENS = '''
def mask_tokens(input_ids, special_tokens_mask, *, mask_token_id, vocab_size, special_ids, generator,
                select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    # three misconceptions: specials can be selected, every target shows [MASK], labels at every position
    selected = torch.rand(input_ids.shape, generator=generator) < select_prob
    inputs = input_ids.clone()
    inputs[selected] = mask_token_id
    return inputs, input_ids.clone()
'''


@pytest.mark.slow
def test_a_wrong_implementation_shows_every_failing_check_with_its_hint_and_run_all_goes_on(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    exercise = next(e for e in EXERCISES if e.id == "ex01-masking")
    notebook = release(exercise)
    (stub,) = [c for c in notebook.cells if grade_id(c) == "mask_tokens"]
    stub.source = WRONG_MASK_TOKENS
    run_cells(notebook, ROOT / "exercises" / exercise.id, skip=self_grading)  # no cell may stop Run All
    (cell,) = [c for c in notebook.cells if grade_id(c) == "mask_tokens_checks"]
    text = printed(cell)
    failed = [line for line in text.splitlines() if line.startswith("\u2717 ") and "checks failed" not in line]
    assert len(failed) >= 4, text  # every failing check reports, not only the first
    assert text.count("  hint: ") == len(failed), text
    assert "\u2713 input_ids is not modified" in text  # the checks after a failure still ran
    assert f"{len(failed)} of " in text and "Run All goes on" in text, text
    assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
    later = [c for c in notebook.cells if grade_id(c) == "mlm_loss_checks"][0]
    assert "not done yet" in printed(later)  # the next part still ran and reports on its own
