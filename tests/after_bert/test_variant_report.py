"""Lesson 6's read-out of the variants: scores with intervals and verdicts that follow the intervals."""

from types import SimpleNamespace

import numpy as np

from bertcourse.after_bert.variant_report import compare_report, pair_task_lines, score, verdicts


def hits(accuracy, seed):
    """Per-sentence hits of a probe over 872 sentences, independent draws per run (seeded)."""
    return (np.random.default_rng(seed).permutation(872) < round(accuracy * 872)).astype(int).tolist()


def run(mlm_accuracy, cls, mean, targets=1000, aux=None, seed=0):
    probe = {"cls": {"accuracy": cls[0], "accuracy_interval": cls[1:], "correct": hits(cls[0], seed)},
             "mean": {"accuracy": mean[0], "accuracy_interval": mean[1:], "correct": hits(mean[0], seed + 100)}}
    mlm = None if mlm_accuracy is None else {"accuracy": mlm_accuracy, "targets": targets, "loss": 6.0}
    return SimpleNamespace(mlm=mlm, probe=probe, aux=aux)


RUNS = {
    "mlm": run(0.20, (0.60, 0.57, 0.63), (0.60, 0.57, 0.63)),
    "better": run(0.30, (0.70, 0.67, 0.73), (0.61, 0.58, 0.64),
                  aux={"task": "sop", "pairs": 200, "accuracy": 0.5, "interval": (0.43, 0.57)}, seed=1),
    "electra": run(None, (0.50, 0.47, 0.53), (0.60, 0.57, 0.63), seed=2),
}


def test_score_gives_a_wilson_interval_for_masked_tokens_and_none_without_an_mlm_head():
    accuracy, low, high = score(RUNS["mlm"], "mlm")
    assert accuracy == 0.20 and 0.17 < low < 0.20 < high < 0.23
    assert score(RUNS["electra"], "mlm") is None
    assert score(RUNS["better"], "cls") == (0.70, 0.67, 0.73)


def test_probe_verdicts_follow_the_paired_test_in_both_directions():
    """(The masked-LM verdict reads the loss: tests/training/test_verdicts.py plants those numbers.)"""
    lines = verdicts("better", "mlm", RUNS, ("cls", "mean")).splitlines()
    assert lines[0].endswith("better is ahead") and "paired over 872 sentences" in lines[0]
    assert lines[1].endswith("cannot tell the two apart")  # 0.01 apart on independent sentences: within the noise
    assert verdicts("electra", "mlm", RUNS, ("cls",)).endswith("mlm is ahead")
    assert "masked-LM" not in verdicts("electra", "mlm", RUNS, ("mlm", "cls"))  # no MLM head: that measure is skipped
    assert verdicts("rope", "mlm", RUNS) == "  (not measured)"


def test_the_report_names_each_place_and_the_pair_task_lines_only_runs_that_have_one():
    places = {"this run (cpu-quick)": RUNS, "measured on the cpu profile": {"mlm": RUNS["mlm"]}}
    report = compare_report("mlm", ["better"], places, ("cls",))
    assert report.splitlines()[0] == "this run (cpu-quick), better against mlm:"
    assert "measured on the cpu profile, better against mlm:\n  (not measured)" in report
    assert pair_task_lines(places, ("better", "mlm")) == (
        "this run (cpu-quick): better on its own task (SOP), 200 held-out pairs: accuracy 0.500 [0.430, 0.570]: "
        "AT CHANCE: this run did not learn its task (its interval holds 50%)")
