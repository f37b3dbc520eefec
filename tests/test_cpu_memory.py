"""ofl_core.cpu_memory: large blocks are reused from the heap inside the block, and the heap is
given back after it."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap

import pytest
import torch

from ofl_core import cpu_memory
from ofl_core.cpu_memory import large_blocks_from_heap

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and cpu_memory._LIBC is not None),
    reason="glibc malloc tuning only",
)

# in a fresh interpreter, so that earlier tests' heap state does not serve these allocations:
# minor page faults per training step of a small conv net whose activations (100 MB) are above
# glibc's largest mmap threshold (32 MiB), so that by default each is a fresh mmap
SCRIPT = textwrap.dedent("""
    import json, resource, torch
    from ofl_core import cpu_memory
    from ofl_core.cpu_memory import large_blocks_from_heap

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU())
    x = torch.randn(1024, 1, 28, 28)

    def faults(n):
        out = []
        for _ in range(n):
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            net(x).square().mean().backward()
            out.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        return out

    res = {"before": faults(3)}
    with large_blocks_from_heap():
        res["inside"] = faults(6)
        with large_blocks_from_heap():
            res["nested"] = faults(2)
        res["still"] = faults(2)
    res["after"] = faults(2)
    res["depth"] = cpu_memory._depth
    print(json.dumps(res))
""")


def test_large_blocks_are_reused_inside_and_page_faulted_again_after() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    fresh = min(res["before"])  # glibc's default: fresh mmaps, page-faulted every step
    assert fresh > 50_000, res
    reused = res["inside"][1:] + res["nested"] + res["still"]  # after the first step
    assert statistics.median(reused) < fresh / 100, res  # most steps: no page faults
    assert max(res["after"]) > fresh / 10, res  # the heap was given back; mmaps again
    assert res["depth"] == 0


def test_disabled_changes_nothing_and_values_are_the_same() -> None:
    x = torch.randn(64, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    conv = torch.nn.Conv2d(3, 8, 3)
    ref = conv(x)
    with large_blocks_from_heap(enabled=False):
        assert cpu_memory._depth == 0
        off = conv(x)
    with large_blocks_from_heap():
        assert cpu_memory._depth == 1
        on = conv(x)
    assert cpu_memory._depth == 0
    assert torch.equal(ref, off) and torch.equal(ref, on)
