"""Pretraining checkpoints: written atomically, read with errors naming the file, refused when they belong
to a run with other settings, and loaded back as a model and its tokenizer.

A checkpoint holds everything the next step depends on (weights, optimizer, schedule, step, every random
generator, the tokenizer and the settings), so a run killed mid-way and resumed ends with exactly the
weights of a run that was never interrupted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from bertcourse.config import ModelConfig
from bertcourse.errors import BertcourseError
from bertcourse.folders import check_sha256
from bertcourse.model import GPT, BertForMLM, build_model

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = "bertcourse-pretrain-1"
# Settings added after checkpoints were first written, with the value every older checkpoint ran with:
# an older checkpoint still resumes, and one written with another value is refused.
SETTING_DEFAULTS: dict[str, Any] = {"whole_word": False, "world_size": 1, "init_from": None}


class CheckpointError(BertcourseError):
    """A checkpoint that cannot be read or does not belong to the run that tries to resume from it."""


def save_checkpoint(path: Path, state: dict) -> None:
    """Write to a temporary file in the same folder, then rename: a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.partial")
    torch.save(state, staging)
    os.replace(staging, path)


def load_checkpoint(path: str | Path) -> dict:
    """Read a checkpoint, with an error naming the file if it is missing, damaged or not ours."""
    return read_saved_state(path, CHECKPOINT_NAME, CHECKPOINT_FORMAT, "pretraining checkpoint", "checkpoint",
                            missing="no checkpoint to resume from (is --out the folder of an earlier run?)")


