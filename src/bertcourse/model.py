"""A tiny BERT and a parameter-matched tiny GPT, written to be read (nanoGPT style).

Both models share every building block: the same embeddings, the same transformer block and the same
prediction head. They differ only in what a position may look at (all positions for BERT, earlier
ones for GPT) and in what they predict (the selected masked tokens for BERT, the next token for GPT).
That makes the pair a fair experiment: any difference after pretraining comes from the objective,
not from a bigger or differently shaped network.

Naming follows the parts of the BERT paper; `tests/test_model.py` proves the post-LN BERT computes
the same hidden states as `transformers.BertModel` and the GPT the same as `transformers.GPT2Model`
once their weights are copied over.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100  # label of positions that do not enter the loss (PyTorch's cross_entropy default)
LOGITS_CHUNK_BYTES = 16 * 2**20  # the head's logits are computed in chunks of about this size (see _predict)


@dataclass
class ModelConfig:
    """Everything that fixes the shape of a model. Plain data: saved inside every checkpoint."""

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
    causal: bool = False  # True: a position attends only to itself and earlier positions (GPT)
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_profile(cls, profile: str = "cpu", arch: str = "bert", course: Any = None, **overrides: Any):
        """The model of a course.yml hardware profile; `arch="gpt"` gives its parameter-matched GPT."""
        from bertcourse.course import load_course

        spec = (course or load_course()).profile(profile)
        values: dict[str, Any] = dict(dataclasses.asdict(spec.model), vocab_size=spec.vocab_size)
        if arch == "gpt":
            values.update(
                type_vocab_size=0, pre_ln=True, embedding_norm=False, causal=True, layer_norm_eps=1e-5
            )
        elif arch != "bert":
            raise ValueError(f"unknown architecture {arch!r}; choose 'bert' or 'gpt'")
        values.update(overrides)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def additive_padding_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[batch, seq] of 1 (token) / 0 (padding) -> [batch, 1, 1, seq] of 0 / a very negative number.

    The mask is ADDED to the attention scores before the softmax, so padding keys get weight ~0. The
    shape broadcasts over heads and query positions: every query ignores the same padded keys. The
    most negative finite number (not -inf) keeps a row that is all padding finite: its softmax is
    uniform instead of NaN.
    """
    blocked = attention_mask[:, None, None, :] == 0
    return torch.zeros(blocked.shape, dtype=dtype, device=attention_mask.device).masked_fill(
        blocked, torch.finfo(dtype).min
    )


