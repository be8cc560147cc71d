"""The optimizer and learning-rate schedules shared by pretraining and fine-tuning."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch


def lr_factor(step: int, warmup_steps: int, max_steps: int, final_fraction: float = 0.1) -> float:
    """Linear warm-up to the peak, then cosine decay to `final_fraction` of it at max_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / max(max_steps - warmup_steps, 1), 1.0)
    return final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress))


def adamw(model: torch.nn.Module, learning_rate: float, weight_decay: float, *,
          lr_scale: Callable[[str], float] | None = None, **options) -> torch.optim.AdamW:
    """AdamW over the parameters that train (requires_grad); weight decay on matrices only (biases and
    LayerNorm gains are not decayed). `lr_scale(name)` multiplies a parameter's learning rate (None: 1 for
    all; `layerwise_lr_scale` gives one). `options` go to torch's AdamW (betas, eps).

    The fused implementation updates all parameters in one kernel: on the CPU it takes a quarter of the
    time of the default one, which matters for a model this small (benchmarks/README.md).
    """
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    scale = {name: lr_scale(name) if lr_scale is not None else 1.0 for name, _ in trainable}
    groups = []
    for factor in sorted(set(scale.values()), reverse=True):  # one factor (and two groups) without lr_scale
        mine = [p for name, p in trainable if scale[name] == factor]
        groups += [{"params": [p for p in mine if p.dim() >= 2], "weight_decay": weight_decay,
                    "lr": learning_rate * factor},
                   {"params": [p for p in mine if p.dim() < 2], "weight_decay": 0.0, "lr": learning_rate * factor}]
    fused = trainable[0][1].device.type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, lr=learning_rate, fused=fused, **options)


_LAYER_INDEX = re.compile(r"(?:^|\.)(?:blocks|layers?|h)\.(\d+)\.")  # blocks.3. (the course), layer.3. and h.3.


def check_layer_decay(decay: float, what: str = "layer-wise decay") -> None:
    """A decay factor must be in (0, 1]: 1 is no decay, and a lower block never learns faster than the one above."""
    if not 0 < decay <= 1:
        raise ValueError(f"{what} must be above 0 and at most 1, got {decay}")


def layerwise_lr_scale(model: torch.nn.Module, decay: float) -> Callable[[str], float]:
    """Layer-wise learning-rate decay (Howard & Ruder 2018; Clark et al. 2020): with L blocks, a parameter of
    block i (0 = the lowest) learns at decay^(L - i) of the peak rate, the embeddings at decay^(L + 1), and
    everything above the blocks (final norm, pooler, the classifier's head) at the full rate. The idea: the
    lower a layer, the more general what pretraining put there, and the less fine-tuning should move it."""
    check_layer_decay(decay)
    names = [name for name, _ in model.named_parameters()]  # in the order the modules were built
    index = {name: int(found.group(1)) for name in names if (found := _LAYER_INDEX.search(name))}
    if not index:
        raise ValueError(f"layer-wise decay: no numbered blocks among {type(model).__name__}'s parameters")
    top = max(index.values()) + 1
    below = set(names[: names.index(next(iter(index)))])  # built before the first block: the embeddings

    def scale(name: str) -> float:
        if name in index:
            return decay ** (top - index[name])
        return decay ** (top + 1) if name in below else 1.0

    return scale


def linear_schedule(total: int, warmup: int):
    """Linear warm-up over `warmup` steps, then linear decay to 0 at step `total` (fine-tuning's schedule)."""
    return lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(total - warmup, 1))


__all__ = ["adamw", "check_layer_decay", "layerwise_lr_scale", "linear_schedule", "lr_factor"]
