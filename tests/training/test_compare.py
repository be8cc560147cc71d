"""`bertcourse compare`: the cost it reads, the profile it hands down, and the experiment end to end.

Its statistics are tested in tests/test_stats.py. The end-to-end tests run the cpu-quick
profile in temporary folders (never the repository's runs/ or results/): the report's schema, a compare
killed part-way and resumed (finished runs reused, not retrained; the same results), a run folder from
other settings refused with its path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertcourse.training import compare as C

PROFILE = "cpu-quick"


def test_run_folders_are_named_as_bertcourse_finetune_names_them():
    from bertcourse.run_folders import runs_dir
    from bertcourse.training.finetune import FinetuneOptions, default_out_dir

    plan = C.run_plan(2)
    assert len(plan) == 2 * 3 * 2 * 2 and len(set(plan)) == len(plan)
    for run in plan:
        options = FinetuneOptions(arch=run.arch, regime=run.regime, init=run.init, seed=run.seed)
        assert run.folder(runs_dir(), PROFILE) == default_out_dir(options, PROFILE)


def test_pretraining_cost_counts_the_body_at_every_token_and_the_head_where_it_runs(tmp_path):
    from bertcourse.config import ModelConfig
    from bertcourse.model import build_model

    base = ModelConfig(vocab_size=100, d_model=16, n_heads=2, d_ff=32, max_seq_len=8, n_layers=2)
    costs = {}
    for arch in ("bert", "gpt"):
        config = base.for_arch(arch)
        folder = tmp_path / arch
        folder.mkdir()
        (folder / "metrics.json").write_text(json.dumps({
            "parameters": 1, "tokens_seen": 1000, "train_seconds": 2.5, "precision": "fp32",
            "final_eval": {"loss": 3.0, "accuracy": 0.2}, "history": {"step": [1, 2, 3]}}))
        saved = {"settings": {"model_config": config.to_dict(), "batch_size": 4}, "step": 3}
        costs[arch] = cost = C.pretraining_cost(folder, saved, select_prob=0.15)
        model = build_model(config)
        blocks = sum(p.numel() for part in (model.blocks, model.embeddings.norm, model.final_norm)
                     for p in part.parameters())
        assert cost["body_parameters"] == blocks
        head = 16 * 16 + 16 + 2 * 16 + 100 * 16 + 100  # dense, LayerNorm, tied decoder, bias
        assert cost["head_parameters"] == head
        share = 0.15 if arch == "bert" else 1.0
        assert cost["flops"] == pytest.approx(6 * 1000 * (blocks + share * head))
        assert cost["steps"] == 3 and cost["tokens_recorded"] and cost["train_seconds"] == 2.5
    assert costs["gpt"]["flops"] > costs["bert"]["flops"]


def test_a_run_without_recorded_tokens_is_estimated_and_says_so(tmp_path):
    from bertcourse.config import ModelConfig

    config = ModelConfig(vocab_size=100, d_model=16, n_heads=2, d_ff=32, max_seq_len=8, n_layers=1)
    (tmp_path / "metrics.json").write_text(json.dumps({
        "parameters": 1, "final_eval": {"loss": 3.0, "accuracy": 0.2}, "history": {"step": [1, 2, 3, 4, 5]}}))
    cost = C.pretraining_cost(tmp_path, {"settings": {"model_config": config.to_dict(), "batch_size": 4}, "step": 5},
                              0.15)
    assert cost["tokens_seen"] == 5 * 4 * 8 and not cost["tokens_recorded"] and cost["train_seconds"] is None
    assert "estimated" in C.results_markdown(_minimal_results({"bert": cost, "gpt": cost}))


def _minimal_results(pretraining: dict) -> dict:
    spread = {"per_seed": [0.5], "mean": 0.5, "sd": None, "interval": [0.4, 0.6]}
    row = {"name": "majority class", "arch": "baseline", "regime": None, "init": None, "accuracy": spread,
           "macro_f1": spread, "mcc": spread, "trainable_parameters": 0, "finetune_seconds": spread}
    return {"profile": PROFILE, "seeds": 1, "validation_sentences": 872, "train_rows": 10, "rows": [],
            "baselines": [row], "tests": [], "pretraining": pretraining, "anchors": C.ANCHORS,
            "statistics": {"interval": "i", "test": "t"}}


def test_load_results_refuses_what_compare_did_not_write(tmp_path):
    with pytest.raises(C.CompareError, match=str(tmp_path / "results.json")):
        C.load_results(tmp_path)
    (tmp_path / "results.json").write_text('{"format": "something else"}')
    with pytest.raises(C.CompareError, match="not the results of `bertcourse compare`"):
        C.load_results(tmp_path)


def test_a_pretraining_resumed_after_a_kill_reports_the_tokens_of_an_uninterrupted_one(tmp_path, corpus,
                                                                                       quick_tokenizer):
    """write_report records tokens and seconds summed over resumes (compare's cost table reads them)."""
    from bertcourse.data import Corpus
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    small = Corpus(corpus.train[:1500], corpus.heldout[:50], corpus.source)
    options = dict(profile=PROFILE, max_steps=6, eval_every=3, checkpoint_every=2, progress=False)
    pretrain(PretrainOptions(out_dir=tmp_path / "straight", **options), corpus=small, tokenizer=quick_tokenizer)
    with pytest.raises(KeyboardInterrupt):
        pretrain(PretrainOptions(out_dir=tmp_path / "killed", stop_after=3, **options), corpus=small,
                 tokenizer=quick_tokenizer)
    pretrain(PretrainOptions(out_dir=tmp_path / "killed", resume=True, **options), corpus=small,
             tokenizer=quick_tokenizer)
    straight, resumed = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("straight", "killed"))
    assert straight["tokens_seen"] == resumed["tokens_seen"] > 6 * 32 * 8  # at least 8 real tokens per block
    assert straight["counted_from_step"] == resumed["counted_from_step"] == 0
    assert resumed["train_seconds"] > 0


