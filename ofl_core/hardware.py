"""The CPU a run ran on: its model and the instruction-set features that pick PyTorch's
kernels (read from ``/proc/cpuinfo``, without importing torch)."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

#: the CPU features that choose a run's arithmetic and PyTorch's kernels: bfloat16 is native
#: with ``avx512_bf16`` / ``amx_bf16`` (local training's ``amp="auto"`` uses it there,
#: :mod:`ofl_core.precision`), and float32 runs on AVX-512 or AVX2 kernels
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_info(cpuinfo: str | None = None) -> dict[str, str]:
    """The CPU's model name and which of :data:`CPU_FEATURES` it has (comma-separated), from
    ``/proc/cpuinfo`` (or the text given); where there is none, the platform's processor name
    and no features."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"cpu": fields.get("model name") or platform.processor() or platform.machine(),
            "cpu_features": ",".join(f for f in CPU_FEATURES if f in flags)}


@functools.cache
def this_cpu() -> dict[str, str]:
    """:func:`cpu_info` of this machine, read once per process."""
    return cpu_info()
