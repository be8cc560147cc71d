"""Lesson 6's runner end to end on the real corpus (bertcourse.after_bert.runner): a run measures what it says,
a second call with the same settings reads the run folder back, ELECTRA's steps are matched in FLOPs."""

from __future__ import annotations

import pytest

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
