"""Where and in which precision the course trains: the device and the autocast rule, in one place.

`bertcourse pretrain`, `finetune` and `compare` all pick the device (`pick_device`) and the autocast
dtype (`autocast_dtype`) here, so a `--precision` means the same thing in every command.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bertcourse.errors import BertcourseError


def pick_device(requested: str | None = None) -> torch.device:
    """CUDA if present, else Apple's MPS, else the CPU (or what was asked for)."""
    if requested:
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


PRECISIONS = ("auto", "bf16", "fp16", "fp32")
_AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware: x86 with AVX512-BF16 or AMX-BF16.

    It reads the CPU's feature flags (cpuinfo) through `torch.cpu.get_capabilities()` (torch 2.13;
    `torch.cpu._is_avx512_bf16_supported()` on older torch). Two look-alikes answer another question:
    `torch.ops.mkldnn._is_mkldnn_bf16_supported()` is true on every AVX-512 CPU, where oneDNN *emulates*
    bf16 and a step is slower than in fp32; `torch.backends.cpu.get_cpu_capability()` names the vector
    width ATen dispatches to ("AVX512"), which says nothing about bf16. ARM CPUs answer False even with
    bf16 instructions: whether torch's kernels there beat fp32 has not been measured (--precision bf16
    still asks for it).
    """
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is not None:
        flags = capabilities()
        return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))
    older = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return bool(older and older())


def native_bf16(device: torch.device | str) -> bool:
    """Whether `device` computes bf16 in hardware: a GPU of compute capability 8.0 and up (A100, L4, H100; not a
    T4), a CPU with `cpu_has_native_bf16`. Elsewhere bf16 is emulated, slower than fp32 (see `autocast_dtype`)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and cpu_has_native_bf16()


def autocast_dtype(device: torch.device | str, precision: str = "auto") -> torch.dtype | None:
    """The dtype pretraining steps autocast to on `device` (None: plain fp32), for `precision`.

    "auto" takes the fastest precision known to train this model as well as fp32 does: on CUDA bf16
    where the GPU computes it in hardware (compute capability 8.0 and up: A100, L4, H100), else fp16
    (a T4, sm_75; the loop then scales the loss against underflow, `bertcourse.training.loop.TrainStep`); on a
    CPU bf16 only where the CPU computes it in hardware (`cpu_has_native_bf16`: a step of the `cpu`
    profile's model is then 1.6x faster at equal held-out loss, benchmarks/README.md), since emulated
    bf16 is slower than fp32; elsewhere (Apple MPS) fp32. "bf16", "fp16" and "fp32" ask for one
    explicitly; fp16 on the CPU (no measurement that it helps: the CPU has no fast fp16 matmul here) and
    autocast on other devices than CUDA and the CPU are refused.

    `torch.cuda.is_bf16_supported()` alone answers True on a T4 too: by default (`including_emulation=True`)
    it only tries to create a bf16 tensor, which works on any GPU. Such a GPU trains bf16 without tensor
    cores, loses the memory-efficient attention kernel and fails to compile in Triton, hence
    `including_emulation=False`.
    """
    device = torch.device(device)
    if precision not in PRECISIONS:
        raise BertcourseError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if native_bf16(device) else torch.float16
        return torch.bfloat16 if native_bf16(device) else None
    if precision == "fp32":
        return None
    if device.type == "cpu" and precision == "fp16":
        raise BertcourseError("fp16 autocast on the CPU is not supported: use --precision bf16 (fast on a CPU "
                              "with native bf16) or fp32")
    if device.type not in ("cpu", "cuda"):
        raise BertcourseError(f"{precision} autocast on {device.type} is not supported: use --precision fp32 "
                              "(or auto, which is fp32 there)")
    return _AUTOCAST_DTYPES[precision]


def precision_name(dtype: torch.dtype | None) -> str:
    """The --precision name of an autocast dtype (None: fp32)."""
    return next(name for name, value in _AUTOCAST_DTYPES.items() if value == dtype)


def to_device(tensors: Any, device: torch.device | str) -> Any:
    """A batch (a tensor, or a dict or tuple of them) on `device`, without making the CPU wait for the GPU.

    Every training loop of the course moves its batches here. On CUDA a CPU tensor is first copied into
    pinned (page-locked) memory and then sent with `non_blocking=True`: the copy is queued behind the step
    the GPU is still running and the CPU goes on to build the next batch. `non_blocking=True` on ordinary
    (pageable) memory does nothing: the driver stages the copy itself and the CPU waits for it, i.e. for
    the GPU's whole queue. Elsewhere (the CPU, MPS) a plain `.to(device)`: there is nothing to overlap.
    """
    device = torch.device(device)
    if isinstance(tensors, torch.Tensor):
        if device.type != "cuda" or tensors.device.type != "cpu":
            return tensors.to(device)
        return tensors.pin_memory().to(device, non_blocking=True)
    if isinstance(tensors, tuple | list):
        return tuple(to_device(value, device) for value in tensors)
    return {name: to_device(value, device) for name, value in tensors.items()}


class DeviceRows:
    """Token rows (lists of ids), and their labels, padded once and kept on the device: a step's batch is
    then an index, not a copy.

    For data small enough to sit on the GPU whole (SST-2's sentences, a label curve's rows): each step
    picks its rows there and cuts them to the longest one, which gives exactly the tensors `pad_batch` gives
    for those rows, without padding and copying them again every step.
    """

    def __init__(self, rows: Sequence[Sequence[int]], device: torch.device | str,
                 labels: torch.Tensor | None = None, pad_value: int = 0):
        from bertcourse.masking import pad_batch

        if labels is not None and len(labels) != len(rows):
            raise ValueError(f"{len(rows)} rows but {len(labels)} labels")
        ids, attention = pad_batch(rows, pad_value)
        self.device = torch.device(device)
        self.lengths = attention.sum(1)  # stays on the CPU: a batch's width is read without a wait
        self.tensors = to_device({"input_ids": ids, "attention_mask": attention}, self.device)
        if labels is not None:
            self.tensors["labels"] = to_device(labels, self.device)

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, index: Sequence[int]) -> dict[str, torch.Tensor]:
        """`input_ids`, `attention_mask` [B, the batch's longest row] (and `labels` [B]) of rows `index`."""
        width = int(self.lengths[list(index)].max())
        rows = to_device(torch.as_tensor(index, dtype=torch.long), self.device)
        return {name: value[rows] if name == "labels" else value[rows, :width] for name, value in self.tensors.items()}


__all__ = ["PRECISIONS", "DeviceRows", "autocast_dtype", "cpu_has_native_bf16", "native_bf16", "pick_device",
           "precision_name", "to_device"]
