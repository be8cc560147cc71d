"""The plain-data settings that course.yml is read into and the teaching code is handed.

`ModelConfig` (the shape and architecture of a model) and `MaskingProbs` (BERT's masking recipe) live
here, apart from `model` and `masking`, because those import torch: reading the manifest must not (the
grader's parent process and `bertcourse --help` never load torch). `bertcourse.model` and
`bertcourse.masking` re-export them, so a lesson imports each from where it is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ARCHITECTURES = ("bert", "gpt")
# Fine-tuning's choices (bertcourse.training.finetune, compare): what trains, and where the weights start.
REGIMES = ("full", "probe", "lora")
INITS = ("pretrained", "scratch")
# What the GPT does differently from BERT besides its mask and its objective: GPT-2's choices.
GPT_SETTINGS: dict[str, Any] = {"type_vocab_size": 0, "pre_ln": True, "embedding_norm": False, "layer_norm_eps": 1e-5}


@dataclass(frozen=True)
class ModelConfig:
    """Everything that fixes the shape of a model. Plain data: saved inside every checkpoint."""

    arch: str = "bert"  # the one architecture switch: "bert" sees both sides, "gpt" only earlier positions
    vocab_size: int = 8000
    n_layers: int = 2
    d_model: int = 128
    n_heads: int = 2
    d_ff: int = 512
    max_seq_len: int = 128
    type_vocab_size: int = 2  # segments A and B; 0 for a model without segment embeddings (GPT)
    dropout: float = 0.1
    pre_ln: bool = False  # False: LayerNorm after each residual add (original BERT); True: before (GPT-2)
    embedding_norm: bool = True  # LayerNorm after summing the embeddings (BERT has it, GPT-2 does not)
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {self.arch!r}; choose 'bert' or 'gpt'")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    @property
    def causal(self) -> bool:
        """True when a position may attend only to itself and earlier positions (the GPT)."""
        return self.arch == "gpt"

    @property
    def head_dim(self) -> int:
        """Features per attention head."""
        return self.d_model // self.n_heads

    def for_arch(self, arch: str, **changes: Any) -> ModelConfig:
        """This shape as `arch`: "gpt" takes GPT-2's settings (`GPT_SETTINGS`); `changes` win over both.

        A course.yml profile gives the BERT; `profile.model.for_arch("gpt")` is its parameter-matched GPT.
        """
        if arch not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {arch!r}; choose 'bert' or 'gpt'")
        preset = GPT_SETTINGS if arch == "gpt" else {}
        return dataclasses.replace(self, **{**preset, **changes, "arch": arch})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (what a checkpoint stores)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ModelConfig:
        """A config saved by `to_dict`, also by versions before `arch`, whose `causal` flag named the GPT."""
        values = dict(values)
        if "causal" in values:
            causal = values.pop("causal")
            values.setdefault("arch", "gpt" if causal else "bert")
        return cls(**values)


@dataclass(frozen=True)
class MaskingProbs:
    """BERT's masking recipe: select `select_prob` of the positions; of those, `mask_prob` show [MASK],
    `random_prob` a random token, the rest keep theirs (Devlin et al. 2019: 15%, 80/10/10)."""

    select_prob: float = 0.15
    mask_prob: float = 0.8
    random_prob: float = 0.1
