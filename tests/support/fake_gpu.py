"""A CUDA device faked on the CPU: what the precision rules read of a GPU (its name and compute capability), so
that the tests of those rules run on a machine without one."""

from __future__ import annotations

from types import SimpleNamespace

import torch


def fake_cuda(monkeypatch, name: str, capability: tuple[int, int]) -> torch.device:
    """Make torch report one CUDA device `name` of `capability`, whose bf16 tensors can be created (emulated or
    native: torch's own `is_bf16_supported` then answers True, as on a T4)."""
    properties = SimpleNamespace(name=name, major=capability[0], minor=capability[1])
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: properties)
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)  # emulation works
    return torch.device("cuda")
