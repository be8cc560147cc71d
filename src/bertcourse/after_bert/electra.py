"""ELECTRA (Clark et al. 2020): replaced-token detection, a loss at every position instead of 15% of them.

A small **generator** (a masked LM, here 1/4 of the discriminator's width) fills the masked positions
with tokens *sampled* from its softmax; the **discriminator** (the course BERT's shape, its MLM head
replaced by a one-logit-per-token head) reads the corrupted row and labels every real token original (0)
or replaced (1) (`bertcourse.after_bert.replaced_tokens`). The two are trained together,
loss = generator MLM + lambda * discriminator binary cross-entropy (lambda = 50, the paper's), and no
gradient crosses the sampling. As in the paper the generator shares the discriminator's embeddings
(token, position and segment tables, one module) and reaches its own width through a projection;
its MLM head decodes with the same tied token table. After pretraining the generator is thrown away
and the discriminator's encoder is the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertcourse.after_bert.replaced_tokens import replaced_token_labels, sample_replacements
from bertcourse.after_bert.variants import BertVariant, VariantSpec, build_variant
from bertcourse.config import ModelConfig
from bertcourse.masking import IGNORE_INDEX
from bertcourse.model import BertForMLM, LMOutput, init_linear_
from bertcourse.training.devices import to_device

RTD_WEIGHT = 50.0  # lambda: the discriminator's loss is ~50x smaller per token than the generator's MLM loss
GENERATOR_FRACTION = 0.25  # the generator's width as a share of the discriminator's


@torch.no_grad()
def generator_config(config: ModelConfig, fraction: float = GENERATOR_FRACTION) -> ModelConfig:
    """The generator's shape: `fraction` of the width (rounded to a multiple of 2 x n_heads, so RoPE-free
    heads stay even), d_ff 4x that, the same depth and heads."""
    step = 2 * config.n_heads
    width = max(step, round(config.d_model * fraction / step) * step)
    return dataclasses.replace(config, d_model=width, d_ff=4 * width)


class RTDHead(nn.Module):
    """ELECTRA's discriminator head: dense + GELU, then one logit per token (> 0: "replaced")."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.out = nn.Linear(config.d_model, 1)
        init_linear_(self.dense, self.out, std=config.init_std)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, S, D] -> [B, S] logits."""
        return self.out(F.gelu(self.dense(hidden))).squeeze(-1)


class Discriminator(BertForMLM):
    """The course BERT with its MLM head replaced by `RTDHead`: `encode` is BertForMLM's (the probe reads
    it), `forward` returns the per-token replaced logits [B, S]."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.head = RTDHead(config)  # type: ignore[assignment]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,  # type: ignore[override]
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """[B, S] token ids -> [B, S] logits of "this token was replaced"."""
        return self.head(self.encode(input_ids, attention_mask, token_type_ids))


@dataclass
class ElectraOutput:
    """The total loss, its parts (`generator`: MLM, `rtd`: discriminator BCE), the discriminator's logits
    [B, S], the labels it was trained on [B, S] (-100 at padding) and the generator's MLM output."""

    loss: torch.Tensor
    parts: dict[str, torch.Tensor]
    rtd_logits: torch.Tensor
    rtd_labels: torch.Tensor
    generator: LMOutput


