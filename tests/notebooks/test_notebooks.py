"""Every notebook of the course: committed without outputs, opens in Colab, installs itself there,
and is known to course.yml; the README's table of contents is generated from course.yml."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from bertcourse.authoring.lesson_outputs import has_outputs, provenance, stale_cells
from bertcourse.authoring.package_code import changed_modules
from bertcourse.course import load_course
from bertcourse.folders import content_files
from bertcourse.notebook import COLAB_SETUP_TAGS, colab_badge, contents_table, lesson_number, setup_cell_source

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(
    p.relative_to(ROOT).as_posix()
    for folder in ("lessons", "exercises", "solutions")
    for p in content_files(ROOT / folder, "*.ipynb")  # JupyterLab's checkpoint copies are not notebooks
)


def _cells(path: str) -> list[dict]:
    return json.loads((ROOT / path).read_text())["cells"]


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if not p.startswith("lessons/")])
def test_exercises_and_solutions_are_committed_without_outputs(path):
    """nbgrader's sources and releases carry no outputs: a student's copy must not show the answers' results."""
    for index, cell in enumerate(_cells(path)):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path} cell {index} has outputs: strip them before committing"
            assert cell.get("execution_count") is None, f"{path} cell {index} has an execution count"


# Lessons committed without outputs so far. Told explicitly, lesson by lesson: every other lesson must carry
# the outputs of a run with its provenance (`bertcourse execute-lessons`, docs/developing.md "Lesson outputs"). Take a
# lesson out of this set when its outputs are committed; a lesson left here that has outputs fails.
NOT_EXECUTED_YET: set[str] = set()  # every lesson is committed executed; name one here only while it runs


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.startswith("lessons/")])
def test_lesson_outputs_come_from_the_code_next_to_them(path):
    """Strict for a lesson with provenance: every code cell's source hashes to what its outputs were made from."""
    notebook = nbformat.read(ROOT / path, as_version=4)
    record = provenance(notebook)
    if path in NOT_EXECUTED_YET:
        assert record is None and not has_outputs(notebook), (
            f"{path} carries outputs: take it out of NOT_EXECUTED_YET (or strip them with "
            "`bertcourse execute-lessons --clear`)")
        return
    assert record is not None, f"{path} has no recorded outputs: run `bertcourse execute-lessons {path}`"
    assert {"profile", "data", "commit", "date", "wall_time_s"} <= set(record), f"{path}: provenance {record}"
    stale = stale_cells(notebook)
    assert not stale, (f"{path}: code cells {stale} changed after their outputs were made on {record['date']}: "
                       f"run `bertcourse execute-lessons --profile {record['profile']} {path}`")


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.startswith("lessons/") and p not in NOT_EXECUTED_YET])
def test_lesson_outputs_come_from_the_package_code_the_lesson_imports(path):
    """Issue 35: a lesson's cells can stay the same while a package function they call changes what it prints."""
    notebook = nbformat.read(ROOT / path, as_version=4)
    record = provenance(notebook) or {}
    changed = changed_modules(record.get("package_code"), notebook)
    assert not changed, (f"{path}: package code changed after its outputs were made on {record.get('date')}: "
                         f"{', '.join(changed)}; run `bertcourse execute-lessons --profile {record.get('profile')} "
                         f"{path}`")


def test_not_executed_yet_names_only_lessons():
    assert NOT_EXECUTED_YET <= {p for p in NOTEBOOKS if p.startswith("lessons/")}


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_first_cell_opens_this_notebook_in_colab_and_the_next_installs_the_course(path):
    cells = _cells(path)
    # A solution notebook is the nbgrader source of its release: its badge opens the student's copy.
    opens = "exercises/" + path.removeprefix("solutions/") if path.startswith("solutions/") else path
    assert cells[0]["cell_type"] == "markdown"
    assert colab_badge(opens) in "".join(cells[0]["source"]), f"{path}: the first cell needs a badge to {opens}"
    first_code = next(c for c in cells if c["cell_type"] == "code")
    assert "google.colab" in "".join(first_code["source"]), f"{path}: the first code cell must install in Colab"


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_first_code_cell_is_the_generated_colab_setup_collapsed_and_left_out_of_the_website(path):
    first_code = next(c for c in _cells(path) if c["cell_type"] == "code")
    source = setup_cell_source(drive=path.startswith("lessons/"))  # lessons offer Google Drive for their runs
    assert "".join(first_code["source"]) == source, (
        f"{path}: the Colab set-up is not the one generated from course.yml: run `make setup-cells`")
    assert source.startswith("#@title ") and len(source.splitlines()) <= 25, "a short Colab form, titled"
    assert first_code["metadata"].get("cellView") == "form", f"{path}: the set-up cell must open collapsed in Colab"
    assert set(COLAB_SETUP_TAGS) <= set(first_code["metadata"].get("tags", [])), (
        f"{path}: the set-up cell must carry the tags {COLAB_SETUP_TAGS} (the website leaves it out)")
    assert not first_code.get("outputs"), f"{path}: the set-up cell does nothing outside Colab: no outputs"


