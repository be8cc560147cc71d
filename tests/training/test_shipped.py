"""Shipped checkpoints: `bertcourse ship` writes a finished pretraining as safetensors and a card, loading
checks every file's sha256 and refuses an altered copy in one line, a shipped folder is taken wherever a run
folder is, and the checkpoints committed with the course still load into today's model code and still know
more than a unigram model at the `[MASK]` positions."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bertcourse.course import load_course
from bertcourse.data import Corpus
from bertcourse.masking import IGNORE_INDEX
from bertcourse.training import checkpoint as shipped
from bertcourse.training.checkpoint import load_pretrained
from bertcourse.training.heldout import evaluate, heldout_figures, shown_as_mask, unigram_baseline
from bertcourse.training.objectives import MaskedLM
from bertcourse.training.pretrain import PretrainOptions, pretrain
from bertcourse.training.ship import ship


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, corpus, quick_tokenizer) -> Path:
    """A 12-step cpu-quick BERT run on 2,000 real sentences."""
    out = tmp_path_factory.mktemp("pretrain")
    small = Corpus(corpus.train[:2000], corpus.heldout[:100], corpus.source)
    pretrain(PretrainOptions(profile="cpu-quick", out_dir=out, max_steps=12, eval_every=6, checkpoint_every=6,
                             progress=False), corpus=small, tokenizer=quick_tokenizer)
    return out


def _ship(run: Path, out: Path, corpus, tokenizer) -> dict:
    model, _ = load_pretrained(run)
    small = Corpus(corpus.train[:2000], corpus.heldout[:100], corpus.source)
    figures = heldout_figures(model, MaskedLM(tokenizer, load_course().masking), small.train, small.heldout)
    return ship(run, out, command="bertcourse pretrain --profile cpu-quick --max-steps 12",
                        heldout=figures, commit="test", corpus={"description": "test", "sentences": 2000})


def test_a_shipped_run_loads_back_to_the_same_weights_and_the_card_records_every_file(tmp_path, small_run, corpus,
                                                                                   quick_tokenizer):
    card = _ship(small_run, tmp_path / "bert-cpu-quick", corpus, quick_tokenizer)
    folder = tmp_path / "bert-cpu-quick"
    assert set(card["sha256"]) == {"model.safetensors", "tokenizer.json", "metrics.json"}
    assert card["steps"] == 12 and card["arch"] == "bert"
    assert {"mask_accuracy", "unigram_mask_accuracy", "accuracy"} <= set(card["heldout"])
    assert "sha256" in (folder / "README.md").read_text()
    original, tokenizer = load_pretrained(small_run)
    model, loaded_tokenizer, loaded_card = shipped.load_shipped(folder=folder)
    for name, tensor in original.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor.float()), name
    assert loaded_tokenizer.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    assert loaded_card == card
    again, _ = load_pretrained(folder)  # the course's loader takes the shipped folder as it takes a run
    assert torch.equal(again.state_dict()["embeddings.token_embedding.weight"],
                       model.state_dict()["embeddings.token_embedding.weight"])
    assert not list(tmp_path.glob(".*partial")), "the staging folder was left behind"


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json", "metrics.json"])
def test_an_altered_file_is_refused_in_one_line_naming_it(tmp_path, small_run, corpus, quick_tokenizer, name):
    folder = tmp_path / "shipped"
    _ship(small_run, folder, corpus, quick_tokenizer)
    path = folder / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    path.write_bytes(bytes(data))
    with pytest.raises(shipped.ShippedCheckpointError) as caught:
        shipped.load_shipped(folder=folder)
    message = str(caught.value)
    assert str(path) in message and "sha256" in message and "\n" not in message
    assert "bertcourse pretrain --profile cpu-quick" in message  # how to get it back


def test_a_missing_file_or_card_is_named(tmp_path, small_run, corpus, quick_tokenizer):
    folder = tmp_path / "shipped"
    _ship(small_run, folder, corpus, quick_tokenizer)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(shipped.ShippedCheckpointError, match="tokenizer.json: missing"):
        shipped.read_card(folder)
    with pytest.raises(shipped.ShippedCheckpointError, match="no card.json"):
        shipped.read_card(tmp_path)


def test_finetune_takes_a_shipped_folder_as_its_pretrained_model(tmp_path, small_run, corpus, quick_tokenizer,
                                                                 data_dir):
    from bertcourse.training.finetune import FinetuneOptions, finetune

    folder = tmp_path / "shipped"
    _ship(small_run, folder, corpus, quick_tokenizer)
    result = finetune(FinetuneOptions(arch="bert", regime="probe", profile="cpu-quick", pretrained=str(folder),
                                      out_dir=tmp_path / "ft", max_steps=3, data_dir=data_dir, progress=False))
    described = json.loads((tmp_path / "ft" / "metrics.json").read_text())["settings"]["pretrained"]
    assert described["digest"] == json.loads((folder / "card.json").read_text())["sha256"]["model.safetensors"][:16]
    assert result.predictions.shape == (872, 2) and 0 <= result.metrics["accuracy"] <= 1


def test_pretraining_can_continue_a_shipped_model_and_refuses_one_of_another_shape(tmp_path, small_run, corpus,
                                                                                   quick_tokenizer):
    """`--init-from FOLDER`: the run starts from the shipped weights (with no steps it is them), records their
    digest, resumes only with the same start, and a model of another shape is refused naming the folder."""
    from bertcourse.errors import BertcourseError
    from bertcourse.training.checkpoint import CheckpointError

    folder = tmp_path / "shipped"
    card = _ship(small_run, folder, corpus, quick_tokenizer)
    small = Corpus(corpus.train[:2000], corpus.heldout[:100], corpus.source)
    options = PretrainOptions(profile="cpu-quick", out_dir=tmp_path / "continued", max_steps=1, eval_every=1,
                              checkpoint_every=1, progress=False, init_from=folder)
    pretrain(options, corpus=small, tokenizer=quick_tokenizer)
    pretrain(replace(options, out_dir=tmp_path / "fresh", init_from=None), corpus=small, tokenizer=quick_tokenizer)
    start, _, _ = shipped.load_shipped(folder=folder)

    def distance(run: str) -> float:
        weights = torch.load(tmp_path / run / "checkpoint.pt", weights_only=True)["model"]
        return sum((weights[name] - tensor).abs().sum().item() for name, tensor in start.state_dict().items())

    saved = torch.load(tmp_path / "continued" / "checkpoint.pt", weights_only=True)
    assert saved["settings"]["init_from"] == card["sha256"]["model.safetensors"]
    assert 0 < distance("continued") < distance("fresh") / 2  # one step from the shipped weights, not from random
    with pytest.raises(CheckpointError, match="init_from"):  # a resume must keep its start
        pretrain(replace(options, init_from=None, resume=True), corpus=small,
                 tokenizer=quick_tokenizer)
    with pytest.raises(BertcourseError, match=f"--init-from {folder}: its model"):
        pretrain(replace(options, out_dir=tmp_path / "other", model_overrides={"d_ff": 128}), corpus=small,
                 tokenizer=quick_tokenizer)


def test_the_shipped_bert_fits_the_cpu_profiles_tokenizer_even_after_a_truncating_call(corpus):
    """Lesson 2 calls its tokenizer with truncation=True before it looks for the shipped BERT: the JSON then holds
    the truncation state, which changes no id and must not make the shipped BERT look foreign."""
    from bertcourse.tokenizer import load_tokenizer

    spec = load_course().profile("cpu")
    tokenizer = load_tokenizer(corpus, spec.vocab_size, spec.model.max_seq_len)
    tokenizer(["a sentence that is long enough to be cut"], truncation=True, max_length=4)
    assert '"truncation": null' not in tokenizer.backend_tokenizer.to_str()  # the call left its state behind
    config = spec.model.for_arch("bert", vocab_size=len(tokenizer))
    assert shipped.matching_shipped("bert", tokenizer, config) == shipped.shipped_folder("bert", "cpu-long")
    quick = load_course().profile("cpu-quick")
    assert shipped.matching_shipped("bert", tokenizer, quick.model.for_arch("bert", vocab_size=len(tokenizer))) is None


def test_mask_only_accuracy_counts_the_mask_positions_alone(quick_tokenizer):
    """A model that copies its input gets every kept token right and no [MASK] right: the accuracy over every
    target is above zero, the [MASK]-only accuracy is zero, and the counts split as the inputs say."""
    mask_id = quick_tokenizer.mask_token_id
    vocab = len(quick_tokenizer)

    class Copier(torch.nn.Module):
        def forward(self, input_ids, labels, **_):
            chosen = input_ids[labels != IGNORE_INDEX]
            return type("Out", (), {"logits": torch.nn.functional.one_hot(chosen, vocab).float()})()

    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    inputs = torch.tensor([[mask_id, 6, mask_id, 99, 9, 10]])  # targets at 0, 1, 2, 3: mask, kept, mask, random
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, :4] = ids[0, :4]
    batch = {"input_ids": inputs, "labels": labels}
    assert shown_as_mask(batch, mask_id).tolist() == [True, False, True, False]
    figures = evaluate(Copier(), [batch], torch.device("cpu"), mask_id=mask_id)
    assert figures["targets"] == 4 and figures["accuracy"] == 0.25
    assert figures["mask_targets"] == 2 and figures["mask_accuracy"] == 0.0
    assert "mask_accuracy" not in evaluate(Copier(), [batch], torch.device("cpu"))


def test_the_unigram_baseline_at_mask_positions_reads_only_those_targets(quick_tokenizer):
    from bertcourse.training.packing import PackedData

    mask_id = quick_tokenizer.mask_token_id
    train = PackedData(blocks=[[2, 7, 7, 7, 8, 3]], segments=[[0] * 6])
    labels = torch.tensor([[IGNORE_INDEX, 7, 8, IGNORE_INDEX]])
    batch = {"input_ids": torch.tensor([[2, mask_id, 8, 3]]), "labels": labels}  # 7 masked, 8 kept
    everything = unigram_baseline(train, [batch], len(quick_tokenizer), "bert", [2, 3])
    at_mask = unigram_baseline(train, [batch], len(quick_tokenizer), "bert", [2, 3], mask_id=mask_id)
    assert everything["targets"] == 2 and at_mask["targets"] == 1
    assert at_mask["accuracy"] == 1.0 and everything["accuracy"] == 0.5  # 7 is the most frequent token


@pytest.mark.parametrize("arch", ["bert", "gpt"])
def test_the_shipped_checkpoints_load_into_todays_model_code(arch):
    folder = shipped.shipped_folder(arch, "cpu-long")
    if not folder.is_dir():
        pytest.fail(f"{folder}: the shipped {arch} is missing from the package")
    model, tokenizer, card = shipped.load_shipped(arch, "cpu-long")  # strict load_state_dict: fails on any change
    assert card["arch"] == arch and model.config.arch == arch and len(tokenizer) == model.config.vocab_size
    if arch == "bert":
        held = card["heldout"]
        assert held["mask_accuracy"] > 2 * held["unigram_mask_accuracy"]  # it learned; recorded at shipping


def test_the_shipped_bert_fills_a_mask_with_a_word_not_a_comma_or_an_article():
    """The recorded figures are the card's; this is today's code on today's weights: the shipped BERT's top
    guesses for "the movie was really [MASK] ." are words, not punctuation or function words."""
    from bertcourse.model_inspection import MaskedLM, fill_mask

    model, tokenizer, _ = shipped.load_shipped("bert", "cpu-long")
    guesses = fill_mask(MaskedLM(model, tokenizer, "shipped"), ["the movie was really [MASK] ."], top_k=3)
    top = [token for token, _ in guesses[0]["predictions"][0]]
    assert not set(top) & {",", ".", "the", "a", "of", "and", "to"}, top


def test_ship_refuses_a_folder_without_a_finished_run(tmp_path, capsys):
    from cli_support import cli_in_this_process

    done = cli_in_this_process(["ship", "--profile", "cpu-quick", "--run", str(tmp_path)], capsys)
    assert done.returncode == 2 and "no finished pretraining" in done.stderr and str(tmp_path) in done.stderr


def test_the_package_ships_its_checkpoints():
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert '"checkpoints/*/*"' in text  # package data: a pip install (Colab's) carries the shipped models
