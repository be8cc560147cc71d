"""Transformers checkpoints as the pretrained encoder (bertcourse.hf_checkpoints), offline: the tests build
tiny randomly initialised checkpoints themselves (tests/support/hf_support.py) and save them with
`save_pretrained`, as a downloaded BERT-Tiny or Pythia would be; no hub is ever reached."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hf_support import tiny_bert, tiny_decoder

from bertcourse.cli import main
from bertcourse.hf_checkpoints import (
    HFCheckpointError,
    HubUnreachable,
    load_language_model,
    load_or_notice,
    load_pretrained,
    parse_spec,
    random_like,
)

PROFILE = "cpu-quick"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("hf")
    return {"bert": tiny_bert(base / "bert"), "neox": tiny_decoder(base / "neox"),
            "gpt2": tiny_decoder(base / "gpt2", "gpt2")}


# ----------------------------------------------------------------------------- loading (fast)


@pytest.mark.parametrize("name, arch, pooling, targets", [
    ("bert", "bert", "cls", ["query", "value"]), ("neox", "gpt", "last", ["query_key_value"]),
    ("gpt2", "gpt", "last", ["c_attn"]),
])
def test_a_folder_loads_with_its_own_tokenizer_pooling_and_lora_targets(checkpoints, name, arch, pooling, targets):
    from bertcourse.classifier import build_classifier
    from bertcourse.masking import pad_batch
    from bertcourse.training.finetune import sentence_rows

    encoder, tokenizer, info = load_pretrained(checkpoints[name])
    assert (info["arch"], info["pooling"], info["lora_targets"]) == (arch, pooling, targets)
    assert encoder.config.arch == arch and encoder.config.d_model == 32 and len(tokenizer) == encoder.config.vocab_size
    rows = sentence_rows(tokenizer, ["the film was good", "an awful mess"], 64)
    if arch == "bert":  # the course's rows: [CLS] ... [SEP] of the checkpoint's own vocabulary
        assert all(r[0] == tokenizer.cls_token_id and r[-1] == tokenizer.sep_token_id for r in rows)
    else:  # a decoder's own encoding, no specials added
        assert rows[0] == tokenizer("the film was good")["input_ids"]
    ids, mask = pad_batch(rows, 0)
    for regime, trainable in (("probe", {"classifier"}), ("lora", {"classifier", "lora_"})):
        model = build_classifier(load_pretrained(checkpoints[name])[0], regime)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        assert names and all(any(t in n for t in trainable) for n in names), names
        if regime == "lora":
            assert any(t in n for n in names for t in targets), f"no adapter on {targets}"
        assert model(ids, mask).logits.shape == (2, 2)
    hidden = encoder.encode(ids, mask)
    assert hidden.shape == (2, ids.shape[1], 32)


def test_each_load_is_a_fresh_copy_and_the_digest_follows_the_weights(checkpoints, tmp_path):
    first, _, info = load_pretrained(checkpoints["bert"])
    with torch.no_grad():
        next(first.parameters()).add_(1.0)
    second, _, again = load_pretrained(checkpoints["bert"])
    assert not torch.equal(next(first.parameters()), next(second.parameters()))
    assert info["digest"] == again["digest"]
    other = load_pretrained(tiny_bert(tmp_path / "other", seed=1))[2]
    assert other["digest"] != info["digest"]
    torch.manual_seed(1)  # tiny_bert initialised its model from seed 0
    fresh = random_like(info)
    assert fresh.config == second.config
    assert not torch.equal(next(fresh.parameters()), next(second.parameters()))


def test_a_language_model_reads_its_weights_once_and_is_described_as_its_encoder(checkpoints, monkeypatch):
    """With its head (fill-mask, attention maps) the checkpoint is read once, by the head's class; the
    description is the encoder's (the same digest as `load_pretrained` without a head). A decoder takes the
    causal-LM head; a head the model type has none of is refused with the checkpoint's name."""
    from transformers import AutoModelForMaskedLM, PreTrainedModel

    from bertcourse import hf_checkpoints

    loaded = []
    original = PreTrainedModel.from_pretrained.__func__

    def counted(cls, *args, **kwargs):
        loaded.append(cls.__name__)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(counted))
    hf_checkpoints._load.cache_clear()
    model, tokenizer, info = load_language_model(checkpoints["bert"])
    assert loaded == ["BertForMaskedLM"] and type(model).__name__ == "BertForMaskedLM" and not model.training
    assert info["digest"] == load_pretrained(checkpoints["bert"])[2]["digest"]
    assert load_language_model(checkpoints["neox"])[0].__class__.__name__ == "GPTNeoXForCausalLM"
    with pytest.raises(HFCheckpointError, match="neox: a gpt_neox model has no AutoModelForMaskedLM head"):
        load_pretrained(checkpoints["neox"], head=AutoModelForMaskedLM)
    hf_checkpoints._load.cache_clear()


