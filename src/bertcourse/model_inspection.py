"""A look inside a trained masked language model: fill-mask, the 80/10/10 cases, attention, word senses.

Every function takes a `MaskedLM`: the course's BERT (`bertcourse.model.BertForMLM`) or a transformers
masked LM (`BertForMaskedLM` and the like), each with its own tokenizer, so a lesson shows both side by
side through the same calls.

- `fill_mask`: the top-k tokens and probabilities at each [MASK] of a sentence.
- `recovery_by_case`: BERT's recipe selects 15% of the tokens and shows the model [MASK] at 80% of them,
  the token itself at 10% and a random token at 10%; the loss asks for the original token at all three.
  Measured on held-out sentences: how often the model recovers the original token in each case (and, at
  random tokens, how often it just copies the token it sees).
- `attention_maps`, `attention_summary`, `plot_attention`: one sentence's attention per layer and head, and
  per head the share of attention on [CLS], on [SEP], on the previous and next token and on itself
  (Clark et al. 2019, "What Does BERT Look At?").
- `word_vectors`, `cosine_table`: the last layer's vector of one word in different sentences, compared.

The course model's attention runs in one fused kernel that never stores its weights; `recording_attention`
hooks each attention layer and recomputes them from the layer's own inputs and projections, so
`bertcourse.model` stays exactly as lesson 3 reads it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertcourse.errors import BertcourseError


class InspectionError(BertcourseError):
    """A model, sentence or word that cannot be inspected as asked."""


@dataclass
class MaskedLM:
    """A masked LM and its tokenizer; `kind` is "course" (bertcourse.model) or "transformers"."""

    model: torch.nn.Module
    tokenizer: Any
    name: str = "model"

    @property
    def kind(self) -> str:
        """"transformers" for a transformers model, "course" for the course's own."""
        return "transformers" if hasattr(self.model, "config") and hasattr(self.model.config, "model_type") \
            else "course"

    @property
    def max_length(self) -> int:
        """The longest input the model takes, in pieces."""
        if self.kind == "course":
            return self.model.config.max_seq_len
        return int(getattr(self.model.config, "max_position_embeddings", 512))

    def encode(self, sentences: Sequence[str]) -> dict[str, torch.Tensor]:
        """[CLS] sentence [SEP] rows, padded, cut at the model's length; offsets kept for finding words."""
        return self.tokenizer(list(sentences), padding=True, truncation=True, max_length=self.max_length,
                              return_tensors="pt", return_offsets_mapping=True)

    @torch.no_grad()
    def run(self, batch: dict[str, torch.Tensor], attention: bool = False) -> dict[str, Any]:
        """{"logits" [B, S, V], "hidden" [B, S, D] (last layer), "attentions" [L, B, H, S, S] if asked}."""
        self.model.eval()
        device = next(self.model.parameters()).device
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        if self.kind == "transformers":
            out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                             output_attentions=attention)
            logits = getattr(out, "logits", None)  # None: an encoder without a language-model head
            result = {"logits": None if logits is None else logits.float().cpu(),
                      "hidden": out.hidden_states[-1].float().cpu()}
            if attention:
                if not out.attentions or out.attentions[0] is None:
                    raise InspectionError(f"{self.name} returned no attention weights: load it with "
                                          "attn_implementation='eager'")
                result["attentions"] = torch.stack([a.float().cpu() for a in out.attentions])
            return result
        with recording_attention(self.model) if attention else contextlib.nullcontext() as kept:
            hidden = self.model.encode(ids, mask)
            result = {"logits": self.model.head(hidden).float().cpu(), "hidden": hidden.float().cpu()}
        if attention:
            result["attentions"] = torch.stack([w.float().cpu() for w in kept])
        return result


