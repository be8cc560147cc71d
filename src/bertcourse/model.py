"""A tiny BERT and a parameter-matched tiny GPT, written to be read (nanoGPT style).

Both models share every building block: the same embeddings, the same transformer block and the same
prediction head. They differ only in what a position may look at (all positions for BERT, earlier
ones for GPT) and in what they predict (the selected masked tokens for BERT, the next token for GPT);
`ModelConfig.arch` is the one switch between them. That makes the pair a fair experiment: any
difference after pretraining comes from the objective, not from a bigger or differently shaped network.

The names are exercise 3's (`extended_attention_mask`, `SelfAttention`'s query/key/value, `MLMHead`);
`tests/test_model.py` proves the post-LN BERT computes the same hidden states as
`transformers.BertModel` and the GPT the same as `transformers.GPT2Model` once their weights are
copied over (`bertcourse.model_support`). Shapes in comments: B batch, S sequence, D d_model, H heads,
V vocabulary.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertcourse.config import ModelConfig
from bertcourse.masking import IGNORE_INDEX  # the label of positions outside the loss


def extended_attention_mask(
    attention_mask: torch.Tensor, dtype: torch.dtype = torch.float32, causal: bool = False
) -> torch.Tensor:
    """[B, S] of 1 (token) / 0 (padding) -> [B, 1, 1, S] of 0 / a very negative number ([B, 1, S, S] if causal).

    The mask is ADDED to the attention scores before the softmax, so blocked keys get weight ~0. The
    shape broadcasts over heads (and over query positions unless causal). The most negative finite
    number (not -inf) keeps a row that is all padding finite: its softmax is uniform instead of NaN.
    """
    allowed = attention_mask[:, None, None, :] != 0  # [B, 1, 1, S]
    if causal:  # and a query sees only itself and earlier keys; combined as booleans, so never -inf
        seq_len = attention_mask.shape[1]
        allowed = allowed & torch.ones(seq_len, seq_len, dtype=torch.bool, device=allowed.device).tril()
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


class Embeddings(nn.Module):
    """Token + position (+ segment) embeddings, summed, then LayerNorm and dropout.

    Summing works because each table is learned: the model places the three kinds of information in
    directions of the d_model-dimensional space that later layers can tell apart, and the sum is the
    same as concatenating one-hot codes and multiplying by one big matrix.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.position_embedding = nn.Embedding(config.max_seq_len, config.d_model)
        segments = config.type_vocab_size  # 0: no segment embedding (GPT)
        self.segment_embedding = nn.Embedding(segments, config.d_model) if segments else None
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """[B, S] token ids (and segment ids 0/1) -> [B, S, D]."""
        seq_len, max_seq_len = input_ids.shape[1], self.position_embedding.num_embeddings
        if seq_len > max_seq_len:
            raise ValueError(f"sequence of {seq_len} tokens is longer than max_seq_len={max_seq_len}")
        positions = torch.arange(seq_len, device=input_ids.device)  # [S]: broadcast over the batch
        x = self.token_embedding(input_ids) + self.position_embedding(positions)
        if self.segment_embedding is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.segment_embedding(token_type_ids)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention: softmax(query key^T / sqrt(d_head) + mask) value, per head.

    Exercise 3 writes the query, key and value projections as three nn.Linear layers; here they are one
    layer `qkv` of three times the width (one matrix product instead of three), cut in three.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.causal = config.causal
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.attention_dropout = config.dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, D]; mask: `extended_attention_mask`'s additive mask, or None (nothing blocked but,
        for the GPT, later positions)."""
        batch, seq_len, d_model = x.shape
        query, key, value = self.qkv(x).chunk(3, dim=-1)  # 3 x [B, S, D]

        def heads(t: torch.Tensor) -> torch.Tensor:  # [B, S, D] -> [B, H, S, d_head]: head h owns a slice of D
            return t.view(batch, seq_len, self.n_heads, -1).transpose(1, 2)

        # softmax(q k^T / sqrt(d_head) + mask) v in one fused kernel: faster, and it never stores the
        # [B, H, S, S] weights
        context = F.scaled_dot_product_attention(
            heads(query), heads(key), heads(value), attn_mask=mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
            is_causal=self.causal and mask is None,
        )  # [B, H, S, d_head]
        return self.out(context.transpose(1, 2).reshape(batch, seq_len, d_model))  # heads side by side: [B, S, D]


class FeedForward(nn.Module):
    """Two linear layers with a GELU between them, applied to every position on its own."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.d_model, config.d_ff)
        self.fc_out = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S, D] -> [B, S, d_ff] -> [B, S, D]."""
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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B, S, D] -> [B, S, D]."""
        if self.pre_ln:
            x = x + self.dropout(self.attention(self.attention_norm(x), mask))
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        x = self.attention_norm(x + self.dropout(self.attention(x, mask)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class MLMHead(nn.Module):
    """dense + GELU + LayerNorm, then a decoder whose weight IS the token embedding (tied), plus a bias.

    Tying saves vocab_size x d_model parameters (most of a tiny model) and makes input and output
    share one meaning per token. The GPT uses the same head to predict the next token.
    """

    def __init__(self, config: ModelConfig, token_embedding: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.decoder.weight = token_embedding.weight  # the same Parameter object, not a copy
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., D] -> [..., V] logits."""
        return F.linear(self.norm(F.gelu(self.dense(hidden))), self.decoder.weight, self.bias)


@dataclass
class LMOutput:
    """`logits` are [n_selected, V] (rows in the order of `labels != -100`) when labels are given, else
    [B, S, V]. `loss` is the mean cross-entropy over the selected positions.

    The logits are joined from the head's chunks (`head_loss_in_chunks`) only when first read, so a
    training step that needs only the loss never builds them.
    """

    loss: torch.Tensor | None
    logit_chunks: list[torch.Tensor]
    hidden_states: torch.Tensor

    @functools.cached_property
    def logits(self) -> torch.Tensor:
        """All logits in one tensor (joined only when asked: the loss never needs them whole)."""
        return self.logit_chunks[0] if len(self.logit_chunks) == 1 else torch.cat(self.logit_chunks)


class _LanguageModel(nn.Module):
    """Embeddings, blocks and the tied head, shared by BERT and GPT; subclasses choose the targets."""

    arch = ""  # the ModelConfig.arch the subclass implements

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.arch != self.arch:
            raise ValueError(f"{type(self).__name__} needs arch={self.arch!r}, got {config.arch!r} (see build_model)")
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.pre_ln else nn.Identity()
        self.head = MLMHead(config, self.embeddings.token_embedding)
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

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states [B, S, D] of the last layer."""
        x = self.embeddings(input_ids, token_type_ids)  # [B, S, D]
        mask = None
        if attention_mask is not None:
            # under autocast the scores are fp16/bf16: build the mask in that type, so that its "very
            # negative" value is that type's own minimum (float32's would overflow fp16 to -inf)
            autocast = torch.is_autocast_enabled(x.device.type)
            dtype = torch.get_autocast_dtype(x.device.type) if autocast else x.dtype
            mask = extended_attention_mask(attention_mask, dtype, causal=self.config.causal)
        for block in self.blocks:
            x = block(x, mask)
        return self.final_norm(x)

    def predict(self, hidden: torch.Tensor, labels: torch.Tensor | None) -> LMOutput:
        """The head's logits, and the loss when `labels` are given (then only where labels != -100)."""
        if labels is None:
            return LMOutput(None, [self.head(hidden)], hidden)
        # Only the positions that enter the loss go through the head: with 15% of tokens selected this
        # skips most of the largest matrix product of a small model (d_model x vocab per token).
        selected = labels != IGNORE_INDEX  # [B, S]
        loss, logit_chunks = head_loss_in_chunks(self.head, hidden[selected], labels[selected])  # [n, D], [n]
        return LMOutput(loss, logit_chunks, hidden)


class BertForMLM(_LanguageModel):
    """Bidirectional encoder + masked-language-model head."""

    arch = "bert"

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> LMOutput:
        """`labels`: original token ids at the selected positions, -100 elsewhere."""
        return self.predict(self.encode(input_ids, attention_mask, token_type_ids), labels)


class GPT(_LanguageModel):
    """Causal decoder with the same blocks and head as BertForMLM, trained to predict the next token."""

    arch = "gpt"

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> LMOutput:
        """`labels`: the token each position is trained to predict, -100 where none: the next token,
        from `bertcourse.training.objectives.next_token_labels` (the one place the shift is written)."""
        return self.predict(self.encode(input_ids, attention_mask), labels)


def build_model(config: ModelConfig) -> BertForMLM | GPT:
    """The model class of `config.arch`."""
    return {"bert": BertForMLM, "gpt": GPT}[config.arch](config)


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (the tied decoder weight counts once)."""
    return sum(p.numel() for p in model.parameters())


def describe(model: nn.Module) -> str:
    """One line with the architecture and its parameter count, printed by commands and lessons."""
    config: ModelConfig = model.config  # type: ignore[assignment]
    return (
        f"{type(model).__name__}: {config.n_layers} layers x {config.d_model} wide, {config.n_heads} heads, "
        f"vocab {config.vocab_size}: {count_parameters(model):,} parameters"
    )


# ----------------------------------------------------------------------------- end of the lesson
# Below: a speed device, not a different computation. Test and benchmark support lives in model_support.

LOGITS_CHUNK_BYTES = 16 * 2**20  # on the CPU the head's logits are computed in chunks of about this size
CUDA_CHUNK_SHARE = 16  # on CUDA a chunk may take up to 1/16 of the GPU's memory (a T4: ~1 GB, one chunk)
ROWS_MULTIPLE = 64  # the last chunk's rows are padded to a multiple of this (see head_loss_in_chunks)


@functools.lru_cache(maxsize=8)
def _gpu_memory(index: int | None) -> int:
    return torch.cuda.get_device_properties(index).total_memory


def rows_per_chunk(vocab_size: int, device: torch.device) -> int:
    """How many rows of fp32 logits [rows, V] one chunk of the head holds on `device`.

    On the CPU chunks of `LOGITS_CHUNK_BYTES` (see `head_loss_in_chunks`). On CUDA the caching allocator
    reuses a step's blocks, so the CPU's reason is gone, and every chunk costs its own kernel launches (a
    GPT step of the `gpu` profile: ~2,100 ops in 16 MB chunks against ~870 in one): there a chunk is as
    large as 1/`CUDA_CHUNK_SHARE` of the GPU's memory, which holds a whole step of the course's GPTs.
    """
    budget = LOGITS_CHUNK_BYTES
    if device.type == "cuda":
        budget = max(budget, _gpu_memory(device.index) // CUDA_CHUNK_SHARE)
    return max(1, budget // (4 * vocab_size))


def head_loss_in_chunks(
    head: MLMHead, rows: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The mean cross-entropy of `head(rows)` [n, V] against `targets` [n], and the logits in chunks.

    Why chunks (on the CPU; on CUDA `rows_per_chunk` makes one chunk of a step): the GPT predicts at every
    position, and one 130 MB logits tensor (with its softmax and
    gradients) would be a fresh allocation from the operating system every step, its pages zero-filled
    on first touch; chunks of ~16 MB are recycled by the C allocator instead (benchmarks/README.md).
    The loss is the same as over the joined logits: one sum, divided once.

    Why padding: the number of targets changes with every batch, so the last chunk's shape would too,
    and the CPU kernels keep memory for every shape they meet (oneDNN's kernel cache about half of it;
    the live tensors stay the same): a run's resident memory grew all run long (GPT, cpu profile:
    >12 GB by step 3,000). Zero rows with ignored targets up to a multiple of `ROWS_MULTIPLE` leave a
    few dozen shapes, and memory flat after warm-up (benchmarks/README.md, "Resident memory").
    """
    if rows.shape[0] == 0:  # no target: a zero loss that still backpropagates
        logits = head(rows)
        return logits.sum(), [logits]
    per_chunk = rows_per_chunk(head.bias.numel(), rows.device)
    parts, goals = list(rows.split(per_chunk)), list(targets.split(per_chunk))
    padding = -len(parts[-1]) % ROWS_MULTIPLE
    parts[-1] = F.pad(parts[-1], (0, 0, 0, padding))
    goals[-1] = F.pad(goals[-1], (0, padding), value=IGNORE_INDEX)  # cross_entropy skips these rows
    chunks = [head(part) for part in parts]
    total = sum(F.cross_entropy(c.float(), t, reduction="sum") for c, t in zip(chunks, goals))
    chunks[-1] = chunks[-1][: len(chunks[-1]) - padding]  # the real rows only
    return total / len(targets), chunks


def init_linear_(*layers: nn.Linear, std: float = 0.02) -> None:
    """BERT's initialisation for a head added on top of the model: weights ~ N(0, std), biases zero."""
    for layer in layers:
        nn.init.normal_(layer.weight, std=std)
        nn.init.zeros_(layer.bias)


__all__ = [
    "IGNORE_INDEX",
    "ModelConfig",
    "extended_attention_mask",
    "Embeddings",
    "SelfAttention",
    "FeedForward",
    "Block",
    "MLMHead",
    "LMOutput",
    "BertForMLM",
    "GPT",
    "build_model",
    "count_parameters",
    "describe",
    "init_linear_",
    "head_loss_in_chunks",
    "rows_per_chunk",
    "ROWS_MULTIPLE",
]
