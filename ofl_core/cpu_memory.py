"""Keep large CPU tensors' memory in the process heap while a server method runs.

glibc's malloc serves every block above its mmap threshold (at most 32 MiB) with a fresh
``mmap`` and returns it with ``munmap`` when freed. A training step allocates and frees the same
activation-sized blocks (10–600 MB at batch 256) again and again, so on the CPU every one of them
is page-faulted and zeroed by the kernel anew: a 118 MB ``zeros_like`` takes ~53 ms that way and
the max-pooling of a ``cnn_cifar`` teacher 64 ms instead of 16 ms (``benchmarks/bench_dense.py``
prints the effect on a whole DENSE generator step). :func:`large_blocks_from_heap` switches
``mmap`` off (``M_MMAP_MAX = 0``) and heap trimming off (``M_TRIM_THRESHOLD``) for the duration
of a block, so freed blocks are reused without faults; on exit it restores mmap for large
blocks, sets the thresholds to the values glibc's adaptive rule settles at for such workloads
(32 MiB mmap, 64 MiB trim) and gives the free heap back to the system (``malloc_trim``). The
values computed are unaffected.

Process-wide by nature (malloc is): entering is counted, so nested or concurrent uses keep the
setting until the last one exits. A no-op where the C library is not glibc (macOS, Windows,
musl) or when ``OFL_HEAP_ALLOC=0``. Lasting side effect: glibc's thresholds stay fixed at those
settled values instead of adapting (any ``mallopt`` call switches adaptation off).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# glibc <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_DEFAULT_MMAP_MAX = 65536
# Any mallopt call switches glibc's adaptive thresholds off for good, so on exit they are set to
# where the adaptive rule puts them once a block of ≥ 32 MiB has been mmapped and freed (which a
# torch workload at these sizes does at once): mmap threshold 32 MiB, trim threshold twice that.
# Restoring the initial 128 KiB instead would page-fault every block above 128 KiB afterwards.
_SETTLED_MMAP_THRESHOLD = 32 * 1024 * 1024
_SETTLED_TRIM_THRESHOLD = 2 * _SETTLED_MMAP_THRESHOLD
_NO_TRIM = 2**31 - 1  # mallopt takes an int

_lock = threading.Lock()
_depth = 0


def _glibc() -> ctypes.CDLL | None:
    if os.environ.get("OFL_HEAP_ALLOC", "1") == "0":
        return None
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
        libc.mallopt, libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()


@contextmanager
def large_blocks_from_heap(enabled: bool = True) -> Iterator[None]:
    """Within the block, large allocations come from (and return to) the heap instead of
    fresh ``mmap``s (see the module docstring). ``enabled=False`` (e.g. for a CUDA run) or a
    non-glibc system: does nothing."""
    global _depth
    if not enabled or _LIBC is None:
        yield
        return
    with _lock:
        _depth += 1
        if _depth == 1:
            _LIBC.mallopt(_M_MMAP_MAX, 0)
            _LIBC.mallopt(_M_TRIM_THRESHOLD, _NO_TRIM)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _LIBC.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                _LIBC.mallopt(_M_MMAP_THRESHOLD, _SETTLED_MMAP_THRESHOLD)
                _LIBC.mallopt(_M_TRIM_THRESHOLD, _SETTLED_TRIM_THRESHOLD)
                _LIBC.malloc_trim(0)
