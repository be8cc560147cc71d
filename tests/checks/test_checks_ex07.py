"""Proof of the hidden checks of ex07-self-test: a wrong answer to each question fails exactly that
question's check (and its message explains the option chosen, never names the right one), every accepted
form of a numeric answer passes (int, float, Fraction, numpy, tensor, "20/3", "19,101,696", within the
stated tolerance), `loss_counts`'s misconceptions each fail their check, the release and stubs score 0,
and the points add up to course.yml's."""

from __future__ import annotations

import re

import pytest
from check_proofs import (
    ROOT,
    _load,
    assert_bundle_caught,
    assert_bundles_sound,
    assert_every_check_targeted,
    assert_passes_every_check,
    assert_points_add_up,
    assert_release_scores_zero,
    assert_scores_zero,
    assert_solution_passes_every_check,
    bundle_ids,
    bundle_misconceptions,
    check_outcomes,
    checks_of,
    graded_cells,
    notebook_cells,
    reference_source,
    stubbed,
)

from bertcourse.authoring.proofs import grade_source

CHECKS = "autograder/checks/ex07_self_test.py"
NOTEBOOK = "solutions/ex07-self-test/self_test.ipynb"
RELEASE = "exercises/ex07-self-test/self_test.ipynb"

PRELUDE = """
import math
from fractions import Fraction

import torch
import torch.nn.functional as F

from bertcourse.masking import IGNORE_INDEX, mask_tokens

CLS, SEP, PAD, MASK = 101, 102, 0, 103
SPECIAL = [PAD, 100, CLS, SEP, MASK]
"""



def solution_source() -> str:
    """The solution notebook's own solution cells, after the imports of its set-up cell."""
    return reference_source(NOTEBOOK, PRELUDE)


def module():
    return _load(ROOT / CHECKS)


def mutate(old: str, new: str) -> str:
    base = solution_source()
    assert base.count(old) == 1, (old, base.count(old))
    return base.replace(old, new)


def right_letters() -> dict[int, str]:
    text = solution_source()
    return {int(n): letter for n, letter in re.findall(r'answer_q(\d+) = "([a-d])"', text)}


def question_checks() -> dict[int, str]:
    names = [name for name in checks_of(CHECKS) if name.startswith("test_q")]
    return {int(re.match(r"test_q(\d+)_", name).group(1)): name for name in names}


def failed(source: str) -> set[str]:
    return {name for name, passed in check_outcomes(CHECKS, source).items() if not passed}


# ----------------------------------------------------------------------------- correct work, in other forms

LOOPS = '''
def loss_counts(original, inputs, labels, mask_token_id):
    counts = [0, 0, 0, 0]
    for o_row, i_row, l_row in zip(original.tolist(), inputs.tolist(), labels.tolist()):
        for o, i, label in zip(o_row, i_row, l_row):
            if label == -100:
                continue
            counts[0] += 1
            if i == mask_token_id:
                counts[1] += 1
            elif i == o:
                counts[3] += 1
            else:
                counts[2] += 1
    return counts
'''

TENSORS = '''
def loss_counts(original, inputs, labels, mask_token_id):
    target = labels.ne(IGNORE_INDEX)
    masked = (inputs == mask_token_id) & target
    own = torch.where(target, inputs == original, torch.zeros_like(target))
    return target.sum(), masked.sum(), target.sum() - masked.sum() - own.sum(), own.sum()
'''

FORMS_EXACT = '''
import numpy
answer_n1, answer_n2, answer_n3, answer_n4, answer_n5 = 30, 24.0, "19,101,696", " 20/3 ", numpy.float64(16)
answer_q1, answer_q2, answer_q3, answer_q4, answer_q5, answer_q6, answer_q7, answer_q8 = (
    "D", " b ", "(c)", "a", "b", "D", "c", "A")
answer_q9, answer_q10, answer_q11, answer_q12, answer_q13, answer_q14, answer_q15, answer_q16 = (
    "a", "C", "b", "(d)", "B", "c", "b", "d")
'''

FORMS_APPROXIMATE = '''
from decimal import Decimal
answer_n1 = Fraction(151, 5)          # 30.2: an average from part 1's run, within 2%
answer_n2 = torch.tensor(23.8)
answer_n3 = 19.1e6                    # rounded, within 0.1%
answer_n4 = Decimal("6.6")            # within 2%
answer_n5 = "16.0"
answer_q1, answer_q2, answer_q3, answer_q4, answer_q5, answer_q6, answer_q7, answer_q8 = "dbcabdca"
answer_q9, answer_q10, answer_q11, answer_q12, answer_q13, answer_q14, answer_q15, answer_q16 = "acbdbcbd"
'''

CORRECT = {
    "loops, exact forms": lambda: PRELUDE + LOOPS + FORMS_EXACT,
    "tensors, approximate forms": lambda: PRELUDE + TENSORS + FORMS_APPROXIMATE,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_work_in_every_accepted_form_passes_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name](), name)


