"""Lesson 6's runner end to end on the real corpus (bertcourse.after_bert.runner): a run measures what it says,
a second call with the same settings reads the run folder back, ELECTRA's steps are matched in FLOPs."""

from __future__ import annotations

import pytest
import torch

from bertcourse.after_bert.runner import AfterBertError, read_result, result_from_summary, results_table, run_variant


@pytest.fixture
def real_data(data_dir, monkeypatch):
    monkeypatch.setenv("BERTCOURSE_DATA", str(data_dir))
    return data_dir


@pytest.mark.slow
def test_a_pair_run_measures_and_is_reused(real_data, tmp_path):
    options = {"profile": "cpu-quick", "steps": 4, "probe_rows": 300, "heldout_pairs": 60, "out_root": tmp_path,
               "progress": False}
    first = run_variant("mlm+sop", **options)
    assert first.model is not None and first.steps == 4 and len(first.history["sop"]) == 4
    low, high = first.aux["interval"]
    assert first.aux["task"] == "sop" and first.aux["pairs"] >= 60 and 0 <= low <= first.aux["accuracy"] <= high <= 1
    assert first.mlm["targets"] > 0 and first.rtd is None
    assert first.mlm["loss_sd"] > 0 and 0 < first.mlm["unigram"]["accuracy"] < 1  # the loss's interval, the floor
    assert set(first.probe) == {"cls", "mean"} and first.probe["cls"]["train_rows"] == 300
    assert first.parameters > first.encoder_parameters  # the pair head is not part of the kept BERT
    again = run_variant("mlm+sop", **options)
    assert again.model is None and again.key == first.key and again.probe == first.probe and again.aux == first.aux
    assert read_result(first.out_dir, "another key") is None
    assert "SOP" in results_table([again, result_from_summary(first.summary())])


@pytest.mark.slow
def test_electra_trains_the_steps_its_flops_allow(real_data, tmp_path):
    result = run_variant("electra", profile="cpu-quick", steps=10, probe_rows=300, out_root=tmp_path, progress=False)
    matched = result.settings["matched_compute"]
    assert matched["mlm_budget_steps"] == 10 and matched["mlm_flops_per_step"] < result.flops_per_step
    assert result.steps == round(10 * matched["mlm_flops_per_step"] / result.flops_per_step) < 10
    assert result.mlm is None and result.generator_mlm["targets"] > 0
    assert 0 < result.rtd["replaced_fraction"] < 0.2 and 0 <= result.rtd["accuracy"] <= 1
    rtd = result.rtd  # the headline is one always-"original" cannot reach: AUC and balanced accuracy, 0.5 for it
    assert rtd["auc_interval"][0] <= rtd["auc"] <= rtd["auc_interval"][1] and 0 <= rtd["balanced_accuracy"] <= 1


@pytest.mark.slow
def test_a_continued_run_starts_from_the_profiles_pretrained_bert(real_data, tmp_path, monkeypatch):
    """cpu-quick's tokenizer is not the shipped BERT's, so its own pretraining (made here, seconds) is the start;
    with no steps the continued run is that BERT, scored as itself."""
    from bertcourse.after_bert.runner import course_data, pretrained_bert
    from bertcourse.training.heldout import evaluate

    monkeypatch.setenv("BERTCOURSE_RUNS", str(tmp_path / "runs"))
    result = run_variant("mlm+nsp", profile="cpu-quick", start="pretrained", steps=0, probe_rows=300,
                         heldout_pairs=200, out_root=tmp_path / "after-bert", progress=False)
    bert, source = pretrained_bert("cpu-quick")
    assert result.start == "pretrained" and result.label == "mlm+nsp (continued)"
    assert result.settings["start"] == source and "cpu-quick profile's pretrained BERT" in source["name"]
    assert result.mlm["loss"] == pytest.approx(evaluate(bert, course_data("cpu-quick").heldout, "cpu")["loss"])
    assert len(result.mlm["target_losses"]) == len(result.mlm["target_blocks"]) == result.mlm["targets"]
    assert len(result.probe["mean"]["correct"]) == 872
    scratch = run_variant("mlm+nsp", profile="cpu-quick", steps=0, probe_rows=300, heldout_pairs=200,
                          out_root=tmp_path / "after-bert", progress=False)
    assert scratch.key != result.key and scratch.mlm["loss"] > result.mlm["loss"]


def test_the_shipped_bert_is_the_start_where_it_reads_the_profiles_ids(monkeypatch):
    """On the cpu profiles (the shipped BERT's tokenizer and shape) no pretraining is made: the shipped one is used."""
    from types import SimpleNamespace

    from bertcourse.after_bert import runner
    from bertcourse.config import ModelConfig
    from bertcourse.training.checkpoint import load_shipped

    model, tokenizer, card = load_shipped("bert", "cpu-long")
    shared = SimpleNamespace(tokenizer=tokenizer, config=ModelConfig.from_dict(card["settings"]["model_config"]),
                             profile="cpu", course=None)
    monkeypatch.setattr(runner, "course_data", lambda profile=None: shared)
    bert, source = runner.pretrained_bert("cpu")
    assert source["steps"] == 18000 and source["sha256"] == card["sha256"]["model.safetensors"]
    assert all(torch.equal(a, b) for a, b in zip(bert.state_dict().values(), model.state_dict().values()))


def test_a_variant_of_another_shape_cannot_continue_the_pretrained_bert():
    with pytest.raises(AfterBertError, match="'albert' changes the model's shape"):
        run_variant("albert", start="pretrained")


def test_an_unknown_variant_is_refused_by_name():
    with pytest.raises(AfterBertError, match="unknown variant 'xlnet'"):
        run_variant("xlnet")


def test_the_committed_cpu_measurements_read_back():
    """The figures lesson 6 quotes: every variant, ELECTRA on fewer steps than MLM, intervals around values."""
    from bertcourse.after_bert.runner import VARIANTS, measured_results

    measured = measured_results()
    results = {r.variant: r for r in measured["results"]}
    assert {"random", "mlm"} <= set(results) <= set(VARIANTS) and measured["profile"] == "cpu"
    assert results["mlm"].steps == measured["sizes"]["training_steps"]
    if "electra" in results:
        electra = results["electra"]
        assert electra.steps < results["mlm"].steps
        assert electra.steps == round(results["mlm"].steps * electra.settings["matched_compute"][
            "mlm_flops_per_step"] / electra.flops_per_step)
    for result in results.values():
        for scores in result.probe.values():
            low, high = scores["accuracy_interval"]
            assert low <= scores["accuracy"] <= high and scores["train_rows"] == measured["sizes"]["probe_rows"]
    assert results["albert"].parameters < results["albert-shared"].parameters < results["mlm"].parameters
    assert results_table(measured["results"]).count("\n") == len(results) + 1
