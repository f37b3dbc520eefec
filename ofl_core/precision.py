"""Arithmetic precision: where bfloat16 autocast is native, and what a run used.

``amp="auto"`` (local training) means bfloat16 autocast where the hardware computes it natively
— CUDA GPUs, and CPUs with AVX512-BF16 or AMX-BF16 — and float32 elsewhere. It was measured
against float32 on the same partitions and seeds before becoming a default
(docs/decisions/clients.md#precision); ``amp=False`` keeps the paper's float32 arithmetic
everywhere.
"""

from __future__ import annotations

from typing import Literal

import torch

from .hardware import this_cpu

Amp = bool | Literal["auto"]


def _cpu_has_bf16() -> bool:
    features = this_cpu()["cpu_features"].split(",")
    return "avx512_bf16" in features or "amx_bf16" in features


def native_bf16(device: str | torch.device) -> bool:
    """Whether ``device`` computes bfloat16 natively: a CUDA GPU with bfloat16 arithmetic
    (Ampere or later; older GPUs only emulate it), or a CPU with BF16 instructions."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(
            including_emulation=False)
    return dev.type == "cpu" and _cpu_has_bf16()


def resolve_amp(amp: Amp, device: str | torch.device) -> bool:
    """``amp`` as a yes/no for ``device`` ("auto" = where bfloat16 is native)."""
    return native_bf16(device) if amp == "auto" else bool(amp)


def precision_label(local: bool, server: bool) -> str:
    """What a record's arithmetic was, e.g. ``local=bf16;server=fp32``."""
    return f"local={'bf16' if local else 'fp32'};server={'bf16' if server else 'fp32'}"
