"""A sentence classifier on top of a pretrained encoder: pooling, a head, and the three ways to train it.

Fine-tuning turns a language model into a classifier by reading ONE vector per sentence out of its
final hidden states (pooling), and putting a small head (dropout + linear) on it:

- the BERT reads position 0, the `[CLS]` token. Nothing in masked-LM pretraining makes that position a
  summary of the sentence (BERT's NSP objective did; the course pretrains without it), so `[CLS]`
  becomes a summary only through fine-tuning;
- the GPT reads the LAST REAL token: in a causal model only it has seen the whole sentence. Where that
  is depends on the padding side, so it is found from the attention mask, never as position -1;
- mean pooling over the real tokens is the third option (and what a frozen encoder's features show best).

Regimes (lesson 4): **full** fine-tuning trains everything; a **probe** freezes the encoder and trains
only the head (what the pretrained features already make linearly readable); **LoRA** (through `peft`)
freezes the encoder's weights and trains low-rank updates of its attention projections plus the head.
Shapes: B batch, S sequence, D d_model, L labels.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertcourse.model import init_linear_

POOLINGS = ("cls", "last", "mean")
DEFAULT_POOLING = {"bert": "cls", "gpt": "last"}
LORA_TARGETS = ("qkv", "out")  # SelfAttention's projections (bertcourse.model); the feed-forward's are fc_in/fc_out


def cls_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, S, D] -> [B, D]: the state at position 0 ([CLS] in the course's rows, right-padded)."""
    return hidden[:, 0]


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, S, D] -> [B, D]: the state of each row's last real token, for right- and left-padded rows alike.

    The index is the largest position whose mask is 1 (`mask.sum(1) - 1` is right only for right
    padding: on a left-padded row it points into the padding).
    """
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)  # [S]
    last = (positions * (attention_mask != 0)).argmax(dim=1)  # [B]
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, S, D] -> [B, D]: the mean over real tokens only (padding would pull short rows towards it)."""
    weights = (attention_mask != 0).to(hidden.dtype)[..., None]  # [B, S, 1]
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


POOL = {"cls": cls_pool, "last": last_token_pool, "mean": mean_pool}


class ClassifierOutput(NamedTuple):
    """`loss` (cross-entropy averaged over the batch, None without labels) and `logits` [B, L]."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class SequenceClassifier(nn.Module):
    """encoder -> pooling -> dropout -> linear; loss = cross-entropy on the logits (no softmax before it)."""

    def __init__(self, encoder: nn.Module, n_labels: int = 2, pooling: str = "cls", dropout: float = 0.1):
        super().__init__()
        if pooling not in POOL:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.encoder = encoder
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, n_labels)
        init_linear_(self.classifier)

    def pool(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The sentence vectors [B, D] the head reads (a probe computes them once and caches them)."""
        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)  # [B, S, D]
        return POOL[self.pooling](hidden, attention_mask)

    def head(self, pooled: torch.Tensor, labels: torch.Tensor | None = None) -> ClassifierOutput:
        """Dropout + linear on pooled vectors [B, D]; the loss when labels [B] are given."""
        logits = self.classifier(self.dropout(pooled)).float()  # [B, L]; fp32 for the loss under autocast
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return ClassifierOutput(loss, logits)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> ClassifierOutput:
        """Token ids [B, S] and mask [B, S] (1 token / 0 padding) -> logits [B, L] (and the loss)."""
        return self.head(self.pool(input_ids, attention_mask, token_type_ids), labels)


def freeze_encoder(model: SequenceClassifier) -> None:
    """A probe: no encoder parameter trains; the head (model.classifier) still does."""
    model.encoder.requires_grad_(False)
    model.classifier.requires_grad_(True)


def add_lora(model: SequenceClassifier, rank: int = 8, alpha: int = 16, dropout: float = 0.0) -> None:
    """Low-rank adapters (`peft`) on the encoder's attention projections; only they and the head train.
    The course's models: `LORA_TARGETS`; a transformers encoder (`hf_checkpoints.HFEncoder`) names its own.

    Each adapted linear layer computes W x + (alpha / rank) B A x with A [rank, D_in] random and B zero
    at first, so training starts from the pretrained function exactly.
    """
    from peft import LoraConfig, inject_adapter_in_model  # imported here: peft loads accelerate (slow)

    targets = getattr(model.encoder, "lora_targets", LORA_TARGETS)  # a transformers encoder: peft's table
    if not targets:
        kind = getattr(model.encoder.config, "model_type", "this encoder")
        raise ValueError(f"no LoRA target modules known for {kind}")
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets))
    inject_adapter_in_model(config, model.encoder)  # marks only the adapters of the encoder trainable
    for name, parameter in model.encoder.named_parameters():
        parameter.requires_grad_("lora_" in name)
    model.classifier.requires_grad_(True)


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The (name, parameter) pairs the optimizer updates."""
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def build_classifier(encoder: nn.Module, regime: str, *, pooling: str | None = None, dropout: float = 0.1,
                     lora_rank: int = 8, lora_alpha: int = 16) -> SequenceClassifier:
    """A classifier on `encoder` set up for `regime` ("full", "probe" or "lora")."""
    arch: Any = getattr(encoder.config, "arch", "bert")
    model = SequenceClassifier(encoder, pooling=pooling or DEFAULT_POOLING[arch], dropout=dropout)
    if regime == "probe":
        freeze_encoder(model)
    elif regime == "lora":
        add_lora(model, lora_rank, lora_alpha)
    elif regime != "full":
        raise ValueError(f"regime must be full, probe or lora, got {regime!r}")
    return model


__all__ = [
    "DEFAULT_POOLING", "LORA_TARGETS", "POOLINGS", "ClassifierOutput", "SequenceClassifier", "add_lora",
    "build_classifier", "cls_pool", "freeze_encoder", "last_token_pool", "mean_pool", "trainable_parameters",
]
