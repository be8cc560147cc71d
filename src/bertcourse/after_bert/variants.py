"""Two of BERT's successors as small changes to the course BERT: ALBERT's parameter reductions and RoPE.

- **ALBERT** (Lan et al. 2020) asks where a BERT's parameters go. The token table is V x H: most of a
  small model. A *factorised* embedding keeps tokens in E < H dimensions and projects them up
  (V*E + E*H instead of V*H); the MLM head then projects back down to E and decodes with the same
  (tied) E-wide table. *Cross-layer sharing* uses ONE block's parameters at every layer: n_layers times
  fewer encoder parameters, the same compute (every layer still runs).
- **RoPE** (Su et al. 2021; ModernBERT uses it) drops the learned absolute position table: each head's
  query and key vectors are rotated by an angle proportional to their position, pair of features by
  pair of features, so the score q_m . k_n depends on the positions only through m - n.

`build_variant(config, VariantSpec(...))` returns a `BertForMLM` subclass with the same forward,
`encode` and outputs, so the course's evaluation, probe and fine-tuning read it unchanged. Shapes:
B batch, S sequence, H d_model, E embedding size, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertcourse.config import ModelConfig
from bertcourse.model import BertForMLM, Embeddings, MLMHead, SelfAttention, count_parameters

POSITIONS = ("learned", "rope")


@dataclass(frozen=True)
class VariantSpec:
    """What differs from the course BERT: embedding size E (None: E = d_model, no factorisation),
    cross-layer sharing, and how positions enter ("learned" absolute table or "rope")."""

    embedding_size: int | None = None
    share_layers: bool = False
    positions: str = "learned"

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, got {self.positions!r}")
        if self.embedding_size is not None and self.embedding_size < 1:
            raise ValueError(f"embedding_size must be a positive number, got {self.embedding_size}")


def embedding_parameters(vocab_size: int, d_model: int, embedding_size: int | None = None) -> int:
    """The token embedding's weights: V*H, or factorised V*E + E*H (the table plus the E -> H projection's
    matrix; the projection's H biases come on top in a real model)."""
    if embedding_size is None:
        return vocab_size * d_model
    return vocab_size * embedding_size + embedding_size * d_model


# ----------------------------------------------------------------------------- ALBERT


def _narrow(config: ModelConfig, width: int) -> ModelConfig:
    """`config` at `width` features for the embedding-side modules (one head: they have no attention)."""
    return dataclasses.replace(config, d_model=width, n_heads=1)


class FactorisedEmbeddings(nn.Module):
    """The course's embeddings computed E wide (token, position and segment tables, LayerNorm), then one
    linear projection E -> H, as ALBERT's `embedding_hidden_mapping_in`."""

    def __init__(self, config: ModelConfig, embedding_size: int):
        super().__init__()
        self.inner = Embeddings(_narrow(config, embedding_size))
        self.project = nn.Linear(embedding_size, config.d_model)

    @property
    def token_embedding(self) -> nn.Embedding:
        """The V x E table (the MLM head's decoder is tied to it)."""
        return self.inner.token_embedding

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """[B, S] -> [B, S, E] -> [B, S, H]."""
        return self.project(self.inner(input_ids, token_type_ids))


class FactorisedMLMHead(MLMHead):
    """The MLM head of a factorised model: dense H -> E, GELU, LayerNorm, then the tied V x E decoder."""

    def __init__(self, config: ModelConfig, token_embedding: nn.Embedding):
        embedding_size = token_embedding.embedding_dim
        super().__init__(_narrow(config, embedding_size), token_embedding)
        self.dense = nn.Linear(config.d_model, embedding_size)


# ----------------------------------------------------------------------------- RoPE


