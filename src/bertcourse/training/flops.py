"""Counting the floating-point operations of one training step, to compare objectives at equal compute.

`torch.utils.flop_counter.FlopCounterMode` counts matrix products and attention, forward and backward,
from the operations actually run (not from a formula). It knows the CUDA attention kernels but not the
CPU flash kernel that `scaled_dot_product_attention` runs when dropout is off; `CPU_ATTENTION_FLOPS`
teaches it that one, or attention would go uncounted on the CPU. Elementwise work (GELU, LayerNorm,
softmax, AdamW) is not counted: it is memory-bound and small next to the products.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count


def _cpu_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


CPU_ATTENTION_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops,
}


def step_flops(loss_of_step: Callable[[], torch.Tensor]) -> int:
    """FLOPs of computing `loss_of_step()` and its backward pass (the gradients are left in .grad)."""
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
        loss_of_step().backward()
    return counter.get_total_flops()


__all__ = ["CPU_ATTENTION_FLOPS", "step_flops"]
