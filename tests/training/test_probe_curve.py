"""The probe curve: frozen mean-pooled features of each encoder, logistic regression on the same nested rows
as `bertcourse labels` and TF-IDF, paired tests; and the verdict lines lessons print from any curve's tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertcourse.course import load_course
from bertcourse.model import build_model
from bertcourse.training.data_efficiency import LabelRecipe, labelled_rows
from bertcourse.training.data_efficiency_report import curve_table, verdict_lines
from bertcourse.training.probe_curve import ProbeEncoder, probe_curve, sentence_vectors


def test_verdicts_follow_holms_p_not_the_raw_one():
    tests = [{"kind": "pretrained vs scratch", "budget": 100, "a": "bert pretrained 100", "b": "bert scratch 100",
              "difference": 0.05, "interval": [0.01, 0.09], "p": 0.01, "p_holm": 0.04},
             {"kind": "pretrained vs TF-IDF", "budget": 300, "a": "bert pretrained 300", "b": "TF-IDF tfidf 300",
              "difference": 0.03, "interval": [0.001, 0.06], "p": 0.02, "p_holm": 0.06}]
    lines = verdict_lines({"tests": tests, "statistics": {"alpha": 0.05}})
    assert lines[0].endswith("beyond the noise") and "+5.0 points (+1.0 to +9.0)" in lines[0]
    assert lines[1].endswith("within the noise") and "bert pretrained - TF-IDF tfidf" in lines[1]
    assert verdict_lines({"tests": tests}, kinds=["pretrained vs TF-IDF"]) == lines[1:]


@pytest.mark.slow
def test_a_probe_curve_reads_each_encoder_once_and_scores_the_labels_rows(quick_tokenizer, data_dir):
    config = load_course().profile("cpu-quick").model.for_arch("bert", vocab_size=len(quick_tokenizer))
    torch.manual_seed(0)
    pretrained, random = build_model(config), build_model(config)
    results = probe_curve([ProbeEncoder("tiny", pretrained, random, quick_tokenizer)], budgets=[40, 80], seeds=2,
                          data_dir=data_dir, progress=False)
    kinds = {(r["model"], r["kind"], r["budget"]) for r in results["rows"]}
    assert kinds == {("tiny", "pretrained", 40), ("tiny", "pretrained", 80), ("tiny", "scratch", 40),
                     ("tiny", "scratch", 80), ("TF-IDF", "tfidf", 40), ("TF-IDF", "tfidf", 80)}
    for row in results["rows"]:
        assert len(row["accuracy"]["per_seed"]) == 2 and 0 <= row["accuracy"]["mean"] <= 1
    assert {t["kind"] for t in results["tests"]} == {"pretrained vs scratch", "pretrained vs TF-IDF"}
    assert all(t["p_holm"] >= t["p"] for t in results["tests"])
    assert "| 40 |" in curve_table(results)


def test_the_rows_are_labels_own_draws_nested_across_budgets():
    small, large = (sum(labelled_rows(67349, n, 3, LabelRecipe()), []) for n in (100, 300))
    assert set(small) <= set(large) and len(set(large)) == 300


def test_sentence_vectors_are_the_mean_of_the_real_tokens(quick_tokenizer):
    config = load_course().profile("cpu-quick").model.for_arch("bert", vocab_size=len(quick_tokenizer))
    torch.manual_seed(0)
    model = build_model(config).eval()
    vectors = sentence_vectors(model, quick_tokenizer, ["a good film .", "a good film . not at all bad really"])
    encoded = quick_tokenizer("a good film .", return_tensors="pt")
    with torch.no_grad():
        alone = model.encode(encoded["input_ids"], encoded["attention_mask"])[0].mean(0)
    assert vectors.shape == (2, config.d_model)
    np.testing.assert_allclose(vectors[0], alone.numpy(), atol=1e-5)  # padding in the batch changes nothing
