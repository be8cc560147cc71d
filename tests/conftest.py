"""Shared test set-up: the real data folder, a repo-local cache, and no hub access.

Tests that need the real data take the `data_dir` fixture. Where the data is absent they skip with
the reason, unless $BERTCOURSE_REQUIRE_DATA is set (CI sets it), where they fail instead: real-data
tests must never skip silently in CI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Shared test helpers live in tests/support/ and are imported by module name from every test folder.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
DEFAULT_DATA = ROOT.parent / "shared" / "data"

# Before anything imports datasets/transformers: never reach for a hub in tests, and keep caches here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("BERTCOURSE_CACHE", str(ROOT / ".cache" / "bertcourse"))
os.environ.setdefault("BERTCOURSE_ROOT", str(ROOT))


def real_data_dir() -> Path | None:
    folder = Path(os.environ.get("BERTCOURSE_DATA") or DEFAULT_DATA)
    return folder if (folder / "sst2" / "train.tsv").is_file() else None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    folder = real_data_dir()
    if folder is None:
        reason = "real data not found: set BERTCOURSE_DATA to a folder with sst2/ and wikitext2/"
        if os.environ.get("BERTCOURSE_REQUIRE_DATA"):
            pytest.fail(reason + " (BERTCOURSE_REQUIRE_DATA is set)")
        pytest.skip(reason)
    return folder


@pytest.fixture(scope="session")
def corpus(data_dir):
    from bertcourse.data import load_corpus

    return load_corpus(data_dir=data_dir)


@pytest.fixture(scope="session")
def quick_tokenizer(corpus):
    """The cpu-quick course tokenizer on the real corpus (trained once, then cached)."""
    from bertcourse.course import load_course
    from bertcourse.tokenizer import load_tokenizer

    spec = load_course(check_files=False).profile("cpu-quick")
    return load_tokenizer(corpus, spec.vocab_size, spec.model.max_seq_len, progress=False)


@pytest.fixture(scope="session")
def quick_compare(tmp_path_factory, data_dir):
    """One uninterrupted `compare` on cpu-quick in temporary folders, trained from nothing: both pretrainings and
    every fine-tuning run. It runs from an empty working folder that must stay empty: a path left relative to the
    working folder (runs/, results/) would land there. tests/training/test_compare.py reads its report; its runs
    folder is also the one the lessons run with (`lesson_runs`), so lessons 3 and 4 reuse these runs as a
    student's lesson 4 reuses lesson 3's, instead of training the same runs a second time."""
    from bertcourse.training.compare import compare

    base = tmp_path_factory.mktemp("compare")
    elsewhere = tmp_path_factory.mktemp("working-folder")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(elsewhere)
        results = compare("cpu-quick", out=base / "results", runs_dir=base / "runs", data_dir=data_dir,
                          progress=False)
    assert not list(elsewhere.iterdir()), "compare wrote outside the folders it was given"
    return base, results


@pytest.fixture(scope="session")
def lesson_runs(quick_compare) -> Path:
    """$BERTCOURSE_RUNS of the executed lessons: `quick_compare`'s runs, never the checkout's own runs/ (which
    may hold a developer's older runs that would let a lesson pass without training anything)."""
    return quick_compare[0] / "runs"


def pytest_collection_modifyitems(config, items):
    """In a pytest-xdist worker: slow units first, each unit's tests together (the order the controller hands
    the units out in)."""
    if not hasattr(config, "workerinput"):
        return
    from worker_groups import slow_first, unit_of

    groups = [unit_of(ROOT, item.nodeid) for item in items]
    order = slow_first(groups, [item.get_closest_marker("slow") is not None for item in items])
    items[:] = [items[i] for i in order]


# optionalhook: without pytest-xdist (`make test-fast`, the grading judge, which runs pytest with no plugins on
# check files, tests/fixtures' included) the hook is unknown, and pytest refuses a conftest with an unknown hook.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`: units of work are worker_groups' (a file, or the files that share work made once per
    process), handed out in the workers' order to whichever worker is free."""
    if config.getoption("dist") != "loadgroup":
        return None
    from worker_groups import unit_of
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(ROOT, nodeid)

    return FileGroupScheduling(config, log)


# How busy each worker was (printed at the end of `make test`): two workers that finish far apart mean the units
# are badly balanced, which the durations of single tests do not show.
_CONFIG: dict = {}
_BUSY: dict[str, float] = {}


def pytest_configure(config):
    _CONFIG["config"] = config


def pytest_runtest_logreport(report):
    """In a worker: add the report's setup, call or teardown time to what the worker tells the controller."""
    config = _CONFIG.get("config")
    if config is not None and hasattr(config, "workeroutput"):
        config.workeroutput["busy_s"] = config.workeroutput.get("busy_s", 0.0) + report.duration


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _BUSY[node.gateway.id] = node.workeroutput.get("busy_s", 0.0) if hasattr(node, "workeroutput") else 0.0


def pytest_terminal_summary(terminalreporter):
    if _BUSY:
        terminalreporter.write_line("time in tests per worker: " + ", ".join(
            f"{worker} {seconds:.0f} s" for worker, seconds in sorted(_BUSY.items())))