def attention_weights(layer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_head) + mask) of a course `SelfAttention` for its input `x` [B, S, D]: the weights
    its fused kernel applies ([B, H, S, S]; without a mask a causal layer blocks later keys, as its kernel does)."""
    batch, seq_len, _ = x.shape
    query, key, _ = layer.qkv(x).chunk(3, dim=-1)
    query, key = (t.view(batch, seq_len, layer.n_heads, -1).transpose(1, 2) for t in (query, key))
    scores = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5
    if mask is not None:
        scores = scores + mask
    elif layer.causal:
        later = torch.ones(seq_len, seq_len, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(later, torch.finfo(scores.dtype).min)
    return scores.softmax(-1)


@contextlib.contextmanager
def recording_attention(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Within the block, each forward pass of the course model's attention layers records its weights; yields a
    list that holds, after the block, the last forward pass's weights per layer ([B, H, S, S] each)."""
    from bertcourse.model import SelfAttention

    layers = [m for m in model.modules() if isinstance(m, SelfAttention)]
    if not layers:
        raise InspectionError(f"{type(model).__name__} has no course SelfAttention layers to record")
    last: dict[int, torch.Tensor] = {}

    def record(index: int):
        def hook(layer: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            x = args[0]
            mask = args[1] if len(args) > 1 else kwargs.get("mask")
            with torch.no_grad():
                last[index] = attention_weights(layer, x, mask).detach()
        return hook

    handles = [layer.register_forward_pre_hook(record(i), with_kwargs=True) for i, layer in enumerate(layers)]
    kept: list[torch.Tensor] = []
    try:
        yield kept
        kept.extend(last[i] for i in range(len(layers)) if i in last)
    finally:
        for handle in handles:
            handle.remove()


def load_transformers_masked_lm(name_or_path: str | Path) -> MaskedLM:
    """A transformers masked LM and its own tokenizer from a save_pretrained folder or `hf:ORG/NAME` (the hub,
    when reachable, else its local cache), through the course's one loader (`hf_checkpoints.load_pretrained`
    with the masked-LM head: the same checks, the weights read once). Attention is computed eagerly so that its
    weights can be returned. What cannot be loaded is an `InspectionError` with the loader's one line."""
    from transformers import AutoModelForMaskedLM

    return _load_transformers(name_or_path, AutoModelForMaskedLM, None)


def load_transformers_encoder(name_or_path: str | Path, name: str | None = None) -> MaskedLM:
    """A transformers encoder WITHOUT a language-model head (e.g. all-MiniLM-L6-v2, trained on sentence pairs
    after distillation) and its tokenizer, for attention maps and word vectors: `fill_mask` refuses it. The
    same loader and errors as `load_transformers_masked_lm`; attention computed eagerly."""
    from transformers import AutoModel

    return _load_transformers(name_or_path, AutoModel, name)


def _load_transformers(name_or_path: str | Path, head: type, name: str | None) -> MaskedLM:
    from bertcourse.hf_checkpoints import HFCheckpointError, load_pretrained

    try:
        model, tokenizer, info = load_pretrained(name_or_path, head=head, attention="eager")
    except HFCheckpointError as exc:
        raise InspectionError(str(exc)) from exc
    return MaskedLM(model, tokenizer, name or info["name"])


# ----------------------------------------------------------------------------- fill-mask


def fill_mask(lm: MaskedLM, sentences: Sequence[str], top_k: int = 5) -> list[dict[str, Any]]:
    """For each sentence with one or more mask tokens (the tokenizer's, e.g. "[MASK]"): per mask, the top-k
    (token, probability) of the model's softmax at that position."""
    mask_id = lm.tokenizer.mask_token_id
    out = []
    batch = lm.encode(sentences)
    logits = lm.run(batch)["logits"]
    if logits is None:
        raise InspectionError(f"{lm.name} has no masked-LM head (an encoder alone): it cannot fill a mask")
    for i, sentence in enumerate(sentences):
        positions = (batch["input_ids"][i] == mask_id).nonzero().flatten().tolist()
        if not positions:
            raise InspectionError(f"sentence {i} ({sentence!r}) holds no {lm.tokenizer.mask_token}")
        masks = []
        for position in positions:
            probabilities = logits[i, position].softmax(-1)
            top = probabilities.topk(top_k)
            masks.append([(lm.tokenizer.convert_ids_to_tokens(int(t)), float(p))
                          for p, t in zip(top.values, top.indices)])
        out.append({"sentence": sentence, "predictions": masks})
    return out


# ----------------------------------------------------------------------------- the 80/10/10 cases

CASES = ("mask", "keep", "random")


def recovery_by_case(lm: MaskedLM, sentences: Sequence[str], *, seed: int = 0, batch_size: int = 64,
                     select_prob: float | None = None, mask_prob: float | None = None,
                     random_prob: float | None = None, repeats: int = 1) -> dict[str, dict[str, Any]]:
    """Mask `sentences` with BERT's recipe (`bertcourse.masking.mask_tokens`, seeded; `repeats` fresh maskings
    each) and score the model at the selected positions by what they hold: [MASK] ("mask"), the original
    token ("keep"), another token ("random"). Per case: positions, how many the model's top prediction gets
    right (the original token), accuracy with a Wilson 95% interval; for "random" also how often the top
    prediction is the shown (wrong) token."""
    from bertcourse.masking import IGNORE_INDEX, mask_tokens
    from bertcourse.stats import wilson_interval

    tokenizer = lm.tokenizer
    generator = torch.Generator().manual_seed(seed)
    hits = {case: [0, 0] for case in CASES}
    copied = 0
    for _ in range(repeats):
        for start in range(0, len(sentences), batch_size):
            batch = lm.encode(sentences[start : start + batch_size])
            original = batch["input_ids"]
            inputs, labels = mask_tokens(original, attention_mask=batch["attention_mask"],
                                         mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                                         special_ids=tokenizer.all_special_ids, generator=generator,
                                         select_prob=select_prob, mask_prob=mask_prob, random_prob=random_prob)
            predicted = lm.run({**batch, "input_ids": inputs})["logits"].argmax(-1)
            selected = labels != IGNORE_INDEX
            case_of = {"mask": selected & (inputs == tokenizer.mask_token_id), "keep": selected & (inputs == original)}
            case_of["random"] = selected & ~case_of["mask"] & ~case_of["keep"]
            for case, where in case_of.items():
                hits[case][0] += int((predicted[where] == original[where]).sum())
                hits[case][1] += int(where.sum())
            copied += int((predicted[case_of["random"]] == inputs[case_of["random"]]).sum())
    result = {}
    for case, (right, n) in hits.items():
        result[case] = {"positions": n, "correct": right, "accuracy": right / n if n else None,
                        "interval": list(wilson_interval(right, n)) if n else None}
    n_random = hits["random"][1]
    result["random"]["copies_shown_token"] = copied / n_random if n_random else None
    return result


# ----------------------------------------------------------------------------- attention


def attention_maps(lm: MaskedLM, sentence: str) -> tuple[list[str], np.ndarray]:
    """(tokens, weights [layers, heads, S, S]) of one sentence; row i is where token i looks."""
    batch = lm.encode([sentence])
    weights = lm.run(batch, attention=True)["attentions"][:, 0]  # [L, H, S, S]
    tokens = lm.tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    return tokens, weights.numpy()


def attention_summary(tokens: Sequence[str], weights: np.ndarray, cls_token: str = "[CLS]",
                      sep_token: str = "[SEP]") -> list[dict[str, Any]]:
    """Per layer and head, the attention a query gives on average (over the sentence's tokens) to [CLS], to
    [SEP], to the previous token, to the next one and to itself (Clark et al. 2019's measures)."""
    n = len(tokens)
    cls = [i for i, t in enumerate(tokens) if t == cls_token]
    sep = [i for i, t in enumerate(tokens) if t == sep_token]
    rows = []
    for layer in range(weights.shape[0]):
        for head in range(weights.shape[1]):
            w = weights[layer, head, :n, :n]
            rows.append({
                "layer": layer, "head": head,
                "to_cls": float(w[:, cls].sum(1).mean()) if cls else None,
                "to_sep": float(w[:, sep].sum(1).mean()) if sep else None,
                "to_previous": float(np.diagonal(w, -1).mean()) if n > 1 else None,
                "to_next": float(np.diagonal(w, 1).mean()) if n > 1 else None,
                "to_self": float(np.diagonal(w).mean()),
            })
    return rows


def plot_attention(tokens: Sequence[str], weights: np.ndarray, fig: Any = None, path: str | Path | None = None,
                   dpi: int = 90, title: str = "") -> Any:
    """A heat-map per layer (rows) and head (columns): query tokens down, key tokens across. Draws on `fig` or a
    new `Figure` (no pyplot state); saves to `path` if given."""
    from matplotlib.figure import Figure

    layers, heads = weights.shape[:2]
    fig = fig if fig is not None else Figure(figsize=(2.6 * heads + 0.6, 2.6 * layers + 0.4))
    axes = fig.subplots(layers, heads, squeeze=False)
    n = len(tokens)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(weights[layer, head, :n, :n], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
            ax.set_xticks(range(n), tokens, rotation=90, fontsize=6)
            ax.set_yticks(range(n), tokens, fontsize=6)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=dpi)
    return fig


# ----------------------------------------------------------------------------- word senses


def word_vectors(lm: MaskedLM, sentences: Sequence[str], word: str) -> np.ndarray:
    """[N, D]: the last layer's vector of `word` (its first whole-word occurrence, case-insensitive) in each
    sentence, the mean over its pieces when the tokenizer splits it."""
    batch = lm.encode(sentences)
    hidden = lm.run(batch)["hidden"]
    vectors = []
    for i, sentence in enumerate(sentences):
        found = re.search(rf"\b{re.escape(word)}\b", sentence, flags=re.IGNORECASE)
        if found is None:
            raise InspectionError(f"sentence {i} ({sentence!r}) does not hold the word {word!r}")
        offsets = batch["offset_mapping"][i]
        pieces = [j for j, (a, b) in enumerate(offsets.tolist())
                  if b > a and a >= found.start() and b <= found.end() and batch["attention_mask"][i, j]]
        if not pieces:
            raise InspectionError(f"sentence {i}: {word!r} lies beyond the model's {lm.max_length} tokens")
        vectors.append(hidden[i, pieces].mean(0).numpy())
    return np.stack(vectors)


def cosine_table(vectors: np.ndarray) -> np.ndarray:
    """[N, N] cosine similarities of the rows of `vectors`."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
    return unit @ unit.T


__all__ = [
    "CASES", "InspectionError", "MaskedLM", "attention_maps", "attention_summary", "cosine_table", "fill_mask",
    "attention_weights", "load_transformers_encoder", "load_transformers_masked_lm", "plot_attention",
    "recording_attention", "recovery_by_case",
    "word_vectors",
]