def test_a_folder_that_is_not_a_checkpoint_is_refused_with_its_path(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(HFCheckpointError, match="not a transformers checkpoint") as info:
        load_pretrained(tmp_path)
    assert str(tmp_path) in str(info.value)
    with pytest.raises(HFCheckpointError, match="no such folder"):
        load_pretrained(tmp_path / "missing")


def test_a_model_type_the_course_cannot_pool_is_refused(tmp_path):
    from transformers import T5Config, ViTConfig

    T5Config(vocab_size=50, d_model=16, num_layers=1, num_heads=2, d_ff=32).save_pretrained(tmp_path / "t5")
    with pytest.raises(HFCheckpointError, match="encoder-decoder"):
        load_pretrained(tmp_path / "t5")
    ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path / "vit")
    with pytest.raises(HFCheckpointError, match="'vit' cannot be pooled"):
        load_pretrained(tmp_path / "vit")


def test_a_tokenizer_that_does_not_match_the_model_is_refused(tmp_path):
    folder = tiny_bert(tmp_path / "small-vocab", vocab_size=50)  # the tokenizer has 120 tokens
    with pytest.raises(HFCheckpointError, match="120 tokens but the model's vocabulary only 50"):
        load_pretrained(folder)


def test_weights_missing_from_the_checkpoint_are_refused_not_left_random(tmp_path):
    folder = tiny_bert(tmp_path / "deeper")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    with pytest.raises(HFCheckpointError, match="would start random"):
        load_pretrained(folder)