def test_the_precision_of_compare_reaches_the_pretraining_it_starts(tmp_path, monkeypatch, capsys):
    import bertcourse.training.pretrain
    from bertcourse import cli

    asked = []

    class Stop(Exception):
        pass

    def pretraining(options, **handed):
        asked.append(options)
        raise Stop

    monkeypatch.setattr(bertcourse.training.pretrain, "pretrain", pretraining)
    with pytest.raises(Stop):
        C.compare(PROFILE, runs_dir=tmp_path, precision="bf16", device="cpu", progress=False)
    with pytest.raises(Stop):  # and from the command line
        cli.main(["compare", "--profile", PROFILE, "--precision", "fp32", "--runs-dir", str(tmp_path), "--no-progress"])
    assert [(o.arch, o.precision, o.device) for o in asked] == [("bert", "bf16", "cpu"), ("bert", "fp32", None)]


def test_compare_reads_course_yml_once_and_looks_the_profile_up_once(tmp_path, data_dir, monkeypatch):
    """The profile is resolved once at compare's edge and handed down as the `Profile`: the pretrainings and every
    fine-tuning run receive that object, and course.yml is parsed once. The training is faked (it is not what
    is counted): the pretrainings write a checkpoint of a small tokenizer, the runs a predictions.tsv."""
    import bertcourse.course
    import bertcourse.training.finetune
    import bertcourse.training.pretrain
    from bertcourse.data import synthetic_sentences
    from bertcourse.tokenizer import train_tokenizer
    from bertcourse.training.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_NAME, save_checkpoint
    from bertcourse.training.finetune import FinetuneResult

    calls = {"parse_course": 0, "select_profile": 0, "Course.profile": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(bertcourse.course, "parse_course", counted("parse_course", bertcourse.course.parse_course))
    monkeypatch.setattr(bertcourse.course, "select_profile",
                        counted("select_profile", bertcourse.course.select_profile))
    monkeypatch.setattr(bertcourse.course.Course, "profile",
                        counted("Course.profile", bertcourse.course.Course.profile))
    tokenizer = train_tokenizer(synthetic_sentences(300), 200, progress=False)
    handed = []

    def pretraining(options, *, profile_spec=None, **_):
        handed.append((options.profile, profile_spec))
        config = profile_spec.model.for_arch(options.arch, vocab_size=len(tokenizer))
        save_checkpoint(Path(options.out_dir) / CHECKPOINT_NAME, {
            "format": CHECKPOINT_FORMAT, "step": 1, "tokenizer": tokenizer.backend_tokenizer.to_str(),
            "settings": {"model_config": config.to_dict(), "batch_size": profile_spec.pretrain.batch_size}})
        (Path(options.out_dir) / "metrics.json").write_text(json.dumps(
            {"history": {"step": [1]}, "final_eval": {"loss": 1.0, "accuracy": 0.0}}))

    def finetuning(options, *, data=None, profile_spec=None):
        handed.append((options.profile, profile_spec))
        labels = data.validation_labels.tolist()
        Path(options.out_dir).mkdir(parents=True)
        rows = "".join(f"{i}\t{y}\t{(y + i) % 2}\t0.5\tx\n" for i, y in enumerate(labels))
        header = "index\tlabel\tprediction\tp_positive\tsentence\n"
        (Path(options.out_dir) / "predictions.tsv").write_text(header + rows)
        scores = {"accuracy": 0.5, "macro_f1": 0.5, "mcc": 0.0, "trainable_parameters": 1, "parameters": 1,
                  "train_seconds": 0.0, "history": {"eval_step": [], "eval_accuracy": []}}
        return FinetuneResult(Path(options.out_dir), scores, np.full((len(labels), 2), 0.5))

    monkeypatch.setattr(bertcourse.training.pretrain, "pretrain", pretraining)
    monkeypatch.setattr(bertcourse.training.finetune, "finetune", finetuning)
    monkeypatch.setattr(C, "write_results", lambda results, out: None)
    bertcourse.course._load_cached.cache_clear()
    results = C.compare(PROFILE, seeds=1, runs_dir=tmp_path / "runs", out=tmp_path / "out", data_dir=data_dir,
                        progress=False)
    assert len(results["rows"]) == 12 and len(handed) == 2 + 12
    profile_spec = handed[0][1]
    assert profile_spec is not None and profile_spec.name == PROFILE
    assert all(name == PROFILE and spec is profile_spec for name, spec in handed), "a run got the profile by name"
    assert calls == {"parse_course": 1, "select_profile": 1, "Course.profile": 1}


# ----------------------------------------------------------------------------- end to end (cpu-quick)


def _without_timing(value):
    """The results with what legitimately differs between two compares removed: seconds and folder paths."""
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items()
                if k not in ("timing", "finetune_seconds", "train_seconds", "folder", "runs_dir")}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