@pytest.mark.slow
def test_the_solution_notebook_passes_every_check():
    """The reference answer (the base every misconception edits), graded as the whole solution notebook."""
    assert_solution_passes_every_check(NOTEBOOK, "ex07-self-test")


# ----------------------------------------------------------------------------- loss_counts misconceptions

RETURN = "    return int(in_loss.sum()), int(shows_mask.sum()), int(shows_random.sum()), int(shows_own.sum())"
COUNTS = {"test_in_loss_counts_every_selected_position", "test_mask_and_random_counted_apart_among_loss_positions",
          "test_own_token_counted_among_loss_positions_only"}

WRONG_COUNTS = {
    "only [MASK] inputs in the loss": (
        mutate(RETURN, RETURN.replace("int(in_loss.sum())", "int((inputs == mask_token_id).sum())")),
        "test_in_loss_counts_every_selected_position", "show [MASK]"),
    "only changed inputs in the loss": (
        mutate(RETURN, RETURN.replace("int(in_loss.sum())", "int((inputs != original).sum())")),
        "test_in_loss_counts_every_selected_position", "differs from the original"),
    "every position in the loss": (
        mutate(RETURN, RETURN.replace("int(in_loss.sum())", "original.numel()")),
        "test_in_loss_counts_every_selected_position", "positions in the batch"),
    "[MASK] counted as random": (
        mutate("shows_random = in_loss & ~shows_mask & ~shows_own", "shows_random = in_loss & (inputs != original)"),
        "test_mask_and_random_counted_apart_among_loss_positions", "[MASK] positions too"),
    "kept targets left out": (
        mutate(RETURN, RETURN.replace("int(shows_own.sum())", "0")),
        "test_own_token_counted_among_loss_positions_only", "kept targets are in the loss"),
    "own token counted everywhere": (
        mutate("shows_own = in_loss & (inputs == original)\n", "shows_own = inputs == original\n"),
        "test_own_token_counted_among_loss_positions_only", "outside the loss"),
}


# ----------------------------------------------------------------------------- numbers

WRONG_NUMBERS = {
    "N1: only the [MASK] targets": ("answer_n1 = 0.15 * 200", "answer_n1 = 24", "test_n1_positions_in_the_loss",
                                    "only the targets that show [MASK]"),
    "N2: every target shows [MASK]": ("answer_n2 = 0.8 * 0.15 * 200", "answer_n2 = 30", "test_n2_targets_showing_mask",
                                      "not every selected position shows [MASK]"),
    "N3: the projection forgotten": ("answer_n3 = 30_000 * 768 - (30_000 * 128 + 128 * 768)",
                                     "answer_n3 = 30_000 * (768 - 128)", "test_n3_albert_embedding_saving",
                                     "projection has parameters too"),
    "N4: a loss at the replaced positions only": ("answer_n4 = Fraction(200, 30)", "answer_n4 = 1",
                                                  "test_n4_electra_positions_ratio", "every position"),
    "N5: linear cost": ("answer_n5 = (512 / 128) ** 2", "answer_n5 = 512 / 128", "test_n5_attention_scores_ratio",
                        "square of the length"),
    "N3: outside the tolerance": ("answer_n3 = 30_000 * 768 - (30_000 * 128 + 128 * 768)", "answer_n3 = 19_000_000",
                                  "test_n3_albert_embedding_saving", "not within 0.1%"),
    "N1: not a number": ("answer_n1 = 0.15 * 200", 'answer_n1 = "thirty"', "test_n1_positions_in_the_loss",
                         "cannot be read as a number"),
}


def wrong_letter(number: int) -> str:
    """The solution with question `number` answered by its first wrong letter."""
    right = right_letters()[number]
    wrong = next(letter for letter in "abcd" if letter != right)
    return mutate(f'answer_q{number} = "{right}"', f'answer_q{number} = "{wrong}"')


def exactly(check: str, named: str = "") -> tuple[set[str], frozenset[str], dict[str, str]]:
    """Fails `check` (its message holding `named`) and no other check."""
    return {check}, frozenset(set(checks_of(CHECKS)) - {check}), {check: named} if named else {}


# misconception -> (source, the check it fails, every other check (it passes them), {check: words of the message})
WRONG = {name: (source, *exactly(check, named)) for name, (source, check, named) in WRONG_COUNTS.items()}
WRONG |= {name: (mutate(old, new), *exactly(check, named)) for name, (old, new, check, named) in WRONG_NUMBERS.items()}
WRONG |= {f"Q{number}: a wrong letter": (wrong_letter(number), *exactly(check))
          for number, check in question_checks().items()}
BUNDLES = bundle_misconceptions(CHECKS, WRONG, solution_source())


@pytest.mark.slow
@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_each_misconception_fails_exactly_its_check_and_is_named(bundle):
    """A counting mistake, a wrong number or a wrong letter fails its own check, named in the message, and no
    other; those that cannot move each other's checks share a grading (check_proofs.bundle_misconceptions)."""
    assert_bundle_caught(CHECKS, WRONG, solution_source(), bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, WRONG, solution_source(), BUNDLES)


