"""Where and in which precision the course trains: the device and the autocast rule, in one place.

`bertcourse pretrain`, `finetune` and `compare` all pick the device (`pick_device`) and the autocast
dtype (`autocast_dtype`) here, so a `--precision` means the same thing in every command.
"""

from __future__ import annotations

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


def autocast_dtype(device: torch.device | str, precision: str = "auto") -> torch.dtype | None:
    """The dtype pretraining steps autocast to on `device` (None: plain fp32), for `precision`.

    "auto" takes the fastest precision known to train this model as well as fp32 does: on CUDA bf16
    where the GPU supports it, else fp16 (the loop then scales the loss against underflow); on a CPU
    bf16 only where the CPU computes it in hardware (`cpu_has_native_bf16`: a step of the `cpu`
    profile's model is then 1.6x faster at equal held-out loss, benchmarks/README.md), since emulated
    bf16 is slower than fp32; elsewhere (Apple MPS) fp32. "bf16", "fp16" and "fp32" ask for one
    explicitly; fp16 on the CPU and autocast on other devices than CUDA and the CPU are refused: the
    loop has neither a loss scaler for them nor a measurement that they help.
    """
    device = torch.device(device)
    if precision not in PRECISIONS:
        raise BertcourseError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if device.type == "cpu" and cpu_has_native_bf16() else None
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



__all__ = ["PRECISIONS", "autocast_dtype", "cpu_has_native_bf16", "pick_device", "precision_name"]