# Runs in a fresh interpreter standing in for a Colab kernel: the checkout's own (editable) copy of the
# course (and any other source folder holding it) is taken off sys.path, `site_dir` plays Colab's
# site-packages (searched from the start, empty of the course), and the cell runs through IPython itself.
# It runs the cell once per entry of `runs` (a JSON list of environment changes made before that run, as a
# student fixing things between two runs), and prints one JSON line per run: the error the cell raised, if
# any, and whether BERTCOURSE_ROOT was set.
_COLAB_KERNEL = """
import importlib.util, json, os, sys, types
checkout_src, site_dir, cell, runs = sys.argv[1:5]
editable = [p for p in sys.path if os.path.isfile(os.path.join(p or ".", "bertcourse", "__init__.py"))]
sys.path[:] = [p for p in sys.path if p not in editable and os.path.realpath(p) != os.path.realpath(checkout_src)]
sys.path.append(site_dir)
assert importlib.util.find_spec("bertcourse") is None, "the course is importable before the cell ran"
sys.modules["google.colab"] = types.ModuleType("google.colab")
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for change in json.loads(runs):
    os.environ.update(change)
    result = shell.run_cell(open(cell).read())
    error = result.error_before_exec or result.error_in_exec
    print(json.dumps({"error": None if error is None else f"{type(error).__name__}: {error}",
                      "root": os.environ.get("BERTCOURSE_ROOT")}))
if os.environ.get("BERTCOURSE_ROOT"):
    import bertcourse
    from bertcourse.course import find_root
    print(json.dumps({"module": bertcourse.__file__, "root": str(find_root())}))
"""


