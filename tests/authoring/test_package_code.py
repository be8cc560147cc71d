"""The package code a lesson's outputs came from (`authoring.package_code`): the modules its cells reach, their
digests, and a change to what a reached module runs noticed, while a docstring or a comment is not."""

from __future__ import annotations

from pathlib import Path

import nbformat

from bertcourse.authoring.package_code import changed_modules, code_digest, code_digests, reached_modules


def package(tmp_path: Path) -> Path:
    """A small stand-in for src/bertcourse: the top package, a wing, and modules importing each other."""
    root = tmp_path / "bertcourse"
    (root / "wing").mkdir(parents=True)
    (root / "__init__.py").write_text('"""The package."""\n')
    (root / "wing" / "__init__.py").write_text("")
    (root / "stats.py").write_text('"""Stats."""\n\ndef mean(x):\n    return sum(x) / len(x)\n')
    (root / "wing" / "report.py").write_text("from bertcourse.stats import mean\n\n\ndef line(x):\n"
                                             "    return mean(x)\n")
    (root / "unused.py").write_text("X = 1\n")
    return root


def lesson(code: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a lesson"),
                                           nbformat.v4.new_code_cell(code)])


def test_the_modules_a_cell_reaches_are_followed_through_their_imports(tmp_path):
    root = package(tmp_path)
    reached = reached_modules("import numpy\n%matplotlib inline\nfrom bertcourse.wing.report import line", root)
    assert reached == {"bertcourse", "bertcourse.wing", "bertcourse.wing.report", "bertcourse.stats"}
    assert reached_modules("from bertcourse.wing import report", root) >= {"bertcourse.wing.report", "bertcourse.stats"}


def test_a_change_to_what_runs_is_noticed_and_a_docstring_or_comment_is_not(tmp_path):
    root = package(tmp_path)
    notebook = lesson("from bertcourse.wing.report import line\nprint(line([1, 2]))")
    recorded = code_digests(reached_modules("from bertcourse.wing.report import line", root), root)
    assert changed_modules(recorded, notebook, root) == []
    stats = root / "stats.py"
    stats.write_text('"""Stats, reworded."""\n\n# a comment\ndef mean(x):\n    """The mean."""\n'
                     "    return sum(x) / len(x)\n")
    assert changed_modules(recorded, notebook, root) == []
    stats.write_text("def mean(x):\n    return sum(x) / max(len(x), 1)\n")
    assert changed_modules(recorded, notebook, root) == ["bertcourse.stats (changed)"]
    assert changed_modules(None, notebook, root) == ["(no package code recorded: executed before it was)"]
    other = lesson("from bertcourse.unused import X")
    assert "bertcourse.unused (now imported)" in changed_modules(recorded, other, root)
    assert "bertcourse.wing.report (no longer imported)" in changed_modules(recorded, other, root)


def test_the_digest_ignores_layout_but_not_a_changed_constant():
    assert code_digest("x = 1\ny = [1,\n  2]\n") == code_digest("x = 1  # one\n\ny = [1, 2]\n")
    assert code_digest("x = 1\n") != code_digest("x = 2\n")