@pytest.mark.slow
def test_compare_writes_the_report_with_its_documented_schema(quick_compare):
    from bertcourse.course import load_course

    base, results = quick_compare
    seeds = load_course().profile(PROFILE).finetune.seeds
    out = base / "results"
    assert set(results) == set(C.RESULTS_FIELDS)  # every field documented, none undocumented
    assert C.load_results(out) == results
    for name in ("results.md", "accuracy.png", "learning_curves.png", "confusion_matrices.png"):
        assert (out / name).stat().st_size > 1000, name
    assert results["format"] == C.COMPARE_FORMAT and results["seeds"] == seeds
    assert results["validation_sentences"] == 872
    rows = {(r["arch"], r["regime"], r["init"]): r for r in results["rows"]}
    assert set(rows) == {(a, r, i) for a in C.ARCHS for r in C.REGIMES for i in C.INITS}
    for row in results["rows"] + results["baselines"]:
        acc = row["accuracy"]
        assert len(acc["per_seed"]) == (1 if row["arch"] == "baseline" else seeds)
        assert acc["mean"] == pytest.approx(np.mean(acc["per_seed"]))
        assert acc["interval"][0] <= acc["mean"] <= acc["interval"][1]
        assert sum(map(sum, row["confusion"])) == 872 * len(acc["per_seed"])
        (tn, fp), (fn, tp) = row["confusion"]
        assert (tn + tp) / (872 * len(acc["per_seed"])) == pytest.approx(acc["mean"])
    for row in results["rows"]:
        assert len(row["runs"]) == seeds and all(Path(r["folder"]).parent == base / "runs" for r in row["runs"])
        assert all(len(r["curve"]["step"]) == len(r["curve"]["accuracy"]) > 0 for r in row["runs"])
    assert rows[("bert", "probe", "pretrained")]["trainable_parameters"] < rows[("bert", "lora", "pretrained")][
        "trainable_parameters"] < rows[("bert", "full", "pretrained")]["trainable_parameters"]
    majority, tfidf = results["baselines"]
    assert majority["mcc"]["mean"] == 0 and tfidf["accuracy"]["mean"] > majority["accuracy"]["mean"] + 0.1
    assert len(results["tests"]) == 12 and all(0 < t["p"] <= t["p_holm"] <= 1 for t in results["tests"])
    for arch, cost in results["pretraining"].items():
        assert cost["tokens_recorded"] and cost["tokens_seen"] > 0 and cost["train_seconds"] > 0
        assert Path(cost["folder"]) == base / "runs" / f"pretrain-{arch}-{PROFILE}"
    assert results["pretraining"]["gpt"]["flops"] > results["pretraining"]["bert"]["flops"]
    markdown = (out / "results.md").read_text()
    for words in ("mean ± sd", "95% interval", "Paired tests", "McNemar", "83.2", "93.5", "82.1", "6 x T"):
        assert words in markdown, words


