"""bertcourse.training.finetune: one run on the real SST-2, its folder, reuse, refusal and reloading."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertcourse.cli import main
from bertcourse.training.finetune import (
    FinetuneError,
    FinetuneOptions,
    encode_sst2,
    finetune,
    load_classifier,
    predict_rows,
    read_finished,
)
from bertcourse.training.optim import linear_schedule
from bertcourse.training.pretrain import PretrainOptions, pretrain

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, data_dir):
    """A few steps of cpu-quick BERT pretraining: enough to have a checkpoint with a tokenizer."""
    out = tmp_path_factory.mktemp("pretrain-bert")
    pretrain(PretrainOptions(profile="cpu-quick", out_dir=out, data_dir=data_dir, max_steps=4, progress=False))
    return out / "checkpoint.pt"


def options(pretrained, data_dir, out, **changes) -> FinetuneOptions:
    values = dict(profile="cpu-quick", pretrained=pretrained, out_dir=out, data_dir=data_dir, progress=False,
                  max_steps=6)
    return FinetuneOptions(**{**values, **changes})


def test_a_run_writes_its_folder_and_a_second_call_reuses_it(pretrained, data_dir, tmp_path, monkeypatch):
    import bertcourse.training.finetune as F

    out = tmp_path / "run"
    predictions = []  # each prediction of the validation set: the last evaluation's is the final one, made once
    monkeypatch.setattr(F, "predict_rows", lambda *a, **kw: predictions.append(1) or predict_rows(*a, **kw))
    first = finetune(options(pretrained, data_dir, out))
    assert len(predictions) == len(first.metrics["history"]["eval_step"]) == 6  # steps 1-6 (of 6), none after
    assert {p.name for p in out.iterdir()} >= {"model.pt", "metrics.json", "predictions.tsv"}
    m = first.metrics
    assert len(first.predictions) == 872 and m["train_rows"] > 0
    low, high = m["accuracy_interval"]
    assert low <= m["accuracy"] <= high
    assert m["history"]["step"][-1] == 6 and m["history"]["eval_step"][-1] == 6
    lines = (out / "predictions.tsv").read_text().splitlines()
    assert lines[0].split("\t") == ["index", "label", "prediction", "p_positive", "sentence"] and len(lines) == 873
    predicted = [int(line.split("\t")[2]) for line in lines[1:]]
    assert np.mean(np.array(predicted) == first.predictions.argmax(1)) == 1.0

    again = finetune(options(pretrained, data_dir, out))
    assert again.model is None, "a finished run was trained again"
    assert again.metrics == json.loads((out / "metrics.json").read_text())
    np.testing.assert_allclose(again.predictions[:, 1], first.predictions[:, 1], atol=1e-6)


def test_a_folder_of_other_settings_or_damaged_is_refused(pretrained, data_dir, tmp_path):
    out = tmp_path / "run"
    finetune(options(pretrained, data_dir, out, regime="probe"))
    with pytest.raises(FinetuneError, match=f"{out}.*other settings"):
        finetune(options(pretrained, data_dir, out, regime="probe", seed=1))
    (out / "metrics.json").write_text("{not json")
    with pytest.raises(FinetuneError, match="damaged fine-tuning run"):
        read_finished(out)


def test_the_saved_classifier_predicts_what_the_run_reported(pretrained, data_dir, tmp_path):
    out = tmp_path / "run"
    result = finetune(options(pretrained, data_dir, out, regime="lora"))
    model, tokenizer, state = load_classifier(out)
    assert state["regime"] == "lora" and state["pooling"] == "cls"
    from bertcourse.course import load_course

    rows = encode_sst2(tokenizer, load_course().profile("cpu-quick").finetune, data_dir=data_dir)
    again = predict_rows(model, rows.validation_ids, torch.device("cpu"))
    np.testing.assert_allclose(again, result.predictions, atol=1e-5)


def test_probe_leaves_the_encoder_untouched_and_folds_its_scaling_into_the_head(pretrained, data_dir, tmp_path):
    result = finetune(options(pretrained, data_dir, tmp_path / "probe", regime="probe"))
    saved = torch.load(pretrained, weights_only=True)["model"]
    encoder = result.model.encoder.state_dict()
    assert all(torch.equal(encoder[k], v) for k, v in saved.items())
    assert result.metrics["trainable_parameters"] == 2 * 64 + 2
    # the head was trained on standardised vectors and the scaling folded into it: the saved classifier on
    # raw vectors predicts what the head did during training
    assert result.metrics["accuracy"] == pytest.approx(result.metrics["history"]["eval_accuracy"][-1], abs=2 / 872)


def test_the_command_refuses_a_missing_checkpoint_and_bad_choices(tmp_path, capsys, data_dir):
    code = main(["finetune", "--profile", "cpu-quick", "--pretrained", str(tmp_path / "none.pt"),
                 "--data-dir", str(data_dir), "--no-progress"])
    assert code == 2
    assert "no pretraining checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["finetune", "--regime", "adapters"])


def test_the_command_trains_and_prints_the_accuracy(pretrained, data_dir, tmp_path, capsys):
    out = tmp_path / "cli"
    code = main(["finetune", "--profile", "cpu-quick", "--pretrained", str(pretrained), "--out", str(out),
                 "--data-dir", str(data_dir), "--max-steps", "3", "--no-progress", "--arch", "bert"])
    printed = capsys.readouterr().out
    assert code == 0 and "SST-2 validation accuracy" in printed and str(out) in printed


def test_a_gpt_checkpoint_is_not_fine_tuned_as_a_bert(pretrained, data_dir, tmp_path):
    with pytest.raises(FinetuneError, match="holds a bert model, not a gpt"):
        finetune(options(pretrained, data_dir, tmp_path / "x", arch="gpt"))


def test_linear_schedule_warms_up_then_decays_to_zero():
    factor = linear_schedule(total=10, warmup=2)
    assert [round(factor(s), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]
