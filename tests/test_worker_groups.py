"""`make test`'s units of work (tests/support/worker_groups.py): tests that share work made once per process are
handed to one worker, and slow units go first."""

from __future__ import annotations

import inspect
from pathlib import Path

from worker_groups import SHARED_WORK, file_group, group_of, identifiers, slow_first

ROOT = Path(__file__).resolve().parents[1]
# Session fixtures cheap enough to make once in each worker (a folder's path; files cached on disk)
CHEAP_SESSION_FIXTURES = {"data_dir", "corpus", "quick_tokenizer"}


def test_files_sharing_work_made_once_per_process_share_a_unit_and_other_files_are_their_own():
    assert group_of("tests/test_evaluation.py", "def test_x(data_dir, lesson_runs): ...") == "executed-lessons"
    assert group_of("tests/training/test_compare.py", "def test_x(quick_compare): ...") == "executed-lessons"
    assert group_of("tests/checks/test_checks_ex01.py", "from notebook_gradings import x") == "course-gradings"
    assert group_of("tests/checks/test_checks_ex02.py", "import check_proofs") == "course-gradings"
    assert group_of("tests/grading/test_feedback.py", "def test_x(class_batch): ...") == "class-batch"
    assert group_of("tests/grading/test_claims.py", "def test_x(postgres_url): ...") == "postgresql-server"
    assert group_of("tests/grading/test_cleanup.py", "def test_x(tmp_path): ...") == "tests/grading/test_cleanup.py"
    # named only in a docstring, a comment or a string: the code reads none of the shared work
    mentions = '"""Unlike lesson_runs."""\n# quick_compare\nNOTE = "check_proofs, class_batch"\n'
    assert group_of("tests/test_x.py", mentions) == "tests/test_x.py"
    assert file_group(ROOT, "tests/test_worker_groups.py") == "tests/test_worker_groups.py"


def test_units_with_slow_tests_go_first_and_stay_together_in_their_order():
    a, b, c = "tests/a.py", "tests/b.py", "tests/c.py"  # files come after the named units when both hold slow tests
    groups = [a, b, "executed-lessons", a, c, "executed-lessons", b]
    slow = [False, True, True, False, False, False, False]
    order = slow_first(groups, slow)
    assert [groups[i] for i in order] == ["executed-lessons"] * 2 + [b] * 2 + [a] * 2 + [c]
    assert order == [2, 5, 1, 6, 0, 3, 4]


def test_every_file_that_reads_a_session_fixture_of_shared_work_is_in_that_fixtures_unit():
    """Every session fixture of tests/ that other files share is named in SHARED_WORK (or made in one file)."""
    import re

    named = {name for names in SHARED_WORK.values() for name in names}
    for conftest in sorted((ROOT / "tests").rglob("conftest.py")):
        text = conftest.read_text()
        for fixture in re.findall(r'@pytest\.fixture\(scope="session"\)\ndef (\w+)', text):
            users = [p for p in (ROOT / "tests").rglob("test_*.py") if fixture in identifiers(p.read_text())]
            cheap = fixture in CHEAP_SESSION_FIXTURES
            assert cheap or fixture in named or len(users) <= 1, f"{fixture} ({conftest}) is shared by {users}"


def test_every_test_that_reads_an_executed_lesson_or_compares_runs_is_in_the_lessons_unit():
    """Over every test file: a file that calls the lesson helpers is in the lessons' unit, so no second worker
    executes the lessons again (a file naming the fixtures that hold `compare`'s runs is there by construction)."""
    shared = ("executed_lesson(", "executed_again(")
    outside = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if path == Path(__file__) or not any(name in path.read_text() for name in shared):
            continue
        if file_group(ROOT, relative) != "executed-lessons":
            outside.append(relative)
    assert not outside, outside
    assert file_group(ROOT, "tests/notebooks/test_lessons.py") == file_group(ROOT, "tests/training/test_compare.py")


def test_the_lesson_helpers_need_the_lessons_runs_so_a_file_using_them_names_the_fixture():
    """`executed_lesson` takes the run folders as an argument: only a test holding `lesson_runs` can call it."""
    import lesson_support

    assert list(inspect.signature(lesson_support.executed_lesson).parameters) == ["relative", "data_dir", "runs"]