def _fake_github_repository(folder: Path, branch: str) -> Path:
    """A git repository with this checkout's installable part, standing in for the GitHub one."""
    folder.mkdir()
    for name in ("pyproject.toml", "README.md", "course.yml"):
        shutil.copy(ROOT / name, folder / name)
    shutil.copytree(ROOT / "src", folder / "src", ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(folder), "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for command in (["init", "-q", "-b", branch], ["add", "-A"], ["commit", "-q", "-m", "course"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    return folder


class _Colab:
    """A Colab runtime stood in for: git clones from a local folder instead of GitHub (`origin`), pip installs
    offline into `site_dir` (`pip_config`), the cell is the generated one with the clone under `tmp_path`."""

    def __init__(self, tmp_path: Path):
        self.info = load_course(ROOT).course
        self.tmp_path = tmp_path
        self.clone = tmp_path / "content" / "bertcourse"
        self.clone.parent.mkdir()
        prefix = tmp_path / "site"
        self.site_dir = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        self.site_dir.mkdir(parents=True)
        self.cell = tmp_path / "cell.py"
        self.cell.write_text(setup_cell_source(clone_dir=str(self.clone)))
        # Offline and quick: no index, no dependencies (they are installed here), no isolated build env.
        # ignore-installed: without it, pip would first uninstall this checkout's own (editable) install.
        self.pip_config = tmp_path / "pip.conf"
        self.pip_config.write_text(f"[global]\nno-index = true\ndisable-pip-version-check = true\n"
                                   f"[install]\nno-deps = true\nprefix = {prefix}\nno-build-isolation = false\n"
                                   "ignore-installed = true\n")
        # Dependencies asked for with no index to find them in: how a pip that cannot install fails
        self.failing_pip_config = tmp_path / "failing-pip.conf"
        self.failing_pip_config.write_text(f"[global]\nno-index = true\ndisable-pip-version-check = true\n"
                                           f"[install]\nprefix = {prefix}\nignore-installed = true\n")

    def origin(self, folder: Path) -> dict[str, str]:
        """The environment that makes `git clone https://github.com/REPOSITORY` clone `folder` instead."""
        return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{folder.as_uri()}.insteadOf",
                "GIT_CONFIG_VALUE_0": f"https://github.com/{self.info.repository}"}

    def run(self, first: dict[str, str], *changes: dict[str, str]) -> tuple[list[dict], dict | None]:
        """Run the cell with the environment `first`, then once more after each of `changes`; returns each
        run's {"error", "root"} and, when the course ended up installed, where it was imported from."""
        env = {key: value for key, value in os.environ.items() if key not in ("BERTCOURSE_ROOT", "PYTHONPATH")}
        env.update(first)
        done = subprocess.run([sys.executable, "-c", _COLAB_KERNEL, str(ROOT / "src"), str(self.site_dir),
                               str(self.cell), json.dumps([{}, *changes])],
                              cwd=self.tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"the kernel failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        runs = [line for line in lines if "error" in line]
        imported = next((line for line in lines if "module" in line), None)
        return runs, imported


def test_colab_setup_cell_makes_the_course_importable_in_the_same_kernel(tmp_path):
    """The generated cell, run as in Colab (git and pip redirected to local copies, offline), leaves
    `import bertcourse` working in the same process, from site-packages, with BERTCOURSE_ROOT at the clone."""
    colab = _Colab(tmp_path)
    origin = _fake_github_repository(tmp_path / "github", colab.info.branch)
    runs, seen = colab.run({"PIP_CONFIG_FILE": str(colab.pip_config), **colab.origin(origin)})
    assert runs == [{"error": None, "root": str(colab.clone)}]
    assert Path(seen["module"]).is_relative_to(colab.site_dir), f"imported from {seen['module']}, not site-packages"
    assert Path(seen["root"]) == colab.clone and (colab.clone / "course.yml").is_file()
    assert not list(colab.site_dir.glob("__editable__*")), "an editable install needs a restart to be importable"
    pins = (colab.clone.parent / "bertcourse-constraints.txt").read_text().split()
    assert f"torch=={importlib.metadata.version('torch')}" in pins, "Colab's torch must be pinned for pip"
    assert f"ipython=={importlib.metadata.version('ipython')}" in pins, "the kernel's IPython must stay as it is"
    assert f"traitlets=={importlib.metadata.version('traitlets')}" in pins


def test_a_failed_clone_stops_the_cell_says_what_to_change_and_a_rerun_retries(tmp_path):
    colab = _Colab(tmp_path)
    missing = tmp_path / "no-such-repository"  # what git meets when course.yml names a repository not on GitHub
    origin = _fake_github_repository(tmp_path / "github", colab.info.branch)
    runs, seen = colab.run({"PIP_CONFIG_FILE": str(colab.pip_config), **colab.origin(missing)},
                           colab.origin(origin))  # the student fixes the address and runs the cell again
    failed, retried = runs
    assert failed["root"] is None, "a failed clone must not mark the course as installed"
    message = failed["error"]
    assert message.startswith("RuntimeError: `git clone"), message
    assert str(missing) in message or "does not exist" in message, "the cell must show git's own output"
    for told in (f"https://github.com/{colab.info.repository}", f"branch {colab.info.branch}", "course.yml",
                 "`repository`", "Run this cell again"):
        assert told in message, f"the error does not say {told!r}:\n{message}"
    assert retried == {"error": None, "root": str(colab.clone)}, "running the cell again must retry the clone"
    assert seen is not None and Path(seen["module"]).is_relative_to(colab.site_dir)


def test_a_failed_pip_install_stops_the_cell_with_pips_output_and_a_rerun_retries(tmp_path):
    colab = _Colab(tmp_path)
    origin = _fake_github_repository(tmp_path / "github", colab.info.branch)
    runs, seen = colab.run({"PIP_CONFIG_FILE": str(colab.failing_pip_config), **colab.origin(origin)},
                           {"PIP_CONFIG_FILE": str(colab.pip_config)})  # the network is back: run it again
    failed, retried = runs
    assert failed["root"] is None, "a failed install must not mark the course as installed"
    message = failed["error"]
    assert message.startswith(f"RuntimeError: `{sys.executable} -m pip install"), message
    assert "No matching distribution found" in message, f"the cell must show pip's own output:\n{message}"
    assert f"pip could not install the course from {colab.clone}" in message and "Run this cell again" in message
    assert retried == {"error": None, "root": str(colab.clone)}, "running the cell again must retry the install"
    assert seen is not None and Path(seen["module"]).is_relative_to(colab.site_dir)


def test_every_lesson_notebook_is_in_the_manifest():
    course = load_course(ROOT)
    listed = {lesson.notebook for lesson in course.lessons}
    on_disk = {p for p in NOTEBOOKS if p.startswith("lessons/")}
    assert on_disk == listed, f"not in course.yml: {sorted(on_disk - listed)}; missing: {sorted(listed - on_disk)}"
    released = {f"exercises/{e.notebook}" for e in course.exercises}
    assert released <= set(NOTEBOOKS), f"run `bertcourse release`: missing {sorted(released - set(NOTEBOOKS))}"


def test_readme_contents_table_matches_the_manifest():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- course-contents")
    start = readme.index("\n", start) + 1
    end = readme.index("<!-- /course-contents -->")
    assert readme[start:end].strip() == contents_table(), (
        "README.md's table is out of date: run `make readme`"
    )


def test_lessons_are_numbered_by_their_file_name_not_their_position():
    """Lessons land out of order (5 before 4): the README must show the number the notebook carries."""
    table = contents_table()
    for lesson in load_course(ROOT).lessons:
        number = int(Path(lesson.notebook).name.split("_")[0])
        assert f"| lesson {number} | [{lesson.title}]({lesson.notebook})" in table
    assert lesson_number("lessons/05_evaluation_design.ipynb") == 5
    with pytest.raises(ValueError, match="no number prefix"):
        lesson_number("lessons/evaluation.ipynb")
