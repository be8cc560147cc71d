"""`bertcourse labels`: accuracy against the number of labels (`bertcourse.training.data_efficiency`).

Fast tests check the label subsets (seeded, nested across budgets, dev carved from the labels) and that
early stopping leaves the best dev weights. The end-to-end tests run cpu-quick with tiny budgets and
barely pretrained checkpoints, in temporary folders: the report's schema, a run killed part-way and
resumed (finished runs reused), a folder from other settings refused, and that the validation labels
never choose anything (permuted, they change the scores only).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertcourse.training import data_efficiency as D

PROFILE = "cpu-quick"
BUDGETS = [20, 40]
SEEDS = 2
RECIPE = D.LabelRecipe(max_steps=6, evaluations=3, patience=2)


# ----------------------------------------------------------------------------- label subsets (fast)


def test_label_subsets_are_nested_seeded_and_carve_the_dev_split_from_the_labels():
    recipe = D.LabelRecipe()
    previous = (set(), set())
    for budget in (10, 50, 300, 1000, 6000, 20000):
        train, dev = D.labelled_rows(67_349, budget, 3, recipe)
        assert len(train) + len(dev) == budget and not set(train) & set(dev)
        assert len(dev) == min(budget // 5, 1000)  # every 5th row, at most 1,000
        assert previous[0] <= set(train) and previous[1] <= set(dev)  # nested: the smaller budget's rows kept
        previous = (set(train), set(dev))
    assert D.labelled_rows(67_349, 50, 3, recipe) == D.labelled_rows(67_349, 50, 3, recipe)
    assert set(sum(D.labelled_rows(67_349, 50, 4, recipe), [])) != set(sum(D.labelled_rows(67_349, 50, 3, recipe), []))
    train, dev = D.labelled_rows(67_349, 3, 0, recipe)  # below dev_every: one dev row still
    assert len(train) == 2 and len(dev) == 1
    everything = sum(D.labelled_rows(100, 100, 0, recipe), [])
    assert sorted(everything) == list(range(100))


def test_budgets_and_models_are_parsed_or_refused_with_what_was_wrong():
    assert D.parse_budgets(["300", 50, "all", "1,000", 50], 67_349) == [50, 300, 1000, 67_349]
    for bad, message in ((["0"], "from 2 to 67,349"), (["70000"], "from 2 to"), (["ten"], "not a whole number"),
                         ([], "no label budget")):
        with pytest.raises(D.LabelCurveError, match=message):
            D.parse_budgets(bad, 67_349)
    assert D.parse_model("gpt") == D.CurveModel("gpt", "gpt")
    assert D.parse_model("tiny=hf:google/bert_uncased_L-2_H-128_A-2") == D.CurveModel(
        "tiny", "bert", "hf:google/bert_uncased_L-2_H-128_A-2")
    assert D.parse_model("mine:gpt=runs/x").arch == "gpt"
    with pytest.raises(D.LabelCurveError, match="NAME=PRETRAINED"):
        D.parse_model("roberta")
    from bertcourse.course import load_course

    public = load_course().public_checkpoints  # course.yml's names: the hub id and the arch it states
    tiny = D.CurveModel("bert-tiny", "bert", "hf:google/bert_uncased_L-2_H-128_A-2")
    assert D.parse_model("bert-tiny", public) == tiny
    assert D.parse_model("pythia-14m", public).arch == "gpt" and D.parse_model("pythia-14m", public).arch_given
    with pytest.raises(D.LabelCurveError, match=r"a public checkpoint \(bert-tiny, bert-mini, pythia-14m, minilm-l6\)"):
        D.parse_model("bert-huge", public)


def test_early_stopping_keeps_the_weights_with_the_best_dev_accuracy():
    """A tiny classifier on a task it can learn (label = whether token 7 occurs); the returned model's dev
    accuracy is the best on its dev curve, and training stops once `patience` checks bring nothing."""
    from bertcourse.classifier import build_classifier
    from bertcourse.config import ModelConfig
    from bertcourse.model import build_model
    from bertcourse.training.data_efficiency import _dev_scores

    generator = torch.Generator().manual_seed(0)

    def rows(n):
        ids = torch.randint(8, 40, (n, 6), generator=generator)
        labels = torch.randint(0, 2, (n,), generator=generator)
        ids[labels == 1, 2] = 7
        return [[2, *r, 3] for r in ids.tolist()], labels

    torch.manual_seed(0)
    model = build_classifier(build_model(ModelConfig(vocab_size=40, n_layers=1, d_model=16, n_heads=2, d_ff=32,
                                                     max_seq_len=16)), "full", dropout=0.0)
    dev = rows(40)
    result = D.train_with_dev(model, rows(200), dev, learning_rate=3e-3, batch_size=16, weight_decay=0.0,
                              warmup_fraction=0.1, recipe=D.LabelRecipe(evaluations=30, patience=4),
                              steps_cap=300, seed=0, device=torch.device("cpu"), precision="fp32")
    curve = result["dev_curve"]
    best = max(curve["dev_accuracy"])
    assert best > 0.9  # it learned the task
    assert _dev_scores(model, *dev, torch.device("cpu"))[0] == best
    assert curve["step"][curve["dev_accuracy"].index(best)] <= result["selected_step"]
    if result["stopped_early"]:
        after = [a for s, a in zip(curve["step"], curve["dev_accuracy"]) if s > result["selected_step"]]
        assert len(after) == 4 and max(after) <= best


def test_a_frozen_first_part_trains_the_head_alone_then_the_whole_model():
    """`frozen_fraction` (LP-FT): during its steps the encoder's weights do not move while the head's do, patience
    does not run out before the encoder trains, and the model comes back with every parameter trainable."""
    from bertcourse.classifier import build_classifier
    from bertcourse.config import ModelConfig
    from bertcourse.model import build_model

    generator = torch.Generator().manual_seed(0)
    ids = [[2, *r, 3] for r in torch.randint(8, 40, (64, 6), generator=generator).tolist()]
    labels = torch.randint(0, 2, (64,), generator=generator)  # random labels: nothing to learn, dev stays flat
    torch.manual_seed(0)
    model = build_classifier(build_model(ModelConfig(vocab_size=40, n_layers=1, d_model=16, n_heads=2, d_ff=32,
                                                     max_seq_len=16)), "full", dropout=0.0)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    seen = {}  # training step -> (an encoder weight, the head's weight) as that step's forward sees them

    def record(module, inputs):
        if model.training:  # the steps, not the dev checks (which run in eval mode)
            seen[len(seen) + 1] = (model.encoder.embeddings.token_embedding.weight.detach().clone(),
                                   module.weight.detach().clone())

    model.classifier.register_forward_pre_hook(record)
    recipe = D.LabelRecipe(evaluations=20, patience=2, frozen_fraction=0.5)
    result = D.train_with_dev(model, (ids[:48], labels[:48]), (ids[48:], labels[48:]), learning_rate=1e-2,
                              batch_size=8, weight_decay=0.01, warmup_fraction=0.1, recipe=recipe, steps_cap=40,
                              seed=0, device=torch.device("cpu"), precision="fp32")
    assert result["planned_steps"] == 40 and result["frozen_steps"] == 20
    assert result["steps_run"] > 20  # patience (2 checks) did not stop it while only the head trained
    first = seen[1]
    assert torch.equal(first[0], start["encoder.embeddings.token_embedding.weight"])
    head_moved = [s for s in sorted(seen) if not torch.equal(seen[s][1], first[1])]
    encoder_moved = [s for s in sorted(seen) if not torch.equal(seen[s][0], first[0])]
    assert head_moved and min(head_moved) == 2  # the head learns from the first step
    assert encoder_moved and min(encoder_moved) == 22  # the encoder from step 21 (seen by step 22's forward)
    assert all(p.requires_grad for p in model.parameters())


# ----------------------------------------------------------------------------- end to end (cpu-quick, slow)


@pytest.fixture(scope="module")
def pretrained_runs(tmp_path_factory, corpus, quick_tokenizer):
    """Two-step BERT and GPT pretraining runs (what compare's folders hold), made here in seconds."""
    from bertcourse.data import Corpus
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    runs = tmp_path_factory.mktemp("labels-runs")
    small = Corpus(corpus.train[:800], corpus.heldout[:40], corpus.source)
    for arch in ("bert", "gpt"):
        pretrain(PretrainOptions(arch=arch, profile=PROFILE, out_dir=runs / f"pretrain-{arch}-{PROFILE}",
                                 max_steps=2, eval_every=2, checkpoint_every=2, progress=False),
                 corpus=small, tokenizer=quick_tokenizer)
    return runs


def _copy_pretraining(source, target):
    for arch in ("bert", "gpt"):
        shutil.copytree(source / f"pretrain-{arch}-{PROFILE}", target / f"pretrain-{arch}-{PROFILE}")


@pytest.fixture(scope="module")
def quick_curve(pretrained_runs, tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("labels-results")
    results = D.label_curve(PROFILE, BUDGETS, seeds=SEEDS, out=out, recipe=RECIPE, runs_dir=pretrained_runs,
                            data_dir=data_dir, progress=False)
    return out, results


def _without_timing(value):
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items()
                if k not in ("timing", "train_seconds", "folders", "folder", "pretrained")}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


@pytest.mark.slow
def test_the_report_holds_every_point_with_intervals_and_the_recipe(quick_curve, pretrained_runs):
    out, results = quick_curve
    assert set(results) == set(D.RESULTS_FIELDS) and D.load_results(out) == results
    assert (out / "accuracy_vs_labels.png").stat().st_size > 5000
    rows = {(r["model"], r["kind"], r["budget"]): r for r in results["rows"]}
    expected = {(m, i, n) for m in ("bert", "gpt") for i in D.INITS for n in BUDGETS}
    assert set(rows) == expected | {("TF-IDF", "tfidf", n) for n in BUDGETS}
    for key, row in rows.items():
        acc = row["accuracy"]
        assert len(acc["per_seed"]) == SEEDS and acc["mean"] == pytest.approx(np.mean(acc["per_seed"]))
        assert acc["interval"][0] <= acc["mean"] <= acc["interval"][1]
        if key[1] != "tfidf":
            assert row["train_rows"] + row["dev_rows"] == key[2] and row["dev_rows"] == key[2] // 5
            assert all(1 <= s <= p <= RECIPE.max_steps for s, p in zip(row["selected_step"], row["planned_steps"]))
            assert all(str(pretrained_runs / f"labels-{PROFILE}") in f for f in row["folders"])
    # a run's predictions on disk are those its row scores
    folder = rows[("gpt", "scratch", 40)]["folders"][1]
    predicted = np.loadtxt(f"{folder}/predictions.tsv", delimiter="\t", skiprows=1, usecols=(1,), dtype=int)
    assert len(predicted) == results["validation_sentences"] == 872
    assert len(results["tests"]) == 2 * 2 * len(BUDGETS)
    assert all(0 < t["p"] <= t["p_holm"] <= 1 for t in results["tests"])
    markdown = (out / "results.md").read_text()
    for words in ("dev split", "never seen", "every 5th", "6 steps", "TF-IDF", "Paired tests", "| 40 |"):
        assert words in markdown, words
    # what each pretraining cost, counted from its run (2 steps of 32 blocks: at most 2 x 32 x 64 tokens)
    for m in results["models"]:
        cost = m["pretraining"]
        assert cost["steps"] == 2 and 0 < cost["tokens_seen"] <= 2 * 32 * 64 and cost["flops"] > 0
        assert f"| {m['name']} | {cost['parameters']:,} | 2 | {cost['tokens_seen']:,} |" in markdown


@pytest.mark.slow
def test_a_killed_run_resumes_reusing_finished_runs_with_the_same_results(quick_curve, pretrained_runs, tmp_path,
                                                                         data_dir):
    _, uninterrupted = quick_curve
    runs = tmp_path / "runs"
    _copy_pretraining(pretrained_runs, runs)
    plan = D.run_plan([D.parse_model("bert"), D.parse_model("gpt")], BUDGETS, SEEDS)
    done = len(plan) - 3
    for run in plan[:done]:
        shutil.copytree(run.folder(pretrained_runs, PROFILE), run.folder(runs, PROFILE))
    trained = []

    def kill_after_one(run, reused):
        if not reused:
            trained.append(run)
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        D.label_curve(PROFILE, BUDGETS, seeds=SEEDS, out=tmp_path / "out", recipe=RECIPE, runs_dir=runs,
                      data_dir=data_dir, progress=False, after_run=kill_after_one)
    assert trained == [plan[done]] and not (tmp_path / "out").exists()
    stamps = {run: run.folder(runs, PROFILE).joinpath("metrics.json").stat().st_mtime_ns for run in plan[:done + 1]}
    seen = {}
    resumed = D.label_curve(PROFILE, BUDGETS, seeds=SEEDS, out=tmp_path / "out", recipe=RECIPE, runs_dir=runs,
                            data_dir=data_dir, progress=False, after_run=seen.__setitem__)
    assert [run for run in plan if seen[run]] == plan[:done + 1]  # reused, the killed run's finished one too
    assert all(run.folder(runs, PROFILE).joinpath("metrics.json").stat().st_mtime_ns == stamp
               for run, stamp in stamps.items())
    assert _without_timing(resumed) == _without_timing(uninterrupted)


@pytest.mark.slow
def test_a_later_first_seed_gives_those_seeds_runs_and_rows(quick_curve, pretrained_runs, tmp_path, data_dir, capsys):
    """`--first-seed 1 --seeds 1` is the second seed of the two-seed curve: its runs (reused, nothing trains), its
    TF-IDF rows and its scores, and the report names the seed."""
    from bertcourse.cli import main

    _, both = quick_curve
    seen = {}
    later = D.label_curve(PROFILE, BUDGETS, seeds=1, first_seed=1, out=tmp_path / "out", recipe=RECIPE,
                          runs_dir=pretrained_runs, data_dir=data_dir, progress=False, after_run=seen.__setitem__)
    assert {run.seed for run in seen} == {1} and all(seen.values())  # seed 1 only, every run reused
    assert later["first_seed"] == 1 and both["first_seed"] == 0
    second = {(r["model"], r["kind"], r["budget"]): r["accuracy"]["per_seed"][1] for r in both["rows"]}
    assert {(r["model"], r["kind"], r["budget"]): r["accuracy"]["per_seed"][0] for r in later["rows"]} == second
    assert "(seed 1; 95% interval)" in (tmp_path / "out" / "results.md").read_text()
    assert main(["labels", "--profile", PROFILE, "--budgets", "20", "--first-seed", "-1", "--runs-dir",
                 str(tmp_path), "--data-dir", str(data_dir)]) == 2
    assert "--first-seed must be 0 or more, got -1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_course_checkpoint_given_by_its_path_is_read_as_its_own_arch(pretrained_runs, tmp_path, data_dir):
    """`--model mine=FOLDER` of a course GPT runs as a GPT (its last token pooled) without `mine:gpt=`; a stated
    arch that contradicts the checkpoint is refused."""
    from bertcourse.training.finetune import FinetuneError

    gpt = pretrained_runs / f"pretrain-gpt-{PROFILE}"
    results = D.label_curve(PROFILE, [20], seeds=1, models=[f"mine={gpt}"], out=tmp_path / "out", recipe=RECIPE,
                            runs_dir=tmp_path / "runs", data_dir=data_dir, progress=False)
    assert results["models"][0]["arch"] == "gpt" and {r.get("arch") for r in results["rows"]} == {"gpt", None}
    with pytest.raises(FinetuneError, match="holds a gpt model, not a bert"):
        D.label_curve(PROFILE, [20], seeds=1, models=[f"mine:bert={gpt}"], out=tmp_path / "x", recipe=RECIPE,
                      runs_dir=tmp_path / "runs", data_dir=data_dir, progress=False)


@pytest.mark.slow
def test_a_reused_pretraining_of_another_length_is_named_in_one_notice(pretrained_runs, tmp_path, capsys):
    """A finished pretraining folder is reused as it is (never silently retrained); when its steps are not the
    profile's (written before the profile changed, or by a shorter run) one line says so and how to start anew."""
    from bertcourse.training.compare import ensure_pretrained

    runs = tmp_path / "runs"
    _copy_pretraining(pretrained_runs, runs)
    stamp = (runs / f"pretrain-bert-{PROFILE}" / "metrics.json").stat().st_mtime_ns
    assert ensure_pretrained("bert", PROFILE, runs) == runs / f"pretrain-bert-{PROFILE}"
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("notice: reusing the bert pretraining in ")
    assert ": 2 steps, where profile cpu-quick asks for 60; move the folder away" in out
    assert (runs / f"pretrain-bert-{PROFILE}" / "metrics.json").stat().st_mtime_ns == stamp  # reused, not rewritten
    metrics = runs / f"pretrain-gpt-{PROFILE}" / "metrics.json"
    summary = json.loads(metrics.read_text())
    summary["history"]["step"][-1] = 60  # the profile's length: reused without a word
    metrics.write_text(json.dumps(summary))
    ensure_pretrained("gpt", PROFILE, runs)
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_the_validation_labels_choose_nothing(pretrained_runs, tmp_path, data_dir, monkeypatch):
    """The same run with the validation labels permuted: the same dev curve, chosen step and predictions.
    (The run key leaves them out for the same reason: they cannot change a run.)"""
    import bertcourse.training.finetune as F

    def run(folder):
        runs = folder / "runs"
        _copy_pretraining(pretrained_runs, runs)
        results = D.label_curve(PROFILE, [40], seeds=1, models=["bert"], out=folder / "out", recipe=RECIPE,
                                runs_dir=runs, data_dir=data_dir, progress=False)
        (row,) = [r for r in results["rows"] if r["kind"] == "pretrained"]
        (path,) = row["folders"]
        return row, json.loads(Path(path, "metrics.json").read_text()), Path(path, "predictions.tsv").read_text()

    honest = run(tmp_path / "honest")
    encode = F.encode_sst2

    called = []

    def permuted(*args, **kwargs):
        called.append(True)
        data = encode(*args, **kwargs)
        data.validation_labels = data.validation_labels[torch.randperm(len(data.validation_labels),
                                                                       generator=torch.Generator().manual_seed(0))]
        return data

    monkeypatch.setattr(F, "encode_sst2", permuted)
    shuffled = run(tmp_path / "shuffled")
    assert honest[1]["dev_curve"] == shuffled[1]["dev_curve"] and honest[2] == shuffled[2]
    assert honest[1]["selected_step"] == shuffled[1]["selected_step"] and called


@pytest.mark.slow
def test_a_folder_from_other_settings_is_refused_with_its_path(quick_curve, pretrained_runs, tmp_path, data_dir,
                                                               capsys):
    from bertcourse.cli import main

    runs = tmp_path / "runs"
    _copy_pretraining(pretrained_runs, runs)
    first = D.run_plan([D.parse_model("bert")], BUDGETS, 1)[0]
    shutil.copytree(first.folder(pretrained_runs, PROFILE), first.folder(runs, PROFILE))
    args = ["labels", "--profile", PROFILE, "--budgets", "20", "--seeds", "1", "--model", "bert",
            "--runs-dir", str(runs), "--out", str(tmp_path / "out"), "--data-dir", str(data_dir), "--no-progress"]
    code = main(args + ["--max-steps", "7"])  # the copied run took 6
    err = capsys.readouterr().err
    assert code == 2 and str(first.folder(runs, PROFILE)) in err and "other settings" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert main(["labels", "--budgets", "1", "--profile", PROFILE, "--data-dir", str(data_dir)]) == 2
    assert "budget '1'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_recipes_levers_train_as_asked_beside_the_default_runs(quick_curve, pretrained_runs, tmp_path, data_dir,
                                                                               monkeypatch, capsys):
    """The levers benchmarks/README.md measures (`--learning-rate`, `--pooling`, `--frozen-fraction`, `--layer-decay`):
    their runs train as asked, in folders of their own next to the default's (which keep their keys: reused, not
    refused), and the report says the recipe."""
    from dataclasses import replace

    from bertcourse.cli import main

    runs = tmp_path / "runs"
    _copy_pretraining(pretrained_runs, runs)
    first = D.run_plan([D.parse_model("bert")], BUDGETS, 1)[0]  # made by quick_curve at the profile's rate
    shutil.copytree(first.folder(pretrained_runs, PROFILE), first.folder(runs, PROFILE))
    assert "learning_rate" not in RECIPE.settings()  # the keys of the runs made before the option
    rates = []
    train = D.train_with_dev
    monkeypatch.setattr(D, "train_with_dev", lambda *a, **kw: rates.append(kw["learning_rate"]) or train(*a, **kw))

    def curve(recipe):
        return D.label_curve(PROFILE, [first.budget], seeds=1, models=["bert"], out=tmp_path / f"out{recipe.tag}",
                             recipe=recipe, runs_dir=runs, data_dir=data_dir, progress=False)

    default = curve(RECIPE)["recipe"]["learning_rate"]
    assert rates == [default]  # the copied pretrained run reused; only scratch trained
    assert curve(replace(RECIPE, learning_rate=3e-4))["recipe"]["learning_rate"] == 3e-4 != default
    assert rates[1:] == [3e-4, 3e-4]  # pretrained and scratch, at the rate asked for
    assert first.folder(runs, PROFILE, "-lr0.0003").joinpath("metrics.json").is_file()
    assert (tmp_path / "out-lr0.0003" / "results.json").is_file()
    monkeypatch.chdir(tmp_path)
    assert main(["labels", "--profile", PROFILE, "--budgets", "20", "--seeds", "1", "--model", "bert", "--runs-dir",
                 str(runs), "--data-dir", str(data_dir), "--no-progress", "--max-steps", "3",
                 "--learning-rate", "5e-4"]) == 0
    assert rates[3:] == [5e-4, 5e-4]
    assert D.load_results(tmp_path / "results" / f"labels-{PROFILE}-lr0.0005")["recipe"]["learning_rate"] == 5e-4
    assert f"labels-{PROFILE}-lr0.0005" in capsys.readouterr().out

    # the other two levers: what the head reads, and a frozen first part (LP-FT), in folders of their own
    import bertcourse.classifier as C

    poolings = []
    build = C.build_classifier
    monkeypatch.setattr(C, "build_classifier", lambda *a, **kw: poolings.append(kw["pooling"]) or build(*a, **kw))
    levers = replace(RECIPE, pooling="mean", frozen_fraction=0.5)
    assert levers.tag == "-poolmean-frozen0.5"
    assert curve(levers)["recipe"]["pooling"] == "mean" and poolings == ["mean", "mean"]
    saved = json.loads(first.folder(runs, PROFILE, levers.tag).joinpath("metrics.json").read_text())
    assert saved["frozen_steps"] == 3 and saved["settings"]["recipe"]["frozen_fraction"] == 0.5  # of 6 planned
    said = (tmp_path / f"out{levers.tag}" / "results.md").read_text()
    assert "reads the mean of the final states" in said and "first 50% of each run's planned steps" in said
    assert "reads the architecture's vector" in (tmp_path / "out" / "results.md").read_text()

    # layer-wise learning-rate decay: the optimizer of both runs is built with the factor asked for
    import bertcourse.training.optim as O

    factors = []
    scale = O.layerwise_lr_scale
    monkeypatch.setattr(O, "layerwise_lr_scale", lambda model, decay: factors.append(decay) or scale(model, decay))
    decayed = replace(RECIPE, layer_decay=0.5)
    assert decayed.tag == "-layerdecay0.5" and decayed.settings()["layer_decay"] == 0.5
    assert curve(decayed)["recipe"]["layer_decay"] == 0.5 and factors == [0.5, 0.5]
    assert first.folder(runs, PROFILE, decayed.tag).joinpath("metrics.json").is_file()
    assert "Layer-wise learning-rate decay 0.5" in (tmp_path / f"out{decayed.tag}" / "results.md").read_text()
    assert "layer_decay" not in RECIPE.settings() and "Layer-wise" not in (tmp_path / "out" / "results.md").read_text()
    for wrong, refusal in ((["--frozen-fraction", "1"], "--frozen-fraction must be at least 0 and below 1"),
                           (["--learning-rate", "0"], "--learning-rate must be positive"),
                           (["--pooling", "max"], "--pooling must be one of cls, last, mean"),
                           (["--layer-decay", "0"], "--layer-decay must be above 0 and at most 1")):
        assert main(["labels", "--profile", PROFILE, "--budgets", "20", "--runs-dir", str(runs), "--data-dir",
                     str(data_dir), *wrong]) == 2
        assert refusal in capsys.readouterr().err
