"""The grading engine against a toy exercise: correct and wrong work, broken notebooks, cheating.

Everything runs for real: a zygote and sandboxed workers, a pytest judge in its own process. One
Grader serves the module (its helper processes stay warm), so most tests cost well under a second.
The toy exercise (tests/fixtures/grading) has `add(a, b)` (2 points), a stochastic
`sample_mask(shape, p, generator)` (2 points) and a concept answer (1 point); its limits are small
(3 s per cell/check, 1500 MB) so that hangs and hogs are caught quickly.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from pathlib import Path

import pytest

from bertcourse.course import Exercise, load_course
from bertcourse.grading import Grader, GradingError, NotebookResult, infer_exercise
from bertcourse.grading.sandbox import landlock_abi
from bertcourse.grading.steps import canary_problem

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "grading"
SOURCE = FIXTURE / "solutions" / "toy" / "toy.ipynb"
CHECKS = FIXTURE / "autograder" / "checks" / "toy.py"
SECRET = "hidden-value-7c1f3e"  # defined only in the hidden check module

STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
WRONG_ADD = "def add(a, b):\n    return a - b"
CORRECT_ADD = "def add(a, b):\n    return a + b"
CORRECT_MASK = "def sample_mask(shape, p, generator):\n    return torch.rand(shape, generator=generator) < p"
# A different correct implementation: other random draws, same distribution.
OTHER_MASK = ("def sample_mask(shape, p, generator):\n"
              "    return torch.bernoulli(torch.full(shape, p), generator=generator).bool()")


@pytest.fixture(scope="module")
def course():
    return load_course(FIXTURE)


@pytest.fixture(scope="module")
def grader(course):
    with Grader(course) as grader:
        yield grader


@pytest.fixture(scope="module")
def hashes():
    """Every notebook graded in this module, with its hash before grading (checked at the end)."""
    seen: dict[Path, str] = {}
    yield seen
    for path, digest in seen.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{path} was modified by grading"


def notebook(tmp_path: Path, replace: dict[str, str] | None = None, drop: tuple[str, ...] = (),
             append: list[str] | None = None, name: str = "toy.ipynb") -> Path:
    """The toy notebook with some cells' sources replaced (by grade_id), some dropped, cells appended."""
    nb = json.loads(SOURCE.read_text())
    cells = []
    for cell in nb["cells"]:
        grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        if grade_id in drop:
            continue
        if replace and grade_id in replace:
            cell["source"] = replace[grade_id]
        cells.append(cell)
    for source in append or []:
        cells.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                      "source": source})
    nb["cells"] = cells
    path = tmp_path / name
    path.write_text(json.dumps(nb))
    return path


def grade(grader: Grader, hashes: dict, path: Path, exercise: str | Exercise = "toy") -> NotebookResult:
    hashes[path] = hashlib.sha256(path.read_bytes()).hexdigest()
    if FIXTURE not in path.parents:
        path.chmod(0o444)  # graded from a read-only file, as the batch grades submissions
    result = grader.grade(path, exercise)
    json.dumps(result.to_dict())  # always serialisable
    return result


def stub_notebook(tmp_path: Path, **kwargs) -> Path:
    return notebook(tmp_path, {"add": STUB, "mask": STUB, "concept": STUB}, **kwargs)


def kinds(result: NotebookResult) -> set[str]:
    return {note.kind for note in result.notes}


# ----------------------------------------------------------------------------- correct and wrong work


def test_correct_solution_scores_full_marks(grader, hashes):
    result = grade(grader, hashes, SOURCE)
    assert result.error is None and result.notes == []
    assert (result.score, result.max_score) == (5.0, 5.0)
    assert {k: (p.score, p.max_score) for k, p in result.parts.items()} == {
        "add_checks": (2.0, 2.0), "mask_checks": (2.0, 2.0), "concept_checks": (1.0, 1.0)}
    assert [c.status for c in result.cells] == ["ok"] * 4  # setup + 3 solution cells; test cells skipped
    assert NotebookResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_another_correct_implementation_passes(grader, hashes, tmp_path):
    assert grade(grader, hashes, notebook(tmp_path, {"mask": OTHER_MASK})).score == 5.0


