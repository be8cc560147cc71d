"""environment.yml (conda) and pyproject.toml (pip) must ask for the same packages and versions."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject_requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["dependencies"]) | {r for extra in project["optional-dependencies"].values() for r in extra}


def _conda_requirements() -> set[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_lists = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    return {r for r in pip_lists[0] if not r.startswith("-e")}


def test_environment_yml_matches_pyproject():
    pyproject, conda = _pyproject_requirements(), _conda_requirements()
    assert conda - pyproject == set(), f"only in environment.yml: {sorted(conda - pyproject)}"
    assert pyproject - conda == set(), f"only in pyproject.toml: {sorted(pyproject - conda)}"


def test_environment_yml_python_is_one_the_project_supports():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    minimum = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert minimum.startswith(">=")
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, minimum[2:].split(".")))