def test_an_unreachable_hub_is_one_clear_line_exit_2_and_a_notice_in_a_lesson(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = "hf:bertcourse-tests/no-such-model"
    assert parse_spec(spec).kind == "hub" and parse_spec(spec).slug == "hf-bertcourse-tests--no-such-model"
    with pytest.raises(HubUnreachable) as info:
        load_pretrained(spec)
    assert spec in str(info.value) and "\n" not in str(info.value) and "HF_HUB_OFFLINE" in str(info.value)
    code = main(["finetune", "--profile", PROFILE, "--pretrained", spec, "--regime", "probe", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and spec in err and "Traceback" not in err
    assert load_or_notice(spec) is None  # a lesson cell goes on
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("notice:") and spec in out


def test_an_arch_that_contradicts_the_checkpoint_is_refused(checkpoints, tmp_path):
    from bertcourse.training.finetune import FinetuneError, FinetuneOptions, finetune

    with pytest.raises(FinetuneError, match="is a decoder"):
        finetune(FinetuneOptions(arch="bert", pretrained=checkpoints["neox"], profile=PROFILE, out_dir=tmp_path))
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------- through the pipeline (real SST-2)


def _options(checkpoint, data_dir, out, **changes):
    from bertcourse.training.finetune import FinetuneOptions

    values = dict(profile=PROFILE, pretrained=str(checkpoint), out_dir=out, data_dir=data_dir, progress=False,
                  max_steps=4)
    return FinetuneOptions(**{**values, **changes})


@pytest.mark.parametrize("regime", ["probe", "lora", "full"])
def test_finetune_runs_a_bert_checkpoint_in_every_regime_and_evaluate_reloads_it(checkpoints, data_dir, tmp_path,
                                                                                 regime, capsys):
    from bertcourse.training.finetune import finetune, load_classifier, predict_rows, sentence_rows

    out = tmp_path / regime
    result = finetune(_options(checkpoints["bert"], data_dir, out, regime=regime))
    m = result.metrics
    assert len(result.predictions) == 872 and m["pooling"] == "cls" and m["settings"]["arch"] == "bert"
    assert m["settings"]["pretrained"]["model_type"] == "bert"
    assert m["settings"]["model_config"]["config"]["hidden_size"] == 32
    assert m["accuracy_interval"][0] <= m["accuracy"] <= m["accuracy_interval"][1]
    again = finetune(_options(checkpoints["bert"], data_dir, out, regime=regime))
    assert again.model is None  # the same run, found by its key
    model, tokenizer, state = load_classifier(out)  # rebuilt from model.pt alone: no hub, no source folder
    assert state["transformers"]["model_type"] == "bert" and state["regime"] == regime
    val = [line.split("\t", 4)[4] for line in (out / "predictions.tsv").read_text().splitlines()[1:6]]
    p = predict_rows(model, sentence_rows(tokenizer, val, state["max_seq_len"]), torch.device("cpu"))
    np.testing.assert_allclose(p[:, 1], result.predictions[:5, 1], atol=1e-5)
    sample = tmp_path / "sample.tsv"
    sample.write_text("sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(val)))
    code = main(["evaluate", str(out), "--data", str(sample), "--out", str(tmp_path / "pred.tsv")])
    assert code == 0 and "5 sentences; accuracy" in capsys.readouterr().out


def test_a_decoder_checkpoint_pools_its_last_token_and_trains_lora(checkpoints, data_dir, tmp_path):
    from bertcourse.training.finetune import default_out_dir, finetune

    options = _options(checkpoints["neox"], data_dir, tmp_path / "neox", regime="lora")
    result = finetune(options)
    assert result.metrics["pooling"] == "last" and result.metrics["settings"]["arch"] == "gpt"
    lora = [n for n, p in result.model.named_parameters() if p.requires_grad and "lora_" in n]
    assert lora and all("query_key_value" in n for n in lora)
    assert default_out_dir(options, PROFILE).name == f"finetune-hf-neox-lora-pretrained-{PROFILE}-seed0"
    scratch = finetune(_options(checkpoints["neox"], data_dir, tmp_path / "scratch", regime="full", init="scratch"))
    assert scratch.metrics["settings"]["pretrained"] is None  # the architecture, freshly initialised
    assert scratch.metrics["key"] != result.metrics["key"]


def test_a_compare_row_of_a_checkpoint_is_the_course_rows_runs(checkpoints, data_dir, tmp_path):
    """`run_public` fine-tunes each regime and seed of a checkpoint as compare's own runs; its cost says what
    is counted and that an unlisted checkpoint's tokens are not known."""
    from bertcourse.course import load_course
    from bertcourse.training import compare as C

    course = load_course()
    spec = course.profile(PROFILE).finetuning()
    chosen = C.resolve_public([str(checkpoints["bert"])], course)
    assert chosen == [("hf-bert", str(checkpoints["bert"]), None)]
    assert C.resolve_public(["bert-tiny"], course)[0][1] == "hf:google/bert_uncased_L-2_H-128_A-2"
    with pytest.raises(C.CompareError, match="public_checkpoints"):
        C.resolve_public(["no-such-name"], course)
    summary, runs = C.run_public(chosen, PROFILE, 1, tmp_path / "runs", spec=spec, select_prob=0.15,
                                 data_dir=data_dir, source="auto", device="cpu", precision="auto", progress=False,
                                 max_steps=3)
    assert sorted(r.regime for r in runs) == sorted(C.REGIMES) and all(r.row.startswith("hf-bert ") for r in runs)
    for run, (metrics, predicted, folder) in runs.items():
        assert folder.parent == tmp_path / "runs" and len(predicted) == 872
        assert metrics["settings"]["regime"] == run.regime
    cost = summary["checkpoints"]["hf-bert"]
    assert cost["estimate"] and cost["tokens_seen"] is None and cost["flops"] is None
    assert cost["parameters"] - cost["body_parameters"] == 120 * 32 + 128 * 32 + 2 * 32  # the embedding tables
    assert cost["head_parameters"] == 120 * 32 + 32 * 32 + 2 * 32 + 120
    assert summary["skipped"] == [] and summary["notice"] is None


def test_a_label_curve_of_checkpoints_reads_their_arch_and_starts_each_run_from_their_weights(data_dir, tmp_path,
                                                                                               monkeypatch):
    """`bertcourse labels --model NAME=FOLDER` (BERT-Tiny's row when online): the arch is the checkpoint's, every
    pretrained run starts from the checkpoint's own weights (not from the previous run's fine-tuned copy), its
    scratch twin from transformers' fresh initialisation, and a stated arch that contradicts it is refused."""
    from bertcourse.training import data_efficiency as D
    from bertcourse.training.finetune import FinetuneError

    # seeded apart from the runs' seeds 0 and 1 (a checkpoint made with torch's seed 0 IS the seed-0 scratch twin)
    checkpoints = {"bert": tiny_bert(tmp_path / "bert", seed=7), "neox": tiny_decoder(tmp_path / "neox", seed=7)}
    started = []  # the encoder's weights as each run begins
    train = D.train_with_dev

    def spy(model, *args, **kwargs):
        started.append({k: v.detach().clone() for k, v in model.encoder.state_dict().items()})
        return train(model, *args, **kwargs)

    monkeypatch.setattr(D, "train_with_dev", spy)
    recipe = D.LabelRecipe(max_steps=3, evaluations=1, patience=1)
    models = [f"tiny={checkpoints['bert']}", f"dec={checkpoints['neox']}"]
    results = D.label_curve(PROFILE, [20], seeds=2, models=models, out=tmp_path / "out", recipe=recipe,
                            runs_dir=tmp_path / "runs", data_dir=data_dir, progress=False)
    assert [(m["name"], m["arch"]) for m in results["models"]] == [("tiny", "bert"), ("dec", "gpt")]
    cost = results["models"][0]["pretraining"]  # not a course.yml public checkpoint: its recipe is not known
    assert cost["estimate"] and cost["tokens_seen"] is None and cost["parameters"] > 0
    assert "| tiny | " in (tmp_path / "out" / "results.md").read_text()
    assert {(r["model"], r["kind"]) for r in results["rows"]} >= {("tiny", "pretrained"), ("dec", "scratch")}
    for first, name in ((0, "bert"), (4, "neox")):  # run order: pretrained seeds 0, 1, then scratch seeds 0, 1
        saved = load_pretrained(checkpoints[name])[0].state_dict()
        for run in (first, first + 1):
            assert all(torch.equal(started[run][k], v) for k, v in saved.items()), f"pretrained run {run}"
        for run in (first + 2, first + 3):  # scratch: transformers' initialisation, seeded by the run
            assert not all(torch.equal(started[run][k], v) for k, v in saved.items()), f"scratch run {run}"
        assert not torch.equal(*(next(iter(started[run].values())) for run in (first + 2, first + 3)))
    assert len(started) == 8
    with pytest.raises(FinetuneError, match="is a decoder"):
        D.label_curve(PROFILE, [20], seeds=1, models=[f"dec:bert={checkpoints['neox']}"], out=tmp_path / "x",
                      recipe=recipe, runs_dir=tmp_path / "runs", data_dir=data_dir, progress=False)
    with pytest.raises(D.LabelCurveError, match="bert or gpt, not 'roberta'"):
        D.parse_model(f"x:roberta={checkpoints['bert']}")


def test_a_label_curve_leaves_out_an_unreachable_public_checkpoint_with_one_notice(tmp_path, data_dir, capsys,
                                                                                    monkeypatch):
    """`bertcourse labels --model bert-tiny` offline: the checkpoint is left out with one notice line and the report
    says so while the other models' curve runs; with nothing else to run, one clear error and exit 2."""
    from bertcourse.training import data_efficiency as D

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tiny_bert(tmp_path / "bert", seed=7)
    results = D.label_curve(PROFILE, [20], seeds=1, models=["bert-tiny", f"mine={folder}"], out=tmp_path / "out",
                            recipe=D.LabelRecipe(max_steps=2, evaluations=1, patience=1), runs_dir=tmp_path / "runs",
                            data_dir=data_dir, progress=False)
    notices = [line for line in capsys.readouterr().out.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1 and "left out bert-tiny" in notices[0] and "HF_HUB_OFFLINE" in notices[0]
    assert list(results["skipped"]) == ["bert-tiny"] and [m["name"] for m in results["models"]] == ["mine"]
    named = D.label_curve(PROFILE, [20], seeds=1, models=[f"bert-tiny={folder}"], out=tmp_path / "named",
                          recipe=D.LabelRecipe(max_steps=2, evaluations=1, patience=1), runs_dir=tmp_path / "runs",
                          data_dir=data_dir, progress=False)  # BERT-Tiny downloaded to a folder: the paper's recipe
    assert named["models"][0]["pretraining"]["tokens_seen"] == 42_598_400_000
    said = (tmp_path / "out" / "results.md").read_text()
    assert "Left out, the hub could not be reached (offline): bert-tiny." in said
    code = main(["labels", "--profile", PROFILE, "--model", "bert-tiny", "--budgets", "20", "--runs-dir",
                 str(tmp_path / "runs"), "--data-dir", str(data_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "no model could be loaded: hf:google/bert_uncased_L-2_H-128_A-2" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unreachable_public_checkpoint_is_left_out_with_one_notice(tmp_path, capsys, monkeypatch):
    from bertcourse.course import load_course
    from bertcourse.training import compare as C

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    course = load_course()
    hub_only = [name for name, entry in course.public_checkpoints.items() if entry.package is None]
    chosen = C.resolve_public(hub_only, course)
    summary, runs = C.run_public(chosen, PROFILE, 1, tmp_path, spec=course.profile(PROFILE).finetuning(),
                                 select_prob=0.15, data_dir=None, source="auto", device="cpu", precision="auto",
                                 progress=False)
    assert runs == {} and summary["skipped"] == hub_only == ["bert-tiny", "bert-mini", "pythia-14m"]
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("notice:") and "bert-tiny, bert-mini, pythia-14m" in out


def test_a_listed_checkpoints_flops_are_the_recipes_estimate():
    from bertcourse.course import load_course
    from bertcourse.training import compare as C

    entry = load_course().public_checkpoints["pythia-14m"]
    info = {"checkpoint": entry.spec, "arch": "gpt", "model_type": "gpt_neox", "revision": None,
            "parameters": 1_000_000 + 6_000, "embedding_parameters": 6_000,
            "config": {"hidden_size": 10, "vocab_size": 300}}
    cost = C.public_cost(entry, info, 0.15)
    assert cost["tokens_seen"] == entry.tokens_seen == 143_000 * 1024 * 2048
    assert cost["flops"] == pytest.approx(6 * entry.tokens_seen * (1_000_000 + 1.0 * 300 * 10))
    assert cost["estimate"] and "Pythia" in cost["source"]