def rotary_tables(seq_len: int, head_dim: int, base: float = 10_000.0,
                  device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [S, head_dim] of the angles position * base^(-2i / head_dim), each angle written twice
    (feature i and i + head_dim / 2 form one rotated pair: the rotate-half convention)."""
    if head_dim % 2:
        raise ValueError(f"RoPE rotates pairs of features: head_dim must be even, got {head_dim}")
    inverse = base ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)  # [d/2]
    angles = torch.arange(seq_len, device=device, dtype=torch.float32)[:, None] * inverse  # [S, d/2]
    angles = torch.cat([angles, angles], dim=-1)  # [S, d]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """[..., S, d] rotated: each pair (x_i, x_{i+d/2}) turned by its position's angle. A rotation keeps
    lengths, and R(m)^T R(n) = R(n - m), so q_m . k_n after rotation depends on n - m only."""
    first, second = x.chunk(2, dim=-1)
    rotated_half = torch.cat([-second, first], dim=-1)
    return (x * cos + rotated_half * sin).to(x.dtype)


class RotarySelfAttention(SelfAttention):
    """The course's attention with the query and key of every head rotated by their position (RoPE)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, D] -> [B, S, D], as `SelfAttention` but with rotated queries and keys."""
        batch, seq_len, d_model = x.shape
        query, key, value = self.qkv(x).chunk(3, dim=-1)

        def heads(t: torch.Tensor) -> torch.Tensor:  # [B, S, D] -> [B, H, S, d_head]
            return t.view(batch, seq_len, self.n_heads, -1).transpose(1, 2)

        cos, sin = rotary_tables(seq_len, d_model // self.n_heads, device=x.device)
        context = F.scaled_dot_product_attention(
            apply_rotary(heads(query), cos, sin), apply_rotary(heads(key), cos, sin), heads(value), attn_mask=mask,
            dropout_p=self.attention_dropout if self.training else 0.0, is_causal=self.causal and mask is None,
        )
        return self.out(context.transpose(1, 2).reshape(batch, seq_len, d_model))


class NoPositionEmbeddings(Embeddings):
    """Token (+ segment) embeddings without the absolute position table: RoPE puts positions in attention."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        del self.position_embedding
        self.max_seq_len = config.max_seq_len

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """[B, S] -> [B, S, D]: token + segment, LayerNorm, dropout."""
        if input_ids.shape[1] > self.max_seq_len:
            raise ValueError(f"sequence of {input_ids.shape[1]} tokens is longer than max_seq_len={self.max_seq_len}")
        x = self.token_embedding(input_ids)
        if self.segment_embedding is not None:
            x = x + self.segment_embedding(torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids)
        return self.dropout(self.norm(x))


# ----------------------------------------------------------------------------- the model


class BertVariant(BertForMLM):
    """The course BERT with `spec`'s changes; forward, `encode` and the outputs are BertForMLM's."""

    def __init__(self, config: ModelConfig, spec: VariantSpec):
        super().__init__(config)
        self.spec = spec
        if spec.positions == "rope":
            self.embeddings = NoPositionEmbeddings(config)
            for block in self.blocks:
                block.attention = RotarySelfAttention(config)
        if spec.embedding_size is not None:
            if spec.positions == "rope":
                raise ValueError("a factorised embedding with RoPE is not built here: choose one change")
            self.embeddings = FactorisedEmbeddings(config, spec.embedding_size)
            self.head = FactorisedMLMHead(config, self.embeddings.token_embedding)
        else:
            self.head = MLMHead(config, self.embeddings.token_embedding)
        if spec.share_layers:  # the same Block object at every depth: one set of parameters, n_layers uses
            shared = self.blocks[0]
            self.blocks = nn.ModuleList([shared] * config.n_layers)
        self.apply(self._init_weights)


def build_variant(config: ModelConfig, spec: VariantSpec) -> BertVariant:
    """The course BERT of `config` changed as `spec` says (a plain `VariantSpec()` is the course BERT)."""
    if config.arch != "bert":
        raise ValueError(f"the variants change the BERT; got arch={config.arch!r}")
    return BertVariant(config, spec)


def parameter_counts(config: ModelConfig, embedding_size: int) -> dict[str, int]:
    """Exact parameter counts of the course BERT of `config` and its variants (built on the meta device:
    no memory, no time): bert, factorised (E = `embedding_size`), shared (cross-layer), albert (both), rope."""
    specs = {"bert": VariantSpec(), "factorised": VariantSpec(embedding_size=embedding_size),
             "shared": VariantSpec(share_layers=True),
             "albert": VariantSpec(embedding_size=embedding_size, share_layers=True),
             "rope": VariantSpec(positions="rope")}
    with torch.device("meta"):
        return {name: count_parameters(build_variant(config, spec)) for name, spec in specs.items()}


__all__ = [
    "POSITIONS", "VariantSpec", "embedding_parameters", "FactorisedEmbeddings", "FactorisedMLMHead",
    "rotary_tables", "apply_rotary", "RotarySelfAttention", "NoPositionEmbeddings", "BertVariant",
    "build_variant", "parameter_counts",
]