class Electra(nn.Module):
    """Generator + discriminator trained together; `discriminator` is the model kept afterwards."""

    def __init__(self, config: ModelConfig, *, generator_fraction: float = GENERATOR_FRACTION,
                 rtd_weight: float = RTD_WEIGHT, temperature: float = 1.0, seed: int = 0):
        super().__init__()
        self.config = config
        self.rtd_weight, self.temperature, self.seed = rtd_weight, temperature, seed
        self.discriminator = Discriminator(config)
        # E = the discriminator's width: the generator's embeddings ARE the discriminator's, projected down
        self.generator: BertVariant = build_variant(generator_config(config, generator_fraction),
                                                    VariantSpec(embedding_size=config.d_model))
        self.generator.embeddings.inner = self.discriminator.embeddings  # one module: shared tables and norm
        self.generator.head.decoder.weight = self.discriminator.embeddings.token_embedding.weight  # tied again
        self._sampler: torch.Generator | None = None

    def sampler(self, device: torch.device) -> torch.Generator:
        """The generator of the training samples' random draws (seeded once, on the model's device)."""
        if self._sampler is None or self._sampler.device != device:
            self._sampler = torch.Generator(device).manual_seed(self.seed)
        return self._sampler

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The discriminator's hidden states [B, S, D]: what fine-tuning and probes use."""
        return self.discriminator.encode(input_ids, attention_mask, token_type_ids)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, sampler: torch.Generator | None = None) -> ElectraOutput:
        """`input_ids` masked as for MLM, `labels` the originals at the selected positions (-100 elsewhere).

        The generator predicts the selected positions; its samples replace them (all of them, whatever
        the MLM input showed there) to make the discriminator's input, labelled by comparison with the
        original row."""
        if labels is None:
            raise ValueError("ELECTRA needs `labels` (the masked positions' original tokens)")
        generated = self.generator(input_ids, attention_mask, token_type_ids, labels)
        selected = labels != IGNORE_INDEX
        original = torch.where(selected, labels, input_ids)
        samples = sample_replacements(generated.logits, sampler or self.sampler(input_ids.device), self.temperature)
        corrupted = original.masked_scatter(selected, samples)
        rtd_labels = replaced_token_labels(original, corrupted, attention_mask)
        logits = self.discriminator(corrupted, attention_mask, token_type_ids).float()
        real = rtd_labels != IGNORE_INDEX
        rtd_loss = F.binary_cross_entropy_with_logits(logits[real], rtd_labels[real].float())
        parts = {"generator": generated.loss, "rtd": rtd_loss}
        return ElectraOutput(generated.loss + self.rtd_weight * rtd_loss, parts, logits, rtd_labels, generated)


@torch.no_grad()
def rtd_evaluate(model: Electra, batches: list[dict[str, torch.Tensor]], device: torch.device | str = "cpu",
                 seed: int = 1234, n_resamples: int = 500) -> dict[str, Any]:
    """Held-out replaced-token detection. Plain accuracy is inflated by the ~88% of tokens left original
    (always answering "original" scores 1 minus `replaced_fraction`), so the headline is the detector's ROC AUC
    (0.5: it cannot rank replaced tokens above original ones; always "original" scores 0.5) with a 95%
    interval from resampled rows, and its balanced accuracy (the mean of the recalls on both classes; also 0.5
    for always "original")."""
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score

    was_training = model.training
    model.eval()
    sampler = torch.Generator(torch.device(device)).manual_seed(seed)
    logits, truths, rows, offset = [], [], [], 0
    try:
        for batch in batches:
            batch = to_device(batch, device)
            out = model(**batch, sampler=sampler)
            real = out.rtd_labels != IGNORE_INDEX
            logits.append(out.rtd_logits[real].float().cpu())
            truths.append((out.rtd_labels[real] == 1).cpu())
            rows.append(real.nonzero()[:, 0].cpu() + offset)
            offset += real.shape[0]
    finally:
        model.train(was_training)
    score, truth, row = (torch.cat(x).numpy() for x in (logits, truths, rows))
    guess = score > 0
    both = 0 < truth.sum() < len(truth)
    auc = float(roc_auc_score(truth, score)) if both else 0.5
    resampled = []
    generator = np.random.default_rng(seed)
    by_row = [np.flatnonzero(row == r) for r in np.unique(row)]
    for _ in range(n_resamples if both else 0):
        picked = np.concatenate([by_row[i] for i in generator.integers(0, len(by_row), len(by_row))])
        if 0 < truth[picked].sum() < len(picked):
            resampled.append(roc_auc_score(truth[picked], score[picked]))
    low, high = np.quantile(resampled, [0.025, 0.975]) if resampled else (auc, auc)
    return {"accuracy": float((guess == truth).mean()) if len(truth) else 0.0,
            "replaced_fraction": float(truth.mean()) if len(truth) else 0.0,
            "replaced_recall": float(guess[truth].mean()) if truth.any() else 0.0,
            "auc": auc, "auc_interval": [float(low), float(high)],
            "balanced_accuracy": float(balanced_accuracy_score(truth, guess)) if both else 0.5,
            "tokens": int(len(truth))}


__all__ = [
    "RTD_WEIGHT", "GENERATOR_FRACTION", "generator_config", "RTDHead", "Discriminator",
    "ElectraOutput", "Electra", "rtd_evaluate",
]
