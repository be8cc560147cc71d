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
              "ex07-self-test": "loss_counts", "ex08-comparing-models": "sentence_losses",
              "ex09-tagging-and-qa": "align_labels"}


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


# ----------------------------------------------------------------------------- keys and examples (issue 24)

EXAMPLE = re.compile(r"(?:e\.g\.|such as|for example)([^;]{0,60}?)(?:;|\.\s|$)", re.DOTALL)
NUMBER = re.compile(r"(?<![\w.])\d+(?:[,_]\d{3})*(?:\.\d+)?(?:/\d+)?(?![\w])")


def example_values(text: str) -> list[tuple[str, float]]:
    """Every number that `text` gives as an example (after "e.g.", "such as", "for example"), read the way the
    checks read a numeric answer ("1,234,567", "7/4")."""
    from fractions import Fraction

    found = []
    for window in EXAMPLE.findall(text):
        for literal in NUMBER.findall(window):
            found.append((literal, float(Fraction(literal.replace(",", "").replace("_", "")))))
    return found


def numeric_answers(notebook) -> dict[str, float]:
    """{answer_nK: value} of a solution notebook, each right-hand side evaluated as the solution writes it."""
    from fractions import Fraction

    text = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    return {name: float(eval(expression, {"Fraction": Fraction}))  # the course's own solution cells
            for name, expression in re.findall(r"^\s+(answer_n\d+) = (?!answer_)(.+)$", text, re.MULTILINE)}


def check_messages(exercise) -> str:
    """Every string literal of the exercise's hidden checks and of `_common.py`: what a feedback page can show."""
    texts = []
    for path in (ROOT / exercise.checks, ROOT / "autograder" / "checks" / "_common.py"):
        texts += [node.value for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return "\n".join(texts)


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_no_example_value_is_the_answer_to_a_numeric_question(exercise):
    """A format example ("a string such as ...", "e.g. 12.5") must not be the answer to any question of the
    exercise: the rendered release and the check messages are scanned (issue 24: "20/3" was N4's answer)."""
    answers = numeric_answers(solution(exercise))
    text = "\n".join(c.source for c in release(exercise).cells) + "\n" + check_messages(exercise)
    examples = example_values(text)
    leaks = [(literal, name) for literal, value in examples for name, answer in answers.items()
             if abs(value - answer) <= 0.02 * abs(answer)]
    assert not leaks, f"example values that answer a question: {leaks}"
    if exercise.id == "ex07-self-test":  # the scan sees the format examples it is there for
        assert len(answers) == 5 and {"7/4", "1,234,567", "12.5"} <= {literal for literal, _ in examples}


def test_example_scan_catches_an_answer_given_as_an_example():
    assert ("20/3", 20 / 3) in example_values('a string such as "20/3" or "19,101,696"; all read the same')
    assert ("30", 30.0) in example_values('(write e.g. 30, 6.67 or "20/3")')
    assert not example_values("answer_q1 = 3 for example_q2")  # names and code do not count


def test_no_two_exercises_share_an_answer_key():
    """Each exercise's letters, in question order, differ from every other's (ex01 and ex03 both had b, c, a, d)."""
    keys = {}
    for exercise in EXERCISES:
        right = answers(solution(exercise))
        key = "".join(right[n] for n in sorted(right))
        if key:
            assert key not in keys, f"{exercise.id} has the answer key of {keys.get(key)}: {key}"
            keys[key] = exercise.id


def test_the_embedding_sum_is_asked_once():
    """Why BERT may add its three embeddings is one idea: one question in the course asks it (ex03 Q2)."""
    asking = [(exercise.id, number) for exercise in EXERCISES
              for number, options in questions(solution(exercise)).items()
              if any("concatenat" in text for text in options.values())]
    assert asking == [("ex03-tiny-bert", 2)], asking


# ----------------------------------------------------------------------------- hints that teach (issue 24)

# Exercises whose hints were rewritten to name the property and the misconception, never the line: every exercise
# (a new one joins once its hints are written that way).
HINTS_WITHOUT_CODE = {"ex01-masking", "ex02-whole-word-masking", "ex03-tiny-bert", "ex04-finetuning", "ex05-metrics",
                      "ex06-pretraining-tasks", "ex07-self-test", "ex08-comparing-models", "ex09-tagging-and-qa"}
# Called names that are code, not English, when they appear as a bare word in a hint.
CODE_WORDS = {"argsort", "argmax", "cumsum", "randint", "randperm", "unsqueeze", "nonzero", "isin", "bincount",
              "multinomial", "bernoulli", "quantile", "logsumexp", "nanmean"}
SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.DOTALL)


def solution_code(notebook) -> str:
    """The solution regions of a notebook, dedented so that each parses on its own."""
    import textwrap

    return "\n".join(textwrap.dedent(region) for c in notebook.cells if c.cell_type == "code"
                     for region in SOLUTION_REGION.findall(c.source))


