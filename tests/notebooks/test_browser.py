"""The course as a student sees it: JupyterLab in headless Chromium, Run All, and grading from the notebook.

Starts JupyterLab on a free local port (token auth) over a temporary copy of the notebooks, and drives
Debian's Chromium through Playwright (tests/support/browser_support.py: never a downloaded browser). Skip with
`-m "not browser"`; where $BERTCOURSE_REQUIRE_BROWSER is set (CI) a missing Chromium or Playwright fails instead.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from bertcourse.course import load_course

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
LESSON = "lessons/00_data_and_tokenizer.ipynb"
# What the exercise tests show (Run All goes on past unwritten parts, the last cell grades) is the same in every
# exercise (tests/test_selfgrade.py): they use the one quickest to grade, the self-test.
EXERCISE = load_course(ROOT, check_files=False).exercise("ex07-self-test")
RELEASE = f"exercises/{EXERCISE.notebook}"
SOLVED = f"solved/{Path(EXERCISE.notebook).name}"  # the solution notebook, as a student who solved it would have it
FULL_MARKS = f"score: {EXERCISE.points:g}/{EXERCISE.points:g}"
RUN_TIMEOUT_S = 300
STOPPED_AFTER_S = 10  # the kernel idle this long, nothing new run and cells left: Run All has stopped


@dataclass
class Lab:
    url: str
    token: str
    folder: Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _api(lab: Lab, path: str, method: str = "GET") -> object:
    request = urllib.request.Request(f"{lab.url}api/{path}", method=method,
                                     headers={"Authorization": f"token {lab.token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        body = answer.read()
    return json.loads(body) if body else None


@pytest.fixture(scope="module")
def lab(tmp_path_factory, data_dir, chromium):
    """JupyterLab over a temporary copy of the notebooks (the checkout is never modified)."""
    base = tmp_path_factory.mktemp("browser")
    folder = base / "course"
    for relative, source in [(LESSON, LESSON), (RELEASE, RELEASE), (SOLVED, f"solutions/{EXERCISE.notebook}")]:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, folder / relative)
    settings = base / "settings"
    for plugin, values in [("notebook-extension/tracker", {"windowingMode": "none"}),  # every cell in the DOM
                           ("apputils-extension/notification", {"fetchNews": "false", "checkForUpdates": False})]:
        (settings / "@jupyterlab" / plugin).parent.mkdir(parents=True, exist_ok=True)
        (settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings").write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "BERTCOURSE_PROFILE": "cpu-quick", "BERTCOURSE_DATA": str(data_dir),
           "BERTCOURSE_ROOT": str(ROOT), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
           "JUPYTER_CONFIG_DIR": str(base / "config"), "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("NBGRADER_EXECUTION", "JPY_SESSION_NAME"):
        env.pop(name, None)
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
               "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log_path = base / "jupyterlab.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    running = Lab(f"http://127.0.0.1:{port}/", token, folder)
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                _api(running, "status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within 90 s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.3)
        yield running
    finally:
        try:  # shut the kernels down through the server: they run in sessions of their own
            for session in _api(running, "sessions"):
                _api(running, f"sessions/{session['id']}", method="DELETE")
        except OSError:
            pass
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


# The notebook JupyterLab shows, and its kernel (window.jupyterapp: --LabApp.expose_app_in_browser).
_PANEL = """(path) => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    return panel && panel.context && panel.context.path === path && panel.content ? panel : null;
}"""
_KERNEL_IDLE = f"""(path) => {{
    const panel = ({_PANEL})(path);
    const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
    return !!kernel && kernel.status === 'idle' && panel.sessionContext.kernelDisplayStatus === 'idle';
}}"""
_START_RUN_ALL = """() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }"""
_CELLS = f"""(path) => ({_PANEL})(path).content.widgets.filter(cell => cell.model.type === 'code').map(cell => ({{
    count: cell.model.executionCount, source: cell.model.sharedModel.getSource(), outputs: cell.model.outputs.toJSON()
}}))"""
# Where Run All is: the kernel idle or not, and each code cell's count, first line and whether it raised.
_PROGRESS = f"""(path) => ({{
    idle: ({_KERNEL_IDLE})(path),
    cells: ({_CELLS})(path).map(cell => ({{
        count: cell.count, first_line: cell.source.split('\\n')[0],
        raised: cell.outputs.some(o => o.output_type === 'error'),
    }})),
}})"""


def _finished(progress: dict) -> bool:
    """Run All has finished: the kernel is idle and every code cell has run, or one raised (Run All stops there)."""
    cells = progress["cells"]
    return progress["idle"] and (all(c["count"] for c in cells) or any(c["raised"] for c in cells))


def _where(progress: dict) -> str:
    """The last code cell that ran and the first that did not, by their first lines."""
    cells = progress["cells"]
    done = [i for i, c in enumerate(cells) if c["count"]]
    waiting = [i for i, c in enumerate(cells) if not c["count"]]
    last = f"code cell {done[-1]} ({cells[done[-1]]['first_line']!r})" if done else "no cell"
    first = f"code cell {waiting[0]} ({cells[waiting[0]]['first_line']!r})" if waiting else "none"
    return f"{len(done)} of {len(cells)} code cells ran; the last: {last}; the first not run: {first}"


def wait_for_run_all(pages: dict) -> None:
    """Wait until Run All has finished in every page; fail naming the notebook and the cell where Run All stopped
    without an error (the kernel idle for STOPPED_AFTER_S with cells left) or was still running at RUN_TIMEOUT_S."""
    deadline, idle_since, seen = time.monotonic() + RUN_TIMEOUT_S, {}, {}
    waiting = dict(pages)
    while waiting:
        for path, page in list(waiting.items()):
            progress = page.evaluate(_PROGRESS, path)
            if _finished(progress):
                del waiting[path]
                continue
            ran = sum(1 for c in progress["cells"] if c["count"])
            if not progress["idle"] or seen.get(path) != ran:
                idle_since[path], seen[path] = None, ran
            elif idle_since.get(path) is None:
                idle_since[path] = time.monotonic()
            elif time.monotonic() - idle_since[path] > STOPPED_AFTER_S:
                pytest.fail(f"{path}: Run All stopped without an error: {_where(progress)}")
            if time.monotonic() > deadline:
                pytest.fail(f"{path}: Run All still running after {RUN_TIMEOUT_S} s: {_where(progress)}")
        time.sleep(0.5)


def start_run_all(browser, lab: Lab, path: str):
    """Open `path` in a page of its own, wait for its kernel and start Run All; the page."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(RUN_TIMEOUT_S * 1000)
    page.goto(f"{lab.url}lab/tree/{path}?token={lab.token}")
    page.wait_for_function(_KERNEL_IDLE, arg=path, timeout=120_000)
    page.evaluate(_START_RUN_ALL)
    return page