# ----------------------------------------------------------------------------- multiple choice


def every_question_answered(pick: int) -> str:
    """The solution with every question answered by its `pick`-th wrong letter."""
    source = solution_source()
    for number, right in right_letters().items():
        wrong = [letter for letter in "abcd" if letter != right][pick]
        source = source.replace(f'answer_q{number} = "{right}"', f'answer_q{number} = "{wrong}"')
    return source


@pytest.mark.slow
@pytest.mark.parametrize("pick", range(3))
def test_each_wrong_option_gets_its_own_explanation(pick):
    result = grade_source(ROOT / CHECKS, every_question_answered(pick))
    assert not result.error, result.error
    for number, right in right_letters().items():
        wrong = [letter for letter in "abcd" if letter != right][pick]
        check = result.check(question_checks()[number])
        assert not check.passed
        assert check.message.startswith(f"({wrong}) "), check.message
        assert len(check.message) > 40, check.message  # an explanation, not only "wrong"
    assert {c.name for c in result.checks if not c.passed} == set(question_checks().values())


def option_texts() -> dict[int, dict[str, str]]:
    """{question: {letter: option text}} from the solution's markdown."""
    found: dict[int, dict[str, str]] = {}
    for cell in notebook_cells(NOTEBOOK):
        text = "".join(cell["source"])
        for match in re.finditer(r"\*\*Q(\d+)\.\*\*(.*?)(?=\n\n|\Z)", text, re.DOTALL):
            options = re.findall(r"^- \(([a-d])\) (.*?)(?=\n- \(|\Z)", match.group(2), re.DOTALL | re.MULTILINE)
            found[int(match.group(1))] = {letter: " ".join(body.split()) for letter, body in options}
    return found


def test_explanations_cover_every_wrong_option_and_never_point_at_the_right_one():
    source = (ROOT / CHECKS).read_text()
    rights, texts = right_letters(), option_texts()
    assert sorted(texts) == list(range(1, 17))
    for number, name in question_checks().items():
        body = source[source.index(f"def {name}("):].split("\n\n\n")[0]
        explained = set(re.findall(r'^\s+"([a-d])": ', body, re.MULTILINE))
        assert explained == set("abcd") - {rights[number]}, (number, explained)
        assert f"({rights[number]})" not in body, f"Q{number}: an explanation names the right option"
        feedback = checks_of(CHECKS)[name]["feedback"]
        assert feedback.startswith(f"Q{number}: "), feedback
        assert texts[number][rights[number]][:30] not in feedback and f"({rights[number]})" not in feedback


def test_stated_tolerances_are_the_checks_tolerances():
    text = "\n".join("".join(c["source"]) for c in notebook_cells(NOTEBOOK) if c["cell_type"] == "markdown")
    found = re.findall(r"\*\*N(\d)\.\*\*.*?\(within ([0-9.]+)%\)", text, re.DOTALL)
    stated = {int(n): float(p) / 100 for n, p in found}
    source = (ROOT / CHECKS).read_text()
    calls = re.findall(r'assert_number\(student, "answer_n(\d)", [^,]+, ([0-9.]+)', source)
    used = {int(n): float(t) for n, t in calls}
    assert stated == used and sorted(stated) == [1, 2, 3, 4, 5], (stated, used)


# ----------------------------------------------------------------------------- bookkeeping, stubs, release


def test_every_check_is_the_target_of_a_proof():
    cells = set(graded_cells(NOTEBOOK))
    wrong = {name: (source, {check}) for name, (source, check, _) in WRONG_COUNTS.items()}
    wrong |= {name: ("", {check}) for name, (_, _, check, _) in WRONG_NUMBERS.items()}
    wrong |= {f"Q{n}": ("", {check}) for n, check in question_checks().items()}
    assert_every_check_targeted(CHECKS, wrong, cells)


def test_check_points_add_up_to_the_cells_and_to_course_yml():
    assert_points_add_up(CHECKS, NOTEBOOK, "ex07-self-test")


def test_the_checks_module_loads_its_reference_batches():
    batches = module().BATCHES
    for original, inputs, labels in batches:  # the data the counting checks compare on holds every case
        in_loss, mask, random, own = module().reference_counts(original, inputs, labels)
        assert in_loss == mask + random + own and min(mask, random, own) > 0
        assert int((inputs == original).sum()) > own  # unselected positions show their own token too


@pytest.mark.slow
@pytest.mark.parametrize("stub", ["return"])  # the raise stub is the release (test below)
def test_a_stub_notebook_scores_zero(stub):
    source = stubbed(solution_source(), stub)
    assert "### BEGIN SOLUTION" not in source
    assert_scores_zero(CHECKS, source, f"a {stub} stub")


@pytest.mark.slow
def test_the_release_scores_zero():
    assert_release_scores_zero(RELEASE, "ex07-self-test")