def code_fragments(notebook) -> set[str]:
    """Regexes for the code of the reference solution: its dotted calls (`torch.where`), method calls
    (`.gather(`), calls of names (`argsort(`), identifiers that are code (`scatter_add_`, `cumsum`), attribute
    assignments (`self.encoder =`) and return lines (`return loss.item()`)."""
    fragments = set()
    for node in ast.walk(ast.parse(solution_code(notebook))):
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Attribute):
                name = function.attr
                fragments.add(rf"\.\s*{re.escape(name)}\s*\(")
                if isinstance(function.value, ast.Name):
                    fragments.add(re.escape(f"{function.value.id}.{name}"))
            elif isinstance(function, ast.Name):
                name = function.id
                fragments.add(rf"(?<![\w.]){re.escape(name)}\(")
            else:
                continue
            if "_" in name.strip("_") or name in CODE_WORDS:
                fragments.add(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    fragments.add(rf"{re.escape(target.value.id)}\.{re.escape(target.attr)}\s*=(?!=)")
        elif isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            returned = ", ".join(map(ast.unparse, value.elts)) if isinstance(value, ast.Tuple) else ast.unparse(value)
            fragments.add(re.escape(f"return {returned}"))
    return fragments


def hint_texts(exercise) -> list[tuple[str, str]]:
    """(where, text) of every hint a student can read: the `hint=` of each visible check, the "Hint" paragraphs
    of the markdown, and the feedback of each hidden check."""
    found = []
    for cell in solution(exercise).cells:
        if cell.cell_type == "markdown":
            found += [(grade_id(cell), paragraph) for paragraph in cell.source.split("\n\n")
                      if re.search(r"\bHints?\b", paragraph)]
        elif cell in visible_test_cells(solution(exercise)) or cell.metadata.get("nbgrader", {}).get("grade"):
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.keyword) and node.arg == "hint":
                    found.append((grade_id(cell), ast.unparse(node.value)))
    for name, mark in checks_of_exercise(exercise).items():
        found.append((name, mark["feedback"]))
    return found


def checks_of_exercise(exercise) -> dict[str, dict]:
    from check_marks import checks_of

    return checks_of(exercise.checks)


@pytest.mark.parametrize("exercise", [e for e in EXERCISES if e.id in HINTS_WITHOUT_CODE],
                         ids=[e.id for e in EXERCISES if e.id in HINTS_WITHOUT_CODE])
def test_no_hint_writes_the_code_of_the_solution(exercise):
    """A hint names the property that failed and the misconception behind it, and points at the lesson; it does
    not write the line (issue 24): no hint, markdown or visible, and no hidden check's feedback, holds a call,
    an assignment or a return of the reference solution."""
    fragments = code_fragments(solution(exercise))
    leaks = [(where, pattern, text[:80]) for where, text in hint_texts(exercise) for pattern in fragments
             if re.search(pattern, text)]
    assert not leaks, "hints that write the solution's code:\n" + "\n".join(map(str, leaks))


def test_the_code_scan_sees_the_code_that_hints_used_to_write():
    """The scan is not vacuous: the hints the course had before issue 24 all trip it."""
    ex01, ex02, ex03, ex04, ex05, ex06 = (
        next(e for e in EXERCISES if e.id == name)
        for name in ("ex01-masking", "ex02-whole-word-masking", "ex03-tiny-bert", "ex04-finetuning", "ex05-metrics",
                     "ex06-pretraining-tasks"))
    old = {
        ex01: ["labels = torch.where(selected, input_ids, -100): the original id",
               "select with probability select_prob: torch.rand(shape, generator=generator) < select_prob",
               "`regular_ids[torch.randint(len(regular_ids), shape, generator=...)]` draws uniformly"],
        ex02: ["`torch.zeros(batch, n_words).scatter_add_(1, word_ids.clamp(min=0), (word_ids >= 0).long())`",
               "A random order of words: `argsort` of uniform scores", "is a `cumsum` in that order",
               "`tensor.gather(1, word_ids.clamp(min=0))` spreads a per-word decision"],
        ex04: ["self.encoder = encoder; self.dropout = nn.Dropout(dropout)", "return loss.item(): the loss computed",
               "call model.train() first", "optimizer.zero_grad() before the backward pass"],
        ex03: ["apply self.norm to the sum of the three embeddings, then self.dropout",
               "masked_fill a zero tensor with torch.finfo(torch.float32).min where attention_mask == 0",
               "assign the Parameter itself: self.decoder.weight = token_embedding.weight",
               "F.cross_entropy(logits, labels[labels != -100]) on the selected rows"],
        ex05: ["return 0.0 when the denominator is 0", "overlap = Counter(pred) & Counter(ref): 'cat' overlaps once",
               "draw from your own generator made from `seed`, e.g. rng = random.Random(seed)"],
        ex06: ["for each document, for i in range(len(doc) - 1): one pair whose first sentence is doc[i]",
               "num_noise = round(length * noise_density)",
               "corrupted = input_ids.clone(); corrupted[masked] = one token per row of logits",
               "sample from torch.softmax(logits, dim=-1) with torch.multinomial(..., generator=generator)"],
    }
    for exercise, hints in old.items():
        fragments = code_fragments(solution(exercise))
        for hint in hints:
            assert any(re.search(pattern, hint) for pattern in fragments), (exercise.id, hint)