class Embeddings(nn.Module):
    """Token + position (+ segment) embeddings, summed, then LayerNorm and dropout.

    Summing works because each table is learned: the model places the three kinds of information in
    directions of the d_model-dimensional space that later layers can tell apart, and the sum is the
    same as concatenating one-hot codes and multiplying by one big matrix.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.token_embedding = nn.Embedding(
            config.vocab_size, config.d_model, padding_idx=config.pad_token_id
        )
        self.position_embedding = nn.Embedding(config.max_seq_len, config.d_model)
        self.segment_embedding = (
            nn.Embedding(config.type_vocab_size, config.d_model) if config.type_vocab_size else None
        )
        self.norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
            if config.embedding_norm
            else nn.Identity()
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.position_embedding.num_embeddings:
            raise ValueError(
                f"sequence of {seq_len} tokens is longer than max_seq_len="
                f"{self.position_embedding.num_embeddings}"
            )
        positions = torch.arange(seq_len, device=input_ids.device)
        x = self.token_embedding(input_ids) + self.position_embedding(positions)
        if self.segment_embedding is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.segment_embedding(token_type_ids)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused query/key/value projection.

    `torch.nn.functional.scaled_dot_product_attention` does softmax(q k^T / sqrt(d_head) + mask) v in
    one fused kernel, which is faster and uses less memory than spelling the steps out.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.attention_dropout = config.dropout

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        batch, seq_len, d_model = x.shape
        # [batch, seq, 3, heads, d_head] -> three tensors of [batch, heads, seq, d_head]
        q, k, v = self.qkv(x).view(batch, seq_len, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
            is_causal=causal and mask is None,
        )
        return self.out(y.transpose(1, 2).reshape(batch, seq_len, d_model))


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.d_model, config.d_ff)
        self.fc_out = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x)))


class Block(nn.Module):
    """Attention then feed-forward, each wrapped in a residual connection and a LayerNorm.

    Post-LN (BERT) normalises after adding the residual; pre-LN (GPT-2) normalises the input of each
    sub-layer and leaves the residual stream untouched, which trains more stably when deep.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.pre_ln = config.pre_ln
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        if self.pre_ln:
            x = x + self.dropout(self.attention(self.attention_norm(x), mask, causal))
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        x = self.attention_norm(x + self.dropout(self.attention(x, mask, causal)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class PredictionHead(nn.Module):
    """dense + GELU + LayerNorm, then a decoder whose weight IS the token embedding (tied), plus a bias.

    Tying saves vocab_size x d_model parameters (most of a tiny model) and makes input and output
    share one meaning per token.
    """

    def __init__(self, config: ModelConfig, token_embedding: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.decoder.weight = token_embedding.weight  # the same Parameter object, not a copy
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(F.gelu(self.dense(hidden))), self.decoder.weight, self.bias)


@dataclass
class LMOutput:
    """`logits` are [n_selected, vocab] (rows in the order of `labels != -100`) when labels are given,
    else [batch, seq, vocab]. `loss` is the mean cross-entropy over the selected positions.

    The head computes the logits in chunks; they are joined into one tensor only when `logits` is first
    read, so a training step that needs only the loss never builds it.
    """

    loss: torch.Tensor | None
    logit_chunks: list[torch.Tensor]
    hidden_states: torch.Tensor

    @functools.cached_property
    def logits(self) -> torch.Tensor:
        return self.logit_chunks[0] if len(self.logit_chunks) == 1 else torch.cat(self.logit_chunks)


class _LanguageModel(nn.Module):
    """Embeddings, blocks and the tied prediction head; subclasses choose the mask and the targets."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.pre_ln else nn.Identity()
        )
        self.head = PredictionHead(config, self.embeddings.token_embedding)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            if module is not self.head.decoder:  # tied: initialised as the embedding
                nn.init.normal_(module.weight, std=self.config.init_std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()

    def num_parameters(self) -> int:
        """Distinct parameters (the tied decoder weight counts once)."""
        return sum(p.numel() for p in self.parameters())

    def _attention_mask(self, attention_mask: torch.Tensor | None, dtype: torch.dtype, seq_len: int):
        if attention_mask is None:
            return None
        if not self.config.causal:
            return additive_padding_mask(attention_mask, dtype)
        # causal AND not padding, combined as booleans first so two large negatives never add to -inf
        allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=attention_mask.device).tril()
        allowed = allowed[None, None] & (attention_mask[:, None, None, :] != 0)
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states [batch, seq, d_model] of the last layer."""
        x = self.embeddings(input_ids, token_type_ids)
        # under autocast the scores are fp16/bf16: build the mask in that type, so that its "very
        # negative" value is that type's own minimum (float32's would overflow fp16 to -inf)
        autocast = torch.is_autocast_enabled(x.device.type)
        dtype = torch.get_autocast_dtype(x.device.type) if autocast else x.dtype
        mask = self._attention_mask(attention_mask, dtype, input_ids.shape[1])
        for block in self.blocks:
            x = block(x, mask, self.config.causal)
        return self.final_norm(x)

    def _predict(self, hidden: torch.Tensor, labels: torch.Tensor | None) -> LMOutput:
        if labels is None:
            return LMOutput(None, [self.head(hidden)], hidden)
        # Only the positions that enter the loss go through the head: with 15% of tokens selected this
        # skips most of the largest matrix product of a small model (d_model x vocab per token).
        selected = labels != IGNORE_INDEX
        rows, targets = hidden[selected], labels[selected]
        if rows.shape[0] == 0:
            logits = self.head(rows)
            return LMOutput(logits.sum(), [logits], hidden)  # no target: a zero loss that still backpropagates
        # The head runs on chunks of at most ~16 MB of logits. The GPT predicts at every position, and
        # one 130 MB logits tensor (and its softmax and gradients) would be a fresh allocation from the
        # operating system every step, its pages zero-filled on first touch; chunks this size are
        # recycled by the C allocator instead (benchmarks/README.md). Same loss: one sum, divided once.
        per_chunk = max(1, LOGITS_CHUNK_BYTES // (4 * self.config.vocab_size))
        pieces = [self.head(part) for part in rows.split(per_chunk)]
        total = sum(F.cross_entropy(p.float(), t, reduction="sum") for p, t in zip(pieces, targets.split(per_chunk)))
        return LMOutput(total / len(targets), pieces, hidden)


class BertForMLM(_LanguageModel):
    """Bidirectional encoder + masked-language-model head."""

    def __init__(self, config: ModelConfig):
        if config.causal:
            raise ValueError("BertForMLM needs causal=False (use GPT for a causal model)")
        super().__init__(config)

    @property
    def mlm_head(self) -> PredictionHead:
        return self.head

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> LMOutput:
        """`labels`: original token ids at the selected positions, -100 elsewhere."""
        return self._predict(self.encode(input_ids, attention_mask, token_type_ids), labels)


class GPT(_LanguageModel):
    """Causal decoder with the same blocks and head as BertForMLM, trained to predict the next token."""

    def __init__(self, config: ModelConfig):
        if not config.causal:
            raise ValueError("GPT needs causal=True (ModelConfig.from_profile(..., arch='gpt'))")
        super().__init__(config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> LMOutput:
        """`labels`: usually input_ids with padding set to -100; position t is trained to predict
        labels[t + 1] (the shift happens here, as in transformers)."""
        hidden = self.encode(input_ids, attention_mask)
        if labels is None:
            return self._predict(hidden, None)
        return self._predict(hidden[:, :-1], labels[:, 1:])


def build_model(config: ModelConfig) -> BertForMLM | GPT:
    """The model class that fits the config (causal -> GPT, else BERT)."""
    return GPT(config) if config.causal else BertForMLM(config)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def describe(model: nn.Module) -> str:
    """One line with the architecture and its parameter count, printed by commands and lessons."""
    config: ModelConfig = model.config  # type: ignore[assignment]
    return (
        f"{type(model).__name__}: {config.n_layers} layers x {config.d_model} wide, {config.n_heads} heads, "
        f"vocab {config.vocab_size}: {count_parameters(model):,} parameters"
    )


# ------------------------------------------------------------------ weight conversion (tests, exercise)


def hf_bert_config(config: ModelConfig):
    """A `transformers.BertConfig` of the same shape (built locally, nothing is downloaded)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff,
        hidden_act="gelu",
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        max_position_embeddings=config.max_seq_len,
        type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_eps,
        pad_token_id=config.pad_token_id,
        initializer_range=config.init_std,
    )


def bert_state_dict_to_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our BertForMLM (post-LN) weights renamed to `transformers.BertForMaskedLM` names."""
    hf = {
        "bert.embeddings.word_embeddings.weight": state["embeddings.token_embedding.weight"],
        "bert.embeddings.position_embeddings.weight": state["embeddings.position_embedding.weight"],
        "bert.embeddings.token_type_embeddings.weight": state["embeddings.segment_embedding.weight"],
        "bert.embeddings.LayerNorm.weight": state["embeddings.norm.weight"],
        "bert.embeddings.LayerNorm.bias": state["embeddings.norm.bias"],
        "cls.predictions.transform.dense.weight": state["head.dense.weight"],
        "cls.predictions.transform.dense.bias": state["head.dense.bias"],
        "cls.predictions.transform.LayerNorm.weight": state["head.norm.weight"],
        "cls.predictions.transform.LayerNorm.bias": state["head.norm.bias"],
        "cls.predictions.decoder.weight": state["head.decoder.weight"],
        "cls.predictions.bias": state["head.bias"],
    }
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"bert.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = state[ours + f"attention.qkv.{kind}"].chunk(3, dim=0)
            hf[theirs + f"attention.self.query.{kind}"] = q
            hf[theirs + f"attention.self.key.{kind}"] = k
            hf[theirs + f"attention.self.value.{kind}"] = v
            hf[theirs + f"attention.output.dense.{kind}"] = state[ours + f"attention.out.{kind}"]
            hf[theirs + f"attention.output.LayerNorm.{kind}"] = state[ours + f"attention_norm.{kind}"]
            hf[theirs + f"intermediate.dense.{kind}"] = state[ours + f"ffn.fc_in.{kind}"]
            hf[theirs + f"output.dense.{kind}"] = state[ours + f"ffn.fc_out.{kind}"]
            hf[theirs + f"output.LayerNorm.{kind}"] = state[ours + f"ffn_norm.{kind}"]
    return hf


def gpt_state_dict_to_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our GPT backbone weights renamed to `transformers.GPT2Model` names (Conv1D stores W transposed)."""
    hf = {
        "wte.weight": state["embeddings.token_embedding.weight"],
        "wpe.weight": state["embeddings.position_embedding.weight"],
        "ln_f.weight": state["final_norm.weight"],
        "ln_f.bias": state["final_norm.bias"],
    }
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        hf[theirs + "ln_1.weight"] = state[ours + "attention_norm.weight"]
        hf[theirs + "ln_1.bias"] = state[ours + "attention_norm.bias"]
        hf[theirs + "ln_2.weight"] = state[ours + "ffn_norm.weight"]
        hf[theirs + "ln_2.bias"] = state[ours + "ffn_norm.bias"]
        hf[theirs + "attn.c_attn.weight"] = state[ours + "attention.qkv.weight"].t()
        hf[theirs + "attn.c_attn.bias"] = state[ours + "attention.qkv.bias"]
        hf[theirs + "attn.c_proj.weight"] = state[ours + "attention.out.weight"].t()
        hf[theirs + "attn.c_proj.bias"] = state[ours + "attention.out.bias"]
        hf[theirs + "mlp.c_fc.weight"] = state[ours + "ffn.fc_in.weight"].t()
        hf[theirs + "mlp.c_fc.bias"] = state[ours + "ffn.fc_in.bias"]
        hf[theirs + "mlp.c_proj.weight"] = state[ours + "ffn.fc_out.weight"].t()
        hf[theirs + "mlp.c_proj.bias"] = state[ours + "ffn.fc_out.bias"]
    return hf


def hf_gpt2_config(config: ModelConfig):
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.max_seq_len,
        n_embd=config.d_model,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_inner=config.d_ff,
        activation_function="gelu",
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        layer_norm_epsilon=config.layer_norm_eps,
        initializer_range=config.init_std,
    )


def randomize_(model: nn.Module, generator: torch.Generator | None = None, std: float = 0.2) -> nn.Module:
    """Fill EVERY parameter (biases and LayerNorm too) with random values, in place.

    Default initialisation (zero biases, unit LayerNorm gains) hides mistakes such as a missing bias
    or a swapped LayerNorm; comparisons of two implementations use this instead.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator) * std
            if name.endswith("norm.weight"):
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)
    return model


__all__ = [
    "IGNORE_INDEX",
    "ModelConfig",
    "Embeddings",
    "SelfAttention",
    "FeedForward",
    "Block",
    "PredictionHead",
    "LMOutput",
    "BertForMLM",
    "GPT",
    "build_model",
    "count_parameters",
    "describe",
    "additive_padding_mask",
    "hf_bert_config",
    "hf_gpt2_config",
    "bert_state_dict_to_hf",
    "gpt_state_dict_to_hf",
    "randomize_",
]
