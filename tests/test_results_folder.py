"""What a later lesson reads lives under the runs folder: lesson 4's report (`results_folder`), which lesson 5
reads, moves with $BERTCOURSE_RUNS (a Drive folder on Colab) as the runs do; the measured table is kept from
there (or from the course root's results/, where lesson 4 wrote it before)."""

from __future__ import annotations

from bertcourse.authoring.lesson_outputs import keep_measured_table
from bertcourse.course import find_root
from bertcourse.run_folders import RUNS_ENV, results_folder, runs_dir


def test_reports_a_later_lesson_reads_move_with_bertcourse_runs(tmp_path, monkeypatch):
    monkeypatch.delenv(RUNS_ENV, raising=False)
    assert results_folder("sst2", "gpu") == find_root() / "runs" / "results" / "sst2-gpu"
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "drive" / "runs"))
    assert results_folder("sst2", "gpu") == tmp_path / "drive" / "runs" / "results" / "sst2-gpu"
    assert results_folder("labels-lesson04", "cpu").parent == runs_dir() / "results"
    assert results_folder("sst2", "cpu", runs=tmp_path / "x") == tmp_path / "x" / "results" / "sst2-cpu"


def test_the_measured_table_is_kept_from_the_runs_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(RUNS_ENV, raising=False)
    root = tmp_path / "course"
    old = root / "results" / "sst2-cpu" / "results.json"
    old.parent.mkdir(parents=True)
    old.write_text('{"where": "root"}')
    assert keep_measured_table(root, "cpu").read_text() == '{"where": "root"}'
    made = results_folder("sst2", "cpu", runs=runs_dir(root)) / "results.json"
    made.parent.mkdir(parents=True)
    made.write_text('{"where": "runs"}')
    kept = keep_measured_table(root, "cpu")
    assert kept == root / "benchmarks" / "results" / "sst2-cpu" / "results.json"
    assert kept.read_text() == '{"where": "runs"}'  # the runs folder's first
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "drive"))
    made = results_folder("sst2", "cpu") / "results.json"
    made.parent.mkdir(parents=True)
    made.write_text('{"where": "drive"}')
    assert keep_measured_table(root, "cpu").read_text() == '{"where": "drive"}'