@pytest.fixture(scope="module")
def ran(browser, lab) -> dict[str, tuple[object, list[dict]]]:
    """Each notebook after Run All in JupyterLab: its page and each code cell's execution count, source and outputs
    (nbformat JSON). The three run side by side, in pages and kernels of their own, as in three browser tabs."""
    pages = {path: start_run_all(browser, lab, path) for path in (LESSON, RELEASE, SOLVED)}
    wait_for_run_all(pages)
    return {path: (page, page.evaluate(_CELLS, path)) for path, page in pages.items()}


def _texts(output: dict) -> str:
    if output["output_type"] == "stream":
        return "".join(output["text"])
    if output["output_type"] == "error":
        return "\n".join(output["traceback"])
    data = output.get("data", {})
    return "\n".join("".join(data[kind]) for kind in ("text/plain", "text/html") if kind in data)


def _errors(cells: list[dict]) -> list[str]:
    """Each error output, with the first line of the cell that raised it."""
    return [f"{o['ename']}: {o['evalue']} (in the cell starting {cell['source'].splitlines()[0]!r})"
            for cell in cells for o in cell["outputs"] if o["output_type"] == "error"]


def test_lesson_0_runs_to_the_end_and_shows_its_plot(ran):
    page, cells = ran[LESSON]
    assert not _errors(cells), _errors(cells)
    assert all(cell["count"] for cell in cells), [c["source"][:60] for c in cells if not c["count"]]
    assert page.locator(".jp-OutputArea-output img").count() >= 1, "no plot shown"
    assert page.locator(".jp-OutputArea-output img").first.is_visible()


def test_grading_a_solved_exercise_from_its_last_cell_shows_full_marks(ran, lab):
    page, cells = ran[SOLVED]
    assert not _errors(cells), _errors(cells)
    assert all(cell["count"] for cell in cells)
    report = "\n".join(_texts(o) for o in cells[-1]["outputs"])
    assert "grade_this_notebook" in cells[-1]["source"]
    assert FULL_MARKS in report, report
    assert f"{lab.folder / SOLVED} as saved at" in report, report
    shown = page.locator(".bertcourse-self-grade")
    assert shown.count() == 1 and FULL_MARKS in shown.inner_text()


def test_the_blank_release_runs_to_the_end_with_not_done_yet_lines(ran):
    page, cells = ran[RELEASE]
    assert not _errors(cells), _errors(cells)
    assert all(cell["count"] for cell in cells), [c["source"][:60] for c in cells if not c["count"]]
    printed = "\n".join(_texts(o) for cell in cells for o in cell["outputs"])
    assert "not done yet" in printed
    assert page.locator(".jp-OutputArea-output", has_text="not done yet").count() >= 1
    assert f"score: 0/{EXERCISE.points:g}" in "\n".join(_texts(o) for o in cells[-1]["outputs"])


class _FakePage:
    """A page whose Run All reports the given progress, the last one for ever."""

    def __init__(self, states: list[dict]):
        self.states = states

    def evaluate(self, script, path):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def _progress(idle: bool, counts: list, raised: int | None = None) -> dict:
    return {"idle": idle, "cells": [{"count": c, "first_line": f"line {i}", "raised": i == raised}
                                    for i, c in enumerate(counts)]}


def test_a_run_all_that_stops_without_an_error_fails_naming_the_cell(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "STOPPED_AFTER_S", 1)
    finished = _FakePage([_progress(False, [1, None, None]), _progress(True, [1, 2, 3])])
    raised = _FakePage([_progress(True, [1, 2, None], raised=1)])
    wait_for_run_all({"a.ipynb": finished, "b.ipynb": raised})  # both finish: every cell ran, or one raised
    stopped = _FakePage([_progress(False, [1, None, None]), _progress(True, [1, 2, None])])
    with pytest.raises(pytest.fail.Exception) as failed:
        wait_for_run_all({"c.ipynb": stopped})
    assert str(failed.value) == ("c.ipynb: Run All stopped without an error: 2 of 3 code cells ran; the last: code "
                                 "cell 1 ('line 1'); the first not run: code cell 2 ('line 2')")