def read_saved_state(path: str | Path, file_name: str, file_format: str, what: str, noun: str, *, missing: str,
                     error: type[BertcourseError] = CheckpointError) -> dict:
    """A dict saved by torch.save (`path` or `path/file_name`), refused with its path when missing, damaged
    or of another `format` (pretraining checkpoints and fine-tuned classifiers are read through this)."""
    path = Path(path)
    if path.is_dir():
        path = path / file_name
    if not path.is_file():
        raise error(f"{path}: {missing}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a truncated or foreign file
        raise error(f"{path}: not a readable {noun} ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or state.get("format") != file_format:
        raise error(f"{path}: not a bertcourse {what} (format {file_format!r})")
    return state


def check_compatible(path: Path, saved: dict, expected: dict) -> None:
    """Refuse to resume with other settings, naming every setting that differs."""
    differences = []
    for key, value in expected.items():
        theirs = saved.get(key, SETTING_DEFAULTS.get(key))
        if key == "model_config" and isinstance(theirs, dict):
            theirs = _as_current_config(theirs)
            differences += [
                f"model {k}: checkpoint {theirs.get(k)!r}, this run {v!r}"
                for k, v in value.items()
                if theirs.get(k) != v
            ]
        elif theirs != value:
            differences.append(f"{key}: checkpoint {theirs!r}, this run {value!r}")
    if differences:
        raise CheckpointError(f"{path} does not match this run: " + "; ".join(differences))


def _as_current_config(saved: dict) -> dict:
    """A saved model config in today's fields (one saved before `arch` replaced `causal` resumes too)."""
    try:
        return ModelConfig.from_dict(saved).to_dict()
    except (TypeError, ValueError):  # not a config this version can build: compared as it is
        return saved


def load_pretrained(path: str | Path, device: str | torch.device = "cpu") -> tuple[BertForMLM | GPT, Any]:
    """The model and tokenizer saved in a pretraining checkpoint, or in a shipped model's folder (its files'
    sha256 checked: `load_shipped`), for fine-tuning and lessons."""
    if Path(path).is_dir() and is_shipped(path):
        model, tokenizer, _ = load_shipped(folder=path, device=device)
        return model, tokenizer
    state = load_checkpoint(path)
    config = ModelConfig.from_dict(state["settings"]["model_config"])
    model = build_model(config)
    model.load_state_dict(state["model"])
    return model.to(device).eval(), tokenizer_from_json(state["tokenizer"])


def tokenizer_from_json(text: str) -> PreTrainedTokenizerFast:
    """The tokenizer a checkpoint saved (`tokenizer.backend_tokenizer.to_str()`), usable again."""
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(text),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )

# ----------------------------------------------------------------------------- shipped checkpoints
# The course's own pretrained models, shipped with the package (`src/bertcourse/checkpoints/ARCH-PROFILE/`): a
# finished run made small, `model.safetensors` (weights only), `tokenizer.json`, `metrics.json` (the run's
# report, its loss log thinned), `card.json` (command, commit, corpus, steps, wall time, held-out figures and
# each file's sha256, checked at every load) and `README.md`. `bertcourse ship` (training/ship.py) writes one;
# `read_shipped` gives back what a checkpoint holds, so a shipped folder is taken wherever a run folder is.

SHIPPED_ROOT = Path(__file__).parents[1] / "checkpoints"  # package data: pip installs carry them
CARD_NAME = "card.json"
CARD_FORMAT = "bertcourse-shipped-1"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"
METRICS_NAME = "metrics.json"
HASHED = (WEIGHTS_NAME, TOKENIZER_NAME, METRICS_NAME)
LOSS_LOG_EVERY = 50  # metrics.json keeps one loss in this many steps: the curve, not 18,000 numbers


class ShippedCheckpointError(CheckpointError):
    """A shipped checkpoint that is missing, altered or not one (the message names the file)."""


def shipped_folder(arch: str = "bert", profile: str = "cpu-long") -> Path:
    """Where the package keeps the shipped `arch` model pretrained on `profile`."""
    return SHIPPED_ROOT / f"{arch}-{profile}"


def is_shipped(path: str | Path) -> bool:
    """True for a folder holding a shipped model's card."""
    return (Path(path) / CARD_NAME).is_file()


def read_card(folder: str | Path) -> dict[str, Any]:
    """card.json of a shipped folder, its files checked against the sha256 it records."""
    folder = Path(folder)
    path = folder / CARD_NAME
    if not path.is_file():
        raise ShippedCheckpointError(f"{folder}: not a shipped checkpoint (no {CARD_NAME})")
    try:
        card = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ShippedCheckpointError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise ShippedCheckpointError(f"{path}: not a bertcourse model card (format {CARD_FORMAT!r})")
    restore = f"restore it from the course's repository, or pretrain anew: {card.get('command', 'bertcourse pretrain')}"
    check_sha256(folder, card["sha256"], ShippedCheckpointError, restore)
    return card


def read_shipped(folder: str | Path) -> dict[str, Any]:
    """A shipped model as a pretraining checkpoint holds it ({settings, model, tokenizer, step, history}),
    after the hash check; `card` is added."""
    from safetensors.torch import load_file

    folder = Path(folder)
    card = read_card(folder)
    metrics = json.loads((folder / METRICS_NAME).read_text())
    return {"settings": card["settings"], "model": load_file(folder / WEIGHTS_NAME),
            "tokenizer": (folder / TOKENIZER_NAME).read_text(encoding="utf-8"), "step": card["steps"],
            "history": metrics.get("history", {}), "card": card}


def same_tokenizer(saved: str, tokenizer: Any) -> bool:
    """Whether the tokenizer JSON `saved` gives `tokenizer`'s ids. Compared without the call-time state a fast
    tokenizer keeps in its JSON (`truncation`, `padding`: a call with truncation=True sets them), which changes
    no id."""
    def identity(text: str) -> dict:
        data = json.loads(text)
        return {key: value for key, value in data.items() if key not in ("truncation", "padding")}

    return identity(saved) == identity(tokenizer.backend_tokenizer.to_str())


def matching_shipped(arch: str, tokenizer: Any, config: ModelConfig, profile: str = "cpu-long") -> Path | None:
    """The shipped model's folder when it reads `tokenizer`'s ids with `config`'s shape (the cpu profiles), so
    that a run can continue it (`PretrainOptions.init_from`) or use it in place of its own pretraining; else None
    (another vocabulary or shape: the profile needs its own)."""
    folder = shipped_folder(arch, profile)
    card = read_card(folder)
    same_shape = card["settings"]["model_config"] == config.to_dict()
    return folder if same_shape and same_tokenizer((folder / TOKENIZER_NAME).read_text(encoding="utf-8"),
                                                   tokenizer) else None


def load_shipped(arch: str = "bert", profile: str = "cpu-long", device: Any = "cpu",
                 folder: str | Path | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """(model in eval mode, tokenizer, card) of a shipped model, loaded strictly into today's model code."""
    saved = read_shipped(folder or shipped_folder(arch, profile))
    model = build_model(ModelConfig.from_dict(saved["settings"]["model_config"]))
    model.load_state_dict(saved["model"])
    return model.to(device).eval(), tokenizer_from_json(saved["tokenizer"]), saved["card"]


__all__ = [
    "CHECKPOINT_NAME",
    "CHECKPOINT_FORMAT",
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "check_compatible",
    "load_pretrained",
    "read_saved_state",
    "tokenizer_from_json",
    "CARD_NAME", "SHIPPED_ROOT", "ShippedCheckpointError", "is_shipped", "load_shipped", "read_card", "read_shipped",
    "matching_shipped", "same_tokenizer",
    "shipped_folder",
]
