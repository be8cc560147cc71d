"""Run folders: one function names them (`bertcourse.run_folders`), $BERTCOURSE_RUNS moves them all, lesson 3's
pretraining is the one lessons 4 and 6 and `compare` reuse, and in Colab the student may keep them in Drive."""

import sys
import types
from argparse import Namespace
from pathlib import Path

import pytest

from bertcourse.course import find_root
from bertcourse.run_folders import (
    RUNS_ENV,
    finetuning_folder,
    pretraining_folder,
    run_folder,
    runs_dir,
    settings_folder,
)


def test_run_folders_live_in_the_course_root_unless_bertcourse_runs_says_elsewhere(tmp_path, monkeypatch):
    monkeypatch.delenv(RUNS_ENV, raising=False)
    assert runs_dir() == find_root() / "runs"
    assert pretraining_folder("bert", "gpu") == find_root() / "runs" / "pretrain-bert-gpu"
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "drive" / "runs"))
    assert runs_dir() == tmp_path / "drive" / "runs"
    assert pretraining_folder("gpt", "cpu") == tmp_path / "drive" / "runs" / "pretrain-gpt-cpu"
    assert pretraining_folder("bert", "cpu", whole_word=True).name == "pretrain-bert-whole-word-cpu"
    folder = finetuning_folder("bert", "lora", "scratch", "cpu", 2)
    assert folder == tmp_path / "drive" / "runs" / "finetune-bert-lora-scratch-cpu-seed2"
    assert run_folder("x", "cpu", runs=tmp_path) == tmp_path / "x-cpu"  # an explicit folder wins


def test_every_command_names_the_pretraining_folder_through_the_one_function(tmp_path, monkeypatch):
    from bertcourse.training import compare, finetune
    from bertcourse.training import pretrain as train
    from bertcourse.training.compare import RunSpec
    from bertcourse.training.finetune import FinetuneOptions

    monkeypatch.setenv(RUNS_ENV, str(tmp_path))
    assert finetune.default_pretrained("gpt", "cpu").parent == pretraining_folder("gpt", "cpu")
    options = FinetuneOptions(arch="gpt", regime="probe", init="pretrained", seed=1)
    assert finetune.default_out_dir(options, "cpu") == RunSpec("gpt", "probe", "pretrained", 1).folder(tmp_path, "cpu")
    seen = {}
    monkeypatch.setattr(train, "pretrain", lambda options, **_: seen.setdefault("out", options.out_dir) and sys.exit(0))
    args = Namespace(arch="bert", whole_word=True, profile="cpu-quick", out=None, data_dir=None, source="auto",
                     resume=False, max_steps=None, seed=0, compile=False, device=None, no_progress=True, dropout=None,
                     precision="auto", init_from=None)
    with pytest.raises(SystemExit):
        train.pretrain_command(args)
    assert Path(seen["out"]) == pretraining_folder("bert", "cpu-quick", whole_word=True)
    ready = pretraining_folder("bert", "cpu-quick")
    ready.mkdir(parents=True)
    (ready / "metrics.json").write_text("{}")
    assert compare.ensure_pretrained("bert", "cpu-quick") == ready  # found under $BERTCOURSE_RUNS, not trained


def test_settings_folders_follow_the_profile_settings_and_the_corpus(tmp_path, monkeypatch):
    import dataclasses

    from bertcourse.course import load_course
    from bertcourse.data import Corpus

    monkeypatch.setenv(RUNS_ENV, str(tmp_path))
    course = load_course()
    corpus = Corpus(["a sentence"], ["held out"], "test")
    folder = settings_folder("lesson02-whole-word", "cpu", corpus, course=course)
    assert folder.parent == tmp_path and folder.name.startswith("lesson02-whole-word-cpu-")
    assert settings_folder("lesson02-whole-word", "cpu", corpus, course=course) == folder
    other = Corpus(["other"], ["held out"], "test")
    assert settings_folder("lesson02-whole-word", "cpu", other, course=course) != folder
    changed = dataclasses.replace(course, profiles={**course.profiles, "cpu": dataclasses.replace(
        course.profiles["cpu"], vocab_size=123)})
    assert settings_folder("lesson02-whole-word", "cpu", corpus, course=changed) != folder


