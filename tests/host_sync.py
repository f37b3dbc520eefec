"""Counting host syncs: every tensor method that hands a value back to Python.

On a GPU each of ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool(t)``,
``float(t)``, ``int(t)`` and ``t.to("cpu")`` of a CUDA tensor waits for the device to finish
its queued work. :func:`count_host_syncs` patches those methods of ``torch.Tensor`` and counts
the calls (on any device: the same Python code runs on the CPU and on CUDA, so a count taken on
the CPU already shows a sync that an inner loop would make on a GPU, except a ``.to("cpu")``
written as ``.to(dev)``, which only a CUDA run can tell from a copy to the device). A training
loop without syncs in its inner loop makes as many calls for 2 steps per epoch as for 4; the
tests compare exactly that (:func:`per_step_syncs`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

#: the tensor methods that return a host value (``to`` is counted towards the CPU as ``to``,
#: and a blocking copy of a host tensor to a device as ``to_device``: from pageable memory, a
#: ``.to("cuda")`` without ``non_blocking=True`` waits for the device's queued work too), and
#: ``new_tensor``, whose Python data reach a CUDA tensor's device by such a blocking copy
SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "to",
                "new_tensor")
#: the library's folder: only its calls are counted (PyTorch's own, e.g. the optimisers'
#: host-side step counters, are PyTorch's business; on CUDA the sync debug mode sees them)
LIBRARY = str(Path(__file__).resolve().parents[1] / "ofl_core")
#: library functions whose tensors are host tensors on every device, so their calls are no
#: syncs: (file under ofl_core/, function) -> why. Counted only on CUDA (``all_devices=False``)
HOST_TENSORS = {
    ("distill/pool.py", "jitter_flip"): "offsets and the flip drawn from a CPU generator",
}


def _to_cpu(args: tuple, kwargs: dict) -> bool:
    dev = kwargs.get("device", args[0] if args else None)
    if isinstance(dev, torch.Tensor):
        dev = dev.device
    return dev is not None and not isinstance(dev, torch.dtype) and \
        torch.device(dev).type == "cpu"


def _blocking_to_device(args: tuple, kwargs: dict) -> bool:
    """``t.to(device)`` (a device given, not only a dtype) without ``non_blocking=True``."""
    dev = kwargs.get("device", args[0] if args else None)
    non_blocking = kwargs.get("non_blocking", len(args) > 1 and args[1] is True
                              and not isinstance(args[0], torch.dtype))
    return isinstance(dev, str | torch.device) and not non_blocking


@contextmanager
def count_host_syncs(all_devices: bool = True) -> Iterator[Counter]:
    """Count the host-sync tensor calls the library (``ofl_core``) makes inside the block, by
    method name (but those of :data:`HOST_TENSORS` on the CPU).

    ``all_devices``: count calls on tensors of any device (True; on the CPU they cost nothing
    but are the same calls a CUDA run makes), else only on CUDA tensors. ``.to(...)`` counts
    only from a non-CPU tensor towards the CPU (on the CPU, ``x.to(dev)`` is the copy *to* the
    device that a CUDA run makes, no sync)."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}

    def patched(name: str, fn: Callable) -> Callable:
        def wrapper(self, *args, **kwargs):
            caller = sys._getframe(1).f_code
            if not caller.co_filename.startswith(LIBRARY) or (all_devices and (
                    caller.co_filename[len(LIBRARY) + 1:], caller.co_name) in HOST_TENSORS):
                return fn(self, *args, **kwargs)
            if name == "to":
                if self.device.type == "cpu" and _blocking_to_device(args, kwargs):
                    counts["to_device"] += 1  # on CUDA: a copy that waits for the stream
                if self.device.type == "cpu" or not _to_cpu(args, kwargs):
                    return fn(self, *args, **kwargs)
            if all_devices or self.device.type != "cpu":
                counts[name] += 1
            return fn(self, *args, **kwargs)
        return wrapper

    for name, fn in originals.items():
        setattr(torch.Tensor, name, patched(name, fn))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


def per_step_syncs(run: Callable[[int], object], steps: tuple[int, int] = (2, 4),
                   all_devices: bool = True) -> tuple[Counter, Counter]:
    """The host-sync counts of ``run(steps[0])`` and ``run(steps[1])`` (``run(s)`` trains
    with ``s`` inner steps and otherwise the same work). Equal counts = no sync per step."""
    got = []
    for s in steps:
        with count_host_syncs(all_devices) as counts:
            run(s)
        got.append(counts)
    return got[0], got[1]


__all__ = ["SYNC_METHODS", "count_host_syncs", "per_step_syncs"]
