"""GPUs of one worker process: the visible devices, handed out to its concurrent tasks.

A task that needs GPUs takes them from the worker's pool (``CUDA_VISIBLE_DEVICES``, else
``nvidia-smi``) and sees only them (``CUDA_VISIBLE_DEVICES`` set in its kernel), so
``device="cuda"`` is its own GPU."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


class NoGpuError(RuntimeError):
    """A task asked for more GPUs than its worker can see."""


def visible_gpus() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi``."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [x.strip() for x in out.splitlines() if x.strip()]


class GpuPool:
    """The visible GPUs of one worker process, handed out to its concurrent tasks."""

    def __init__(self, devices: Sequence[str] | None = None) -> None:
        self._cond = threading.Condition()
        self._free: list[str] | None = list(devices) if devices is not None else None
        self._total = len(self._free) if self._free is not None else 0

    @contextmanager
    def take(self, n: int) -> Iterator[list[str] | None]:
        """``n`` GPUs for the duration (waits while others hold them); None when ``n`` is 0."""
        if n <= 0:
            yield None
            return
        with self._cond:
            if self._free is None:
                self._free = visible_gpus()
                self._total = len(self._free)
            if n > self._total:
                raise NoGpuError(f"the task needs {n} GPU(s) but its worker sees "
                                 f"{self._total} (CUDA_VISIBLE_DEVICES / nvidia-smi)")
            while len(self._free) < n:
                self._cond.wait()
            got, self._free = self._free[:n], self._free[n:]
        try:
            yield got
        finally:
            with self._cond:
                self._free.extend(got)
                self._cond.notify_all()


#: this process's pool (tasks of one worker share it)
GPU_POOL = GpuPool()