def test_wrong_implementations_fail_their_checks_with_feedback(grader, hashes, tmp_path):
    ignores_generator = "def sample_mask(shape, p, generator):\n    return torch.rand(shape) < p"
    result = grade(grader, hashes, notebook(tmp_path, {"add": WRONG_ADD, "mask": ignores_generator,
                                                       "concept": 'answer_q1 = "a"'}))
    assert result.failed_checks() == ["test_add_numbers", "test_add_tensors", "test_mask_uses_generator",
                                      "test_concept"]
    assert result.score == 1.0 and result.parts["add_checks"].score == 0.0
    failed = result.check("test_add_numbers")
    assert failed.feedback == "add(a, b) should return the sum of its inputs" and failed.points == 0.0
    assert SECRET not in json.dumps(result.to_dict())


def test_student_exceptions_and_missing_names_are_reported(grader, hashes, tmp_path):
    raises = "def add(a, b):\n    raise ValueError('not yet')"
    result = grade(grader, hashes, notebook(tmp_path, {"add": raises, "mask": STUB}, drop=("concept",)))
    assert result.check("test_add_numbers").message == "your code raised ValueError: not yet"
    assert result.check("test_mask_rate").message == "`sample_mask` is not defined"
    assert result.check("test_concept").message == "`answer_q1` is not defined"
    assert "cell-error" in kinds(result) and "missing-cell" in kinds(result)
    assert result.score == 0.0


def test_stub_notebook_scores_zero(grader, hashes, tmp_path):
    result = grade(grader, hashes, stub_notebook(tmp_path))
    assert result.error is None and result.score == 0.0 and result.max_score == 5.0


def test_grading_is_deterministic(grader, hashes, tmp_path):
    # Global-RNG use: passes or fails only by the engine's seeding, which must be the same every time.
    global_rng = "def sample_mask(shape, p, generator):\n    return torch.rand(shape) < p"
    path = notebook(tmp_path, {"mask": global_rng, "add": "import random\ndef add(a, b):\n"
                                                          "    return a + b + (random.random() < 0.5) * 0"})
    first, second = grade(grader, hashes, path), grade(grader, hashes, path)
    strip = lambda r: [(c.name, c.passed, c.message) for c in r.checks]  # noqa: E731
    assert strip(first) == strip(second) and first.score == second.score


def test_warnings_are_not_failures(grader, hashes, tmp_path):
    noisy_add = ("import sys, warnings\nwarnings.warn('deprecated thing', DeprecationWarning)\n"
                 "print('to stderr', file=sys.stderr)\n"
                 "def add(a, b):\n    warnings.warn('careful', UserWarning)\n"
                 "    print('stderr chatter', file=sys.stderr)\n    return a + b")
    result = grade(grader, hashes, notebook(tmp_path, {"add": noisy_add}))
    assert result.score == 5.0 and result.notes == []


def test_magics_in_student_cells_work(grader, hashes, tmp_path):
    result = grade(grader, hashes, notebook(tmp_path, {"setup": "%load_ext autoreload\n!echo hi\nimport torch"}))
    assert result.score == 5.0 and result.cells[0].status == "ok"


def test_testing_helper_runs_a_check_module_against_sources(grader):
    from bertcourse.authoring.proofs import grade_source, run_check_module

    correct = "import torch\n" + CORRECT_ADD + "\n" + CORRECT_MASK + '\nanswer_q1 = "b"\n'
    assert set(run_check_module(CHECKS, correct, grader=grader).values()) == {True}
    wrong = grade_source(CHECKS, {"imports": "import torch", "add": WRONG_ADD, "mask": OTHER_MASK}, grader=grader)
    assert wrong.failed_checks() == ["test_add_numbers", "test_add_tensors", "test_concept"]