@pytest.mark.slow
def test_a_killed_compare_resumes_reusing_finished_runs_with_the_same_results(quick_compare, tmp_path, data_dir):
    """Pretraining and all runs but the last 4 as a killed compare leaves them, then a compare killed (an
    exception from after_run) after training 2 more, then the resume: those reused, the last 2 trained."""
    base, uninterrupted = quick_compare
    runs = tmp_path / "runs"
    plan = C.run_plan(uninterrupted["seeds"])
    for arch in C.ARCHS:
        shutil.copytree(base / "runs" / f"pretrain-{arch}-{PROFILE}", runs / f"pretrain-{arch}-{PROFILE}")
    done, killed = len(plan) - 4, len(plan) - 2
    for run in plan[:done]:
        shutil.copytree(run.folder(base / "runs", PROFILE), run.folder(runs, PROFILE))

    trained = []

    def kill_after_two(run, result):
        if result.model is not None:
            trained.append(run)
            if len(trained) == 2:
                raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        C.compare(PROFILE, out=tmp_path / "results", runs_dir=runs, data_dir=data_dir, progress=False,
                  after_run=kill_after_two)
    assert trained == plan[done:killed]
    stamps = {run: run.folder(runs, PROFILE).joinpath("model.pt").stat().st_mtime_ns for run in plan[:killed]}
    assert not (tmp_path / "results").exists()

    seen = {}
    resumed = C.compare(PROFILE, out=tmp_path / "results", runs_dir=runs, data_dir=data_dir, progress=False,
                        after_run=lambda run, result: seen.__setitem__(run, result.model is None))
    assert [run for run in plan if seen[run]] == plan[:killed]  # reused
    assert [run for run in plan if not seen[run]] == plan[killed:]  # trained
    assert all(run.folder(runs, PROFILE).joinpath("model.pt").stat().st_mtime_ns == stamp
               for run, stamp in stamps.items())
    assert _without_timing(resumed) == _without_timing(uninterrupted)


@pytest.mark.slow
def test_a_run_folder_from_other_settings_is_refused_with_its_path(quick_compare, tmp_path, data_dir, capsys):
    from bertcourse.cli import main
    from bertcourse.training.finetune import FinetuneError, FinetuneOptions, finetune

    base, _ = quick_compare
    runs = tmp_path / "runs"
    for arch in C.ARCHS:
        shutil.copytree(base / "runs" / f"pretrain-{arch}-{PROFILE}", runs / f"pretrain-{arch}-{PROFILE}")
    first = C.run_plan(1)[0]
    folder = first.folder(runs, PROFILE)
    finetune(FinetuneOptions(arch=first.arch, regime=first.regime, init=first.init, profile=PROFILE, out_dir=folder,
                             pretrained=runs / f"pretrain-{first.arch}-{PROFILE}", data_dir=data_dir,
                             max_steps=2, progress=False))
    with pytest.raises(FinetuneError, match=str(folder)):
        C.compare(PROFILE, out=tmp_path / "results", runs_dir=runs, data_dir=data_dir, progress=False)
    code = main(["compare", "--profile", PROFILE, "--runs-dir", str(runs), "--out", str(tmp_path / "results"),
                 "--data-dir", str(data_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and str(folder) in err and "other settings" in err and "Traceback" not in err
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_public_checkpoint_adds_rows_tests_and_an_estimated_cost(quick_compare, tmp_path, data_dir):
    """A save_pretrained checkpoint as a public row: the course's runs reused, its three regimes trained the
    same way, tested against the course's pretrained row of its arch, its cost marked as not known."""
    from hf_support import tiny_bert

    base, uninterrupted = quick_compare
    runs = tmp_path / "runs"
    shutil.copytree(base / "runs", runs)
    folder = tiny_bert(tmp_path / "tiny")
    results = C.compare(PROFILE, out=tmp_path / "results", runs_dir=runs, data_dir=data_dir, progress=False,
                        public=[str(folder)])
    public = [r for r in results["rows"] if r.get("public")]
    assert [r["regime"] for r in public] == list(C.REGIMES) and all(r["name"].startswith("hf-tiny ") for r in public)
    assert all(set(r) >= set(results["rows"][0]) for r in public)  # the course rows' fields, and more
    kinds = [t["kind"] for t in results["tests"]]
    assert kinds.count("public vs course") == 3 and len(kinds) == 15
    assert {(t["a"], t["b"]) for t in results["tests"] if t["kind"] == "public vs course"} == {
        (f"hf-tiny {r} pretrained", f"bert {r} pretrained") for r in C.REGIMES}
    course_rows = [r for r in results["rows"] if not r.get("public")]
    assert _without_timing(course_rows) == _without_timing(uninterrupted["rows"])
    assert results["public"]["checkpoints"]["hf-tiny"]["tokens_seen"] is None
    markdown = (tmp_path / "results" / "results.md").read_text()
    assert "hf-tiny (BERT, public)" in markdown and "ESTIMATES from the published recipe" in markdown
