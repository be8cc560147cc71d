"""The Colab set-up's decisions (`bertcourse.colab`), with pip and the runtime's packages planted.

The set-up cell end to end (clone, pip, import in the same kernel) is tests/notebooks/test_notebooks.py's.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from bertcourse import colab


def test_the_kernels_packages_are_pinned_and_the_courses_keep_their_major_version_if_possible():
    installed = {"torch": "2.8.0+cu126", "ipython": "7.34.0", "traitlets": "5.7.1", "pyarrow": "18.1.0",
                 "transformers": "4.57.1", "datasets": "4.0.0", "numpy": "2.0.2"}
    hard, soft = colab.constraints(installed, ["torch", "transformers", "datasets", "peft", "ipython"])
    assert hard == ["ipython==7.34.0", "torch==2.8.0+cu126", "traitlets==5.7.1"]
    # peft is not in the image: nothing to keep; torch and ipython are pinned hard, not capped
    assert soft == ["pyarrow==18.1.0", "transformers<5", "datasets<5"]


def test_a_changed_package_the_kernel_imported_stops_the_cell_with_what_changed_and_how_to_restart():
    changed = colab.changed_versions({"pyarrow": "18.1.0", "numpy": "2.0.2", "tqdm": "4.66.0", "gone": "1"},
                                     {"pyarrow": "19.0.1", "numpy": "2.0.2", "tqdm": "4.67.1", "new": "1"})
    assert changed == {"pyarrow": ("18.1.0", "19.0.1"), "tqdm": ("4.66.0", "4.67.1")}
    packages = {"pyarrow": ["pyarrow"], "tqdm": ["tqdm"], "yaml": ["PyYAML"]}
    loaded = colab.imported_distributions(["pyarrow.lib", "yaml", "os"], packages)
    assert loaded == {"pyarrow", "pyyaml"}
    message = colab.restart_message(changed, loaded)
    assert "pyarrow 18.1.0 -> 19.0.1" in message and "tqdm" not in message, "only the imported one needs it"
    assert "Runtime > Restart session" in message and "run this cell again" in message
    assert colab.restart_message({"tqdm": ("4.66.0", "4.67.1")}, loaded) is None


def test_a_new_major_version_is_said():
    lines = colab.major_upgrades({"transformers": ("4.57.1", "5.1.0"), "tqdm": ("4.66.0", "4.67.1")})
    assert lines == ["note: pip moved transformers from 4.57.1 to 5.1.0, another major version, because the "
                     "course needs it"]


def test_pip_progress_is_shown_while_it_runs_and_its_output_kept():
    script = ("import time\nfor i in range(3):\n    print(f'Collecting package{i}', flush=True)\n    time.sleep(0.2)\n"
              "print('Installing collected packages: a, b', flush=True)\n"
              "print('Successfully installed a-1 b-2', flush=True)\n")
    said: list[str] = []
    code, output = colab.run_pip([sys.executable, "-c", script], said.append, every_s=0.1)
    assert code == 0 and "Collecting package0" in output and "Successfully installed a-1 b-2" in output
    assert any("Collecting package" in line for line in said), said
    assert said[-2].startswith("  pip, ") and said[-2].endswith(" s: Installing collected packages: a, b")
    assert said[-1].endswith(" s: Successfully installed a-1 b-2")


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cloned course (only its pyproject.toml matters here), BERTCOURSE_ROOT unset, pip never run."""
    course = tmp_path / "bertcourse"
    course.mkdir()
    (course / "pyproject.toml").write_text('[project]\nname = "bertcourse"\ndependencies = ["transformers>=5.0"]\n')
    monkeypatch.delenv("BERTCOURSE_ROOT", raising=False)
    return course


def _plant(monkeypatch: pytest.MonkeyPatch, before: dict, after: dict, pip_codes: list[int]) -> list[list[str]]:
    """pip answers with `pip_codes` in turn; the runtime holds `before`, then `after` once pip succeeded."""
    calls: list[list[str]] = []
    state = {"done": False}

    def run_pip(command, say):
        calls.append(Path(command[command.index("-c") + 1]).read_text().split())
        code = pip_codes[len(calls) - 1]
        state["done"] = code == 0
        return code, "ERROR: No matching distribution found for transformers<5" if code else "ok"

    monkeypatch.setattr(colab, "run_pip", run_pip)
    monkeypatch.setattr(colab, "installed_versions", lambda: after if state["done"] else before)
    return calls


def test_install_drops_the_soft_bounds_only_when_pip_cannot_keep_them_and_says_the_major_upgrade(clone, monkeypatch):
    # nothing it changes is imported yet, as in a fresh runtime (in this process other tests imported transformers)
    monkeypatch.setattr(colab.importlib.metadata, "packages_distributions", lambda: {})
    calls = _plant(monkeypatch, {"torch": "2.8.0", "transformers": "4.57.1"},
                   {"torch": "2.8.0", "transformers": "5.1.0"}, [1, 0])
    said: list[str] = []
    colab.install(clone, said.append)
    assert calls == [["torch==2.8.0", "transformers<5"], ["torch==2.8.0"]]
    assert any("trying again without that" in line for line in said)
    assert any("transformers from 4.57.1 to 5.1.0, another major version" in line for line in said), said
    assert os.environ["BERTCOURSE_ROOT"] == str(clone)


def test_install_stops_before_marking_the_course_installed_when_the_kernel_must_restart(clone, monkeypatch):
    module = types.ModuleType("transformers")
    monkeypatch.setitem(sys.modules, "transformers", module)
    monkeypatch.setattr(colab.importlib.metadata, "packages_distributions", lambda: {"transformers": ["transformers"]})
    _plant(monkeypatch, {"transformers": "4.57.1"}, {"transformers": "5.1.0"}, [1, 0])
    with pytest.raises(RuntimeError, match=r"transformers 4\.57\.1 -> 5\.1\.0.*Runtime > Restart session"):
        colab.install(clone, lambda line: None)
    assert "BERTCOURSE_ROOT" not in os.environ, "a rerun after the restart must check the install again"


def test_install_raises_with_pips_output_when_pip_fails_twice(clone, monkeypatch):
    _plant(monkeypatch, {"transformers": "4.57.1"}, {}, [1, 1])
    with pytest.raises(RuntimeError, match=r"(?s)-m pip install.*No matching distribution.*Run this cell again"):
        colab.install(clone, lambda line: None)
    assert "BERTCOURSE_ROOT" not in os.environ