def test_only_the_named_checks_run_and_count(grader, hashes, tmp_path):
    # `add` counts its calls; `sample_mask` is right only while add has been called exactly twice, which
    # test_add_numbers does and test_add_tensors (between it and test_mask_rate) would undo by running.
    counting_add = "CALLS = 0\ndef add(a, b):\n    global CALLS\n    CALLS += 1\n    return a + b"
    watching_mask = ("def sample_mask(shape, p, generator):\n"
                     "    return (torch.rand(shape, generator=generator) < p) & (CALLS == 2)")
    path = notebook(tmp_path, {"add": counting_add, "mask": watching_mask})
    picked = grader.grade(path, "toy", only={"test_add_numbers", "test_mask_rate"})
    assert picked.error is None
    assert [(c.name, c.passed) for c in picked.checks] == [("test_add_numbers", True), ("test_mask_rate", True)]
    assert (picked.score, picked.max_score) == (2.0, 2.0)
    assert "test_mask_rate" in grade(grader, hashes, path).failed_checks()  # all checks: add_tensors ran first
    with pytest.raises(GradingError, match="no checks named"):
        grader.grade(path, "toy", only={"test_no_such_check"})


def test_course_side_problems_raise(grader, tmp_path):
    from bertcourse.authoring.proofs import grade_source
    from bertcourse.errors import BertcourseError
    from bertcourse.grading import GradingError

    broken = tmp_path / "broken_checks.py"
    broken.write_text("import pytest\nimport no_such_module_anywhere\n")
    with pytest.raises(GradingError, match="no_such_module_anywhere"):
        grade_source(broken, CORRECT_ADD, grader=grader)
    unmarked = tmp_path / "unmarked_checks.py"
    unmarked.write_text("def test_forgot_the_marker(student):\n    assert student.call('add', 1, 1) == 2\n")
    with pytest.raises(GradingError, match="no @pytest.mark.check"):
        grade_source(unmarked, CORRECT_ADD, grader=grader)
    with pytest.raises(BertcourseError, match="unknown exercise"):
        grader.grade(SOURCE, "no-such-exercise")
    assert grader.grade(SOURCE, "toy").score == 5.0  # the judge is still in step afterwards


def test_checks_share_helpers_that_a_warm_grader_reloads_when_they_change(grader, tmp_path):
    """Every check module may import `_common.py` from its folder; editing the helpers alone (not the check
    module) changes the next grade of the same warm Grader, as editing the checks would."""
    from bertcourse.authoring.proofs import run_check_module

    folder = tmp_path / "checks"
    folder.mkdir()
    (folder / "_common.py").write_text("EXPECTED = 3\n")
    module = folder / "shared_checks.py"
    module.write_text("import pytest\nfrom _common import EXPECTED\n\n\n"
                      "@pytest.mark.check(cell='add_checks', points=1.0, feedback='add must add')\n"
                      "def test_add(student):\n    assert student.call('add', 1, 2) == EXPECTED\n")
    assert run_check_module(module, CORRECT_ADD, grader=grader) == {"test_add": True}
    stamp = module.stat().st_mtime_ns
    (folder / "_common.py").write_text("EXPECTED = 4\n")
    os.utime(folder / "_common.py", ns=(stamp + 10**9, stamp + 10**9))  # later, even on a coarse clock
    assert run_check_module(module, CORRECT_ADD, grader=grader) == {"test_add": False}


# ----------------------------------------------------------------------------- broken notebooks


