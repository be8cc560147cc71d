"""Generating text with a bidirectional encoder: cloze filling, mask-predict refinement, and the attention
masks that turn one network into an encoder, a decoder or a prefix LM (lesson 7).

An MLM encoder gives a distribution for each [MASK] given everything else, not a left-to-right
factorisation of the sentence, so it has no natural way to write a long text. Three ways around that:

- **cloze**: fill one blank from both sides (what MLM is trained for);
- **iterative refinement** (mask-predict, Ghazvininejad et al. 2019): start with every position to fill
  as [MASK], predict all of them at once, then re-mask the least confident and predict again, for a
  fixed number of rounds, so the later guesses condition on the earlier ones;
- **another attention mask** (UniLM, Dong et al. 2019): the same weights with a causal mask are a
  left-to-right LM, with a prefix mask a sequence-to-sequence model (the prefix sees itself both ways,
  each generated token sees the prefix and the tokens before it).

The masks here are boolean [S, S] tables, `allowed[query, key]`; `additive_attention_mask` turns one into
the additive form the course model's blocks take. Drawing a mask (`draw_attention_mask`) uses the
matplotlib Axes it is given and never pyplot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bertcourse.errors import BertcourseError
from bertcourse.masking import IGNORE_INDEX
from bertcourse.training.devices import to_device


class GenerationError(BertcourseError, ValueError):
    """A mask or a generation request that cannot work (a prefix longer than the sequence, no [MASK], ...)."""


# ----------------------------------------------------------------------------- the three masks


def bidirectional_mask(seq_len: int) -> torch.Tensor:
    """[S, S] all True: every position attends to every position (BERT)."""
    _check_length(seq_len)
    return torch.ones(seq_len, seq_len, dtype=torch.bool)


def causal_mask(seq_len: int) -> torch.Tensor:
    """[S, S] lower triangle: position q attends to keys k <= q (GPT; UniLM's left-to-right LM)."""
    _check_length(seq_len)
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()


def prefix_mask(seq_len: int, prefix_len: int) -> torch.Tensor:
    """[S, S] UniLM's sequence-to-sequence mask: every position sees the whole prefix (the source, both
    ways); a position after the prefix also sees the positions after the prefix up to itself, never later.

    prefix_len = seq_len gives the bidirectional mask, prefix_len = 0 (or 1) the causal one.
    """
    _check_length(seq_len)
    if not 0 <= prefix_len <= seq_len:
        raise GenerationError(f"prefix_len must lie in [0, {seq_len}] (the sequence length), got {prefix_len}")
    allowed = causal_mask(seq_len)
    allowed[:, :prefix_len] = True
    return allowed


def _check_length(seq_len: int) -> None:
    if not isinstance(seq_len, int) or seq_len < 1:
        raise GenerationError(f"seq_len must be a positive int, got {seq_len!r}")


def additive_attention_mask(allowed: torch.Tensor, attention_mask: torch.Tensor | None = None,
                            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`allowed` [S, S] (or [B, S, S]) and padding [B, S] -> [B or 1, 1, S, S]: 0 where a query may look,
    the most negative finite number elsewhere (the form `bertcourse.model.Block` adds to its scores).

    A padding key is blocked for every query, as in `bertcourse.model.extended_attention_mask`.
    """
    if allowed.dtype != torch.bool or allowed.dim() not in (2, 3) or allowed.shape[-1] != allowed.shape[-2]:
        raise GenerationError(f"allowed must be a square bool [S, S] or [B, S, S] tensor, got "
                              f"{allowed.dtype} {tuple(allowed.shape)}")
    allowed = allowed[None, None] if allowed.dim() == 2 else allowed[:, None]
    if attention_mask is not None:
        if attention_mask.shape[-1] != allowed.shape[-1]:
            raise GenerationError(f"attention_mask has {attention_mask.shape[-1]} positions, the mask "
                                  f"{allowed.shape[-1]}")
        allowed = allowed & (attention_mask[:, None, None, :].to(allowed.device) != 0)
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def encode_with_mask(model: Any, input_ids: torch.Tensor, allowed: torch.Tensor,
                     attention_mask: torch.Tensor | None = None,
                     token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The course model's last hidden states [B, S, D] with attention restricted by `allowed` [S, S]:
    the same weights run as an encoder, a decoder or a prefix LM, only the mask differs."""
    x = model.embeddings(input_ids, token_type_ids)
    mask = additive_attention_mask(allowed.to(x.device), attention_mask, x.dtype)  # on the model's device
    for block in model.blocks:
        x = block(x, mask)
    return model.final_norm(x)


def masked_token_hits(model: Any, batches: Sequence[dict[str, torch.Tensor]], mask_for_length: Any,
                      device: torch.device | str = "cpu") -> torch.Tensor:
    """1.0 / 0.0 per target of masked-LM `batches` (their `labels`, -100 elsewhere): is the top prediction right
    when attention is restricted by `mask_for_length(S)`, e.g. `causal_mask`? With `bidirectional_mask` these
    are `heldout.target_hits`; with another mask they show what the same weights can do under it."""
    was_training = model.training
    model.eval()
    hits = []
    try:
        with torch.no_grad():
            for batch in batches:
                batch = to_device(batch, device)
                allowed = mask_for_length(batch["input_ids"].shape[1])
                hidden = encode_with_mask(model, batch["input_ids"], allowed, batch.get("attention_mask"),
                                          batch.get("token_type_ids"))
                selected = batch["labels"] != IGNORE_INDEX
                predicted = model.head(hidden[selected]).argmax(-1)
                hits.append((predicted == batch["labels"][selected]).double().cpu())
    finally:
        model.train(was_training)
    return torch.cat(hits) if hits else torch.zeros(0, dtype=torch.float64)


def draw_attention_mask(ax: Any, allowed: torch.Tensor, title: str = "", labels: Sequence[str] | None = None) -> Any:
    """Draw `allowed` [S, S] on the matplotlib Axes `ax` (dark = may attend) and return the image, for a
    colour bar. `labels` name the positions on both axes."""
    image = ax.imshow(allowed.float().numpy(), cmap="Blues", vmin=0, vmax=1)
    ax.set(title=title, xlabel="key (attended to)", ylabel="query (attending)")
    if labels is not None:
        ticks = list(range(len(labels)))
        ax.set_xticks(ticks, labels, rotation=90, fontsize=7)
        ax.set_yticks(ticks, labels, fontsize=7)
    return image


# ----------------------------------------------------------------------------- cloze and mask-predict


@dataclass
class ClozeGuess:
    """One [MASK]'s best candidates: its position, the tokens and their probabilities, best first."""

    position: int
    tokens: list[str]
    probabilities: list[float]


def _logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids, attention_mask).logits.float()  # [B, S, V]


def _forbid(logits: torch.Tensor, forbidden: Sequence[int]) -> torch.Tensor:
    """Special tokens are never an answer: MLM never trained them as targets."""
    if len(forbidden):
        logits = logits.clone()
        logits[..., list(forbidden)] = float("-inf")
    return logits


def cloze(model: Any, tokenizer: Any, text: str, k: int = 5) -> list[ClozeGuess]:
    """The top-k fillers of every [MASK] in `text`, each predicted independently from the rest of the
    sentence (one forward pass; the special tokens are excluded)."""
    encoded = tokenizer(text, return_tensors="pt", truncation=True)
    ids = encoded["input_ids"]
    positions = (ids[0] == tokenizer.mask_token_id).nonzero().flatten().tolist()
    if not positions:
        raise GenerationError(f"no {tokenizer.mask_token} in {text!r}: write one where a word should go")
    device = next(model.parameters()).device
    logits = _forbid(_logits(model, ids.to(device), encoded["attention_mask"].to(device))[0].cpu(),
                     tokenizer.all_special_ids)
    guesses = []
    for position in positions:
        top = logits[position].softmax(-1).topk(k)
        guesses.append(ClozeGuess(position, tokenizer.convert_ids_to_tokens(top.indices.tolist()),
                                  top.values.tolist()))
    return guesses


@dataclass
class Refinement:
    """What mask-predict did: the final ids [S], and after each round the ids and which positions were
    [MASK] going into it (for printing how the text settles)."""

    ids: torch.Tensor
    rounds: list[torch.Tensor]
    masked: list[torch.Tensor]


def mask_predict(model: Any, input_ids: torch.Tensor, fill: torch.Tensor, mask_token_id: int, rounds: int,
                 forbidden: Sequence[int] = ()) -> Refinement:
    """Mask-predict on one sequence: the positions where `fill` [S] is True start as [MASK]; round 1
    predicts all of them at once; round t > 1 re-masks the n = N (T - t + 1) / T least confident of the N
    and predicts those again from the rest (confidence: the probability the token had when it was
    chosen). Deterministic (argmax), as in Ghazvininejad et al. (2019); `forbidden` ids are never chosen.
    """
    if input_ids.dim() != 1 or fill.shape != input_ids.shape or fill.dtype != torch.bool:
        raise GenerationError("mask_predict takes one sequence: input_ids [S] and a bool fill [S] of the same shape")
    n_fill = int(fill.sum())
    if n_fill == 0:
        raise GenerationError("fill marks no position: nothing to generate")
    if rounds < 1:
        raise GenerationError(f"rounds must be at least 1, got {rounds}")
    device = next(model.parameters()).device
    ids = input_ids.clone().masked_fill(fill, mask_token_id)
    confidence = torch.zeros(len(ids))
    masked = fill.clone()
    history, masks = [], []
    for t in range(1, rounds + 1):
        if t > 1:
            n = n_fill * (rounds - t + 1) // rounds
            if n == 0:
                break
            scores = confidence.masked_fill(~fill, float("inf"))  # only generated positions compete
            masked = torch.zeros_like(fill)
            masked[scores.topk(n, largest=False).indices] = True
            ids = ids.masked_fill(masked, mask_token_id)
        logits = _forbid(_logits(model, ids[None].to(device))[0].cpu(), forbidden)
        best = logits.softmax(-1).max(-1)
        ids = torch.where(masked, best.indices, ids)
        confidence = torch.where(masked, best.values, confidence)
        history.append(ids.clone())
        masks.append(masked.clone())
    return Refinement(ids, history, masks)


__all__ = [
    "GenerationError",
    "bidirectional_mask",
    "causal_mask",
    "prefix_mask",
    "additive_attention_mask",
    "encode_with_mask",
    "masked_token_hits",
    "draw_attention_mask",
    "ClozeGuess",
    "cloze",
    "Refinement",
    "mask_predict",
]