@pytest.mark.slow
def test_lesson_3s_pretraining_is_what_lessons_4_and_6_reuse(tmp_path, monkeypatch, corpus, quick_tokenizer):
    """Lesson 3 pretrains into `pretraining_folder`; `ensure_pretrained` (lessons 4 and 6, compare) then reads
    that run instead of training again, and lesson 3 run again reads it back without another step."""
    from bertcourse.training import pretrain as train
    from bertcourse.training.compare import ensure_pretrained
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    out_dir = pretraining_folder("bert", "cpu-quick")  # lesson 3's cell, with a shorter run
    options = PretrainOptions(arch="bert", profile="cpu-quick", out_dir=out_dir, max_steps=4, eval_every=4,
                              checkpoint_every=4, progress=False)
    first = pretrain(options, corpus=corpus, tokenizer=quick_tokenizer)
    monkeypatch.setattr(train, "pretrain", lambda *a, **k: pytest.fail("a finished pretraining was trained again"))
    assert ensure_pretrained("bert", "cpu-quick") == out_dir == first.out_dir
    monkeypatch.undo()
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    again = pretrain(PretrainOptions(**{**options.__dict__, "resume": True}), corpus=corpus, tokenizer=quick_tokenizer)
    assert again.history["step"] == first.history["step"] and again.final_eval == first.final_eval


def _unset_restored_after(monkeypatch, *names: str) -> None:
    """Unset `names` for the test and restore them after it, even where they were unset before: the code under
    test sets them in os.environ, and monkeypatch only restores a variable it has seen (delenv of an absent
    one records nothing, so a later test would find this test's folders)."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_keep_artefacts_in_points_runs_and_cache_at_a_folder(tmp_path, monkeypatch):
    from bertcourse.folders import CACHE_ENV, cache_dir
    from bertcourse.notebook import keep_artefacts_in

    _unset_restored_after(monkeypatch, RUNS_ENV, CACHE_ENV)
    chosen = keep_artefacts_in(tmp_path / "keep")
    assert runs_dir() == chosen[RUNS_ENV] == tmp_path / "keep" / "runs" and chosen[RUNS_ENV].is_dir()
    assert cache_dir() == chosen[CACHE_ENV] == tmp_path / "keep" / "cache"


def test_use_drive_mounts_drive_only_in_colab_and_only_when_called(tmp_path, monkeypatch):
    from bertcourse.folders import CACHE_ENV
    from bertcourse.notebook import use_drive

    _unset_restored_after(monkeypatch, RUNS_ENV, CACHE_ENV)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    with pytest.raises(RuntimeError, match="BERTCOURSE_RUNS"):
        use_drive()
    mounted = []
    colab = types.ModuleType("google.colab")
    colab.drive = types.SimpleNamespace(mount=lambda where: mounted.append(where) or Path(where).mkdir(parents=True))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    import bertcourse.notebook  # importing the course mounts nothing

    assert mounted == [] and bertcourse.notebook
    chosen = use_drive(mount_point=str(tmp_path / "drive"))
    assert mounted == [str(tmp_path / "drive")]
    assert chosen[RUNS_ENV] == tmp_path / "drive" / "MyDrive" / "bertcourse" / "runs" == runs_dir()


def test_read_results_names_the_file_and_the_command_that_writes_it(tmp_path):
    from bertcourse.folders import read_results, write_atomic

    class Refused(Exception):
        pass

    write_atomic(tmp_path / "results.json", '{"format": "labels/1", "rows": []}')
    assert read_results(tmp_path, "labels/1", "labels", Refused) == {"format": "labels/1", "rows": []}
    assert read_results(tmp_path / "results.json", "labels/1", "labels", Refused)["rows"] == []
    with pytest.raises(Refused, match=r"results\.json: not the results of `bertcourse compare`"):
        read_results(tmp_path, "compare/2", "compare", Refused)
    with pytest.raises(Refused, match=r"missing.*no readable results.*run `bertcourse labels` first"):
        read_results(tmp_path / "missing", "labels/1", "labels", Refused)
    (tmp_path / "results.json").write_text("{half")
    with pytest.raises(Refused, match="JSONDecodeError"):
        read_results(tmp_path, "labels/1", "labels", Refused)