@pytest.mark.parametrize("content, reason", [
    (b"this is not json", "not valid JSON"),
    (b"[1, 2, 3]", "without a 'cells' list"),
    (b'{"nbformat": 3, "cells": []}', "not a version 4 notebook"),
    (b'{"nbformat": 4, "cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    (b'{"nbformat": 4, "cells": [{"cell_type": "code", "source": 7}]}', "source that is not text"),
])
def test_invalid_files_get_a_clear_reason_and_zero(grader, hashes, tmp_path, content, reason):
    path = tmp_path / "broken.ipynb"
    path.write_bytes(content)
    result = grade(grader, hashes, path)
    assert reason in result.error and result.score == 0.0 and result.max_score == 5.0
    assert all(not c.passed and c.message.startswith("not graded:") for c in result.checks)


def test_notebook_of_another_exercise_is_refused(grader, hashes, tmp_path):
    other = FIXTURE / "solutions" / "other" / "other.ipynb"
    result = grade(grader, hashes, other)
    assert "belongs to exercise 'other'" in result.error and result.score == 0.0
    assert infer_exercise(other, grader.course) == "other" and infer_exercise(SOURCE, grader.course) == "toy"


def test_duplicated_and_reordered_cells(grader, hashes, tmp_path):
    nb = json.loads(SOURCE.read_text())
    cells = nb["cells"]
    wrong_copy = copy.deepcopy(cells[1])
    wrong_copy["source"] = WRONG_ADD
    concept = cells.pop(5)
    nb["cells"] = [concept, *cells[:2], wrong_copy, *cells[2:]]  # concept first; a second `add` cell, wrong
    path = tmp_path / "shuffled.ipynb"
    path.write_text(json.dumps(nb))
    result = grade(grader, hashes, path)
    assert {"duplicate-cell", "reordered-cells"} <= kinds(result)
    assert result.parts["add_checks"].score == 0.0  # the later (wrong) definition wins, as in Jupyter
    assert result.parts["concept_checks"].score == 1.0 and result.parts["mask_checks"].score == 2.0


def test_notebook_without_nbgrader_metadata_runs_every_cell(grader, hashes, tmp_path):
    nb = json.loads(SOURCE.read_text())
    for cell in nb["cells"]:
        cell["metadata"] = {}
    path = tmp_path / "plain.ipynb"
    path.write_text(json.dumps(nb))
    result = grade(grader, hashes, path)
    assert result.score == 5.0 and kinds(result) == {"no-metadata"}
    assert len(result.cells) == 7  # the visible test cells ran too, as plain student code


@pytest.mark.slow
def test_notebook_time_limit_stops_the_remaining_checks(grader, hashes, tmp_path):
    """time_limit_s bounds running the cells, restarts included: a slow notebook whose worker every
    check kills runs out of it, and then nothing more is started."""
    slow = "import os, time\ntime.sleep(2)\ndef add(a, b):\n    os._exit(1)"
    hurried = dataclasses.replace(grader.exercise("toy"), time_limit_s=5, check_time_limit_s=3)
    result = grade(grader, hashes, notebook(tmp_path, {"add": slow}), hurried)
    assert result.check("test_add_numbers").message.startswith("the Python process running your notebook crashed")
    stopped = "grading stopped: the notebook used up its time limit of 5 s"
    assert [c.message for c in result.checks[2:]] == [stopped] * 3
    assert result.error is None and result.score == 0.0


def test_infinite_loop_in_a_cell_times_out_and_the_rest_is_graded(grader, hashes, tmp_path):
    result = grade(grader, hashes, notebook(tmp_path, append=["while True:\n    pass"]))
    assert result.score == 5.0 and "cell-timeout" in kinds(result)
    assert result.cells[-1].status == "timeout"


@pytest.mark.slow
def test_loop_that_swallows_the_alarm_is_killed_and_the_notebook_rerun(grader, hashes, tmp_path):
    stubborn = ("import time\nwhile True:\n    try:\n        time.sleep(10)\n    except BaseException:\n"
                "        pass")
    result = grade(grader, hashes, notebook(tmp_path, append=[stubborn, "late = 1"]))
    assert result.score == 5.0 and "cell-timeout" in kinds(result)
    assert [c.status for c in result.cells[-2:]] == ["timeout", "ok"]


@pytest.mark.parametrize("crash", [
    "import os\nos._exit(0)",
    "import ctypes\nctypes.string_at(0)",  # a segfault
    "import sys\nsys.exit(0)",
])
def test_crash_in_a_cell_is_recorded_and_the_rest_is_graded(grader, hashes, tmp_path, crash):
    result = grade(grader, hashes, notebook(tmp_path, append=[crash]))
    assert result.score == 5.0
    assert result.cells[-1].status in ("crashed", "error")  # sys.exit is caught by IPython: an error


# Page faults are slow on a busy 2-core machine: memory tests get more time and a lower limit.
def roomy(grader):
    return dataclasses.replace(grader.exercise("toy"), memory_limit_mb=1000, check_time_limit_s=30)


HOG = "for _ in range(10):\n    chunks.append(torch.ones(100_000_000))"


def test_memory_hog_in_a_cell(grader, hashes, tmp_path):
    result = grade(grader, hashes, notebook(tmp_path, append=["import torch\nchunks = []\n" + HOG]), roomy(grader))
    assert result.score == 5.0 and "cell-memory" in kinds(result)
    assert "more than 1000 MB" in result.cells[-1].error


def test_failures_inside_checks_fail_only_that_check(grader, hashes, tmp_path):
    result = grade(grader, hashes, notebook(tmp_path, {
        "add": "import os\ndef add(a, b):\n    if isinstance(a, int):\n        os._exit(3)\n    return a + b",
        "mask": ("import torch\ndef sample_mask(shape, p, generator):\n    if shape == (40, 40):\n"
                 "        while True:\n            pass\n    return torch.rand(shape, generator=generator) < p")}))
    assert result.check("test_add_numbers").message.startswith("the Python process running your notebook crashed")
    assert result.check("test_mask_uses_generator").message == "your code did not finish within 3 s"
    assert result.passed_checks() == ["test_add_tensors", "test_mask_rate", "test_concept"]
    assert result.score == 3.0


def test_memory_hog_inside_a_check(grader, hashes, tmp_path):
    hog = ("import torch\nchunks = []\ndef add(a, b):\n    if isinstance(a, torch.Tensor):\n"
           + "\n".join("        " + line for line in HOG.splitlines()) + "\n    return a + b")
    result = grade(grader, hashes, notebook(tmp_path, {"add": hog}), roomy(grader))
    assert result.check("test_add_tensors").message == "your code used more than 1000 MB of memory"
    assert result.score == 4.0


def test_huge_output_is_capped(grader, hashes, tmp_path):
    loud = ("import os\nfor i in range(200_000):\n    print('x' * 100)\n"
            "os.write(1, b'y' * 40_000_000)")
    result = grade(grader, hashes, notebook(tmp_path, append=[loud]))
    assert result.score == 5.0
    assert len(result.cells[-1].output) < 3000 and len(json.dumps(result.to_dict())) < 50_000


# ----------------------------------------------------------------------------- cheating


CHEATS = {
    "patch torch.equal and Tensor.__eq__": (
        "import torch\ntorch.equal = lambda *a: True\ntorch.Tensor.__eq__ = lambda *a: True\n"
        "torch.Tensor.__bool__ = lambda self: True"),
    "patch builtins": (
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.abs = lambda x: 0\n"
        "builtins.AssertionError = type('Nope', (Exception,), {})"),
    "input transformer that blanks later cells": (
        "get_ipython().input_transformers_cleanup.append(lambda lines: [])"),
    "fake results files": (
        "import json, os\nfake = {'score': 5, 'max_score': 5, 'passed': True}\n"
        "for folder in ['.', os.environ.get('HOME', '.'), '/tmp', os.path.dirname(__file__) "
        "if '__file__' in dir() else '.']:\n"
        "    try:\n        open(os.path.join(folder, 'results.json'), 'w').write(json.dumps(fake))\n"
        "    except OSError:\n        pass"),
    "exit at the end": "import os\nos._exit(0)",
    "tensor subclass with a permissive __eq__": (
        "import torch\nclass Always(torch.Tensor):\n    def __eq__(self, other):\n        return True\n"
        "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        if func is torch.equal:\n            return True\n"
        "        return super().__torch_function__(func, types, args, kwargs or {})\n"
        "def add(a, b):\n    return torch.zeros(4).as_subclass(Always) if isinstance(a, torch.Tensor) else Always()\n"
        "class _Eq(int):\n    def __eq__(self, other):\n        return True\n"
        "answer_q1 = type('S', (str,), {'__eq__': lambda s, o: True})('z')"),
}


@pytest.mark.parametrize("cheat", list(CHEATS))
def test_cheating_scores_no_more_than_an_empty_submission(grader, hashes, tmp_path, cheat):
    empty = grade(grader, hashes, stub_notebook(tmp_path, name="empty.ipynb")).score
    cheating = grade(grader, hashes, stub_notebook(tmp_path, append=[CHEATS[cheat]]))
    assert cheating.error is None and cheating.score <= empty == 0.0
    assert not (tmp_path / "results.json").exists()


def test_deleting_the_test_cells_does_not_help(grader, hashes, tmp_path):
    path = stub_notebook(tmp_path, drop=("add_checks", "mask_checks", "concept_checks"))
    result = grade(grader, hashes, path)
    assert result.score == 0.0 and result.max_score == 5.0
    correct = grade(grader, hashes, notebook(tmp_path, drop=("add_checks", "mask_checks", "concept_checks"),
                                             name="correct.ipynb"))
    assert correct.score == 5.0 and "missing-cell" in kinds(correct)


def test_exiting_at_the_end_keeps_the_grade_of_the_work(grader, hashes, tmp_path):
    result = grade(grader, hashes, notebook(tmp_path, append=["import os\nos._exit(0)"]))
    assert result.score == 5.0 and result.cells[-1].status == "crashed"


@pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock: the sandbox falls back (see below)")
def test_student_code_cannot_read_the_hidden_checks(grader, hashes, tmp_path):
    snoop = (
        "import glob, os, subprocess\nfound = []\n"
        f"targets = [{str(CHECKS)!r}, {str(FIXTURE / 'solutions' / 'toy' / 'toy.ipynb')!r}]\n"
        "for path in targets:\n"
        "    try:\n        found.append(open(path).read())\n    except OSError as exc:\n"
        "        print('denied', type(exc).__name__)\n"
        f"for folder in [{str(FIXTURE)!r}, {str(FIXTURE / 'autograder')!r}, '/work', '/']:\n"
        "    try:\n        found.append(' '.join(os.listdir(folder)))\n    except OSError as exc:\n"
        "        print('denied', type(exc).__name__)\n"
        "for pid in os.listdir('/proc'):\n"
        "    for part in ('cmdline', 'environ', 'mem'):\n"
        "        try:\n            found.append(open(f'/proc/{pid}/{part}', 'rb').read(100000).decode('latin1'))\n"
        "        except OSError:\n            pass\n"
        f"found.append(subprocess.run(['grep', '-r', {SECRET[:6]!r}, {str(FIXTURE)!r}], capture_output=True, "
        "text=True).stdout)\n"
        f"answer_q1 = 'b' if any({SECRET!r} in text for text in found) else 'not found'\n"
        "print('found', answer_q1)\n"
        "print('capabilities', open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
    result = grade(grader, hashes, notebook(tmp_path, {"concept": snoop}))
    assert result.cells[-1].output.count("denied PermissionError") >= 4, result.cells[-1].output
    assert "found not found" in result.cells[-1].output
    assert "capabilities 0000000000000000" in result.cells[-1].output  # no root powers, even as root
    assert not result.check("test_concept").passed and result.score == 4.0


@pytest.mark.slow
def test_without_a_sandbox_the_grade_says_so(course, tmp_path):
    with Grader(course, sandbox="off") as grader:
        result = grader.grade(SOURCE, "toy")
    assert result.score == 5.0 and "sandbox-unavailable" in kinds(result)


def test_the_judges_arguments_travel_fast_and_only_towards_the_worker():
    """Plain arguments (a million numbers for a large-input check) go as marshal bytes, kept exactly (tuples stay
    tuples, handles handles); tensors as before. The judge never reads that format: load_values refuses it."""
    import time

    import torch

    from bertcourse.grading.protocol import ProtocolError, Remote, dump_args, load_args, load_values

    plain = {"args": ([1, 2.5, "x", None, (True, b"b"), {3: -0.0}], Remote(4, "Generator")), "kwargs": {"n": 10**30}}
    blob = dump_args(plain)
    assert load_args(blob) == plain and isinstance(load_args(blob)["args"], tuple)
    with pytest.raises(ProtocolError):
        load_values(blob)
    tensors = {"args": (torch.arange(3), [1, 2]), "kwargs": {}}
    loaded = load_args(dump_args(tensors))
    assert torch.equal(loaded["args"][0], tensors["args"][0]) and loaded["args"][1] == [1, 2]
    big = {"args": ([i % 2 for i in range(1_200_000)],), "kwargs": {}}
    started = time.process_time()
    assert load_args(dump_args(big)) == big
    assert time.process_time() - started < 2.0  # torch.save and its weights-only reader: ~5 s of CPU


def test_replies_are_loaded_as_data_only():
    import io
    import pickle
    import zipfile

    import torch

    from bertcourse.grading.protocol import ProtocolError, Remote, dump_values, load_values

    value = {"t": torch.arange(3), "nested": [1, 2.5, "x", None, (True,)], "handle": Remote(3, "Module")}
    loaded = load_values(dump_values(value))
    assert torch.equal(loaded["t"], value["t"]) and loaded["nested"] == value["nested"]
    assert loaded["handle"] == Remote(3, "Module")

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:  # a torch.save-like archive whose pickle runs code
        archive.writestr("archive/data.pkl", pickle.dumps(Evil(), protocol=2))
        archive.writestr("archive/version", "3\n")
    with pytest.raises(Exception, match="(?i)weights_only|unsupported|global"):
        load_values(buffer.getvalue())
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"0" * 1_000_000)
    with pytest.raises(ProtocolError):
        load_values(bomb.getvalue())


# ----------------------------------------------------------------------------- the canary


def test_canary_rules():
    good = [{"nodeid": "c", "canary": True, "passed": False, "message": "abc123"}]
    assert canary_problem(good, "abc123") is None
    assert canary_problem([{**good[0], "passed": True}], "abc123")
    assert canary_problem([{**good[0], "message": "other"}], "abc123")
    assert canary_problem([], "abc123")


@pytest.mark.slow
def test_checks_that_cannot_fail_void_the_grade(tmp_path, grader, hashes):
    """A conftest next to the checks that turns every failure into a pass: the canary passes too, so
    the grade is void instead of full marks for a stub. The warm grader's judge forgets that conftest:
    the next notebook is graded by the real checks again."""
    folder = tmp_path / "checks"
    folder.mkdir()
    (folder / "toy.py").write_text(CHECKS.read_text())
    (folder / "conftest.py").write_text(
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_pyfunc_call(pyfuncitem):\n"
        "    outcome = yield\n    outcome.force_result(True)\n")
    from bertcourse.authoring.proofs import grade_source

    result = grade_source(folder / "toy.py", STUB, grader=grader)
    assert result.error and "canary" in result.error and result.score == 0.0
    stub = grade(grader, hashes, stub_notebook(tmp_path))
    assert stub.error is None and stub.score == 0.0 and not any(c.passed for c in stub.checks)


# ----------------------------------------------------------------------------- the command


@pytest.mark.slow
def test_grade_command(tmp_path, capsys, monkeypatch):
    from bertcourse.cli import main

    monkeypatch.setenv("BERTCOURSE_ROOT", str(FIXTURE))
    assert main(["grade", str(notebook(tmp_path, {"add": WRONG_ADD}))]) == 0
    out = capsys.readouterr().out
    assert "score: 3/5" in out and "add(a, b) should return the sum of its inputs" in out
    assert "add_checks: 0/2" in out
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    assert main(["grade", str(bad), "--exercise", "toy"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["grade", str(SOURCE), "--exercise", "nope"]) == 2
    assert "unknown exercise 'nope'" in capsys.readouterr().err
    os.environ.pop("BERTCOURSE_ROOT", None)


@pytest.mark.slow
def test_grade_finds_the_course_from_the_notebook_takes_a_folder_and_writes_json(tmp_path, capsys, monkeypatch):
    """Run from another folder on a notebook inside the checkout: the course is found above the notebook;
    a folder holding one notebook grades that notebook; --json prints the NotebookResult as data."""
    import shutil

    from bertcourse.cli import main

    course = tmp_path / "course"
    shutil.copytree(FIXTURE, course)
    folder = course / "work"
    folder.mkdir()
    (folder / "toy.ipynb").write_text((course / "solutions" / "toy" / "toy.ipynb").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("BERTCOURSE_ROOT", raising=False)
    assert main(["grade", str(folder), "--json"]) == 0
    result = NotebookResult.from_dict(json.loads(capsys.readouterr().out))
    assert result.exercise == "toy" and result.score == result.max_score == 5
    assert all(check.detail == "" for check in result.checks)  # pytest's reports stay with the instructor
    (folder / "second.ipynb").write_text("{}")
    assert main(["grade", str(folder)]) == 2
    assert "is a folder with 2 notebooks (second.ipynb, toy.ipynb)" in capsys.readouterr().err
    assert main(["grade", str(folder / "toy.ipynb"), "--exercise", "nope"]) == 2
    captured = capsys.readouterr()
    assert "unknown exercise 'nope'" in captured.err and captured.out == ""  # said before anything is graded
