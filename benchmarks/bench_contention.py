"""Two processes side by side, or one with two threads: what each costs on this machine.

    python benchmarks/bench_contention.py [--steps 300] [--arch cnn_mnist] [--json FILE]

The paper-scale runs put two one-thread processes on a 2-core machine. This measures, in one
run, the time of one local-training SGD step (``train_local``, batch 128, the clients' default
precision; random images) in three arrangements:

- ``alone``: one process, one thread, nothing else of this benchmark running;
- ``pair``: two processes, one thread each, started together (each reports its own time);
- ``two_threads``: one process with two threads.

If ``pair`` is about ``alone`` the two cores are independent and two tasks side by side cost
nothing extra; if it is about twice ``alone``, side-by-side processes share one core's worth
of throughput (e.g. two hyperthreads of one physical core) and a column's wall time cannot
gain from running two tasks at once. Run it on an otherwise idle machine: anything else
running changes every number.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import time
from pathlib import Path

import torch

from ofl_core.clients import LocalTrainConfig, train_local


def step_ms(threads: int, steps: int, arch: str, start: mp.synchronize.Barrier | None = None
            ) -> float:
    """Milliseconds per SGD step of ``steps`` steps of one client at batch 128."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    n = steps * 128
    x = (torch.rand(n, 1, 28, 28, generator=g) * 255).to(torch.uint8)
    y = torch.randint(0, 10, (n,), generator=g)
    train_local(x[:2560], y[:2560], LocalTrainConfig(arch=arch, epochs=1), 10, seed=0,
                progress=False)  # warm-up: 20 steps
    if start is not None:
        start.wait()
    t0 = time.perf_counter()
    train_local(x, y, LocalTrainConfig(arch=arch, epochs=1), 10, seed=0, progress=False)
    return (time.perf_counter() - t0) / steps * 1000


def _worker(steps: int, arch: str, start: mp.synchronize.Barrier, out: mp.Queue) -> None:
    out.put(step_ms(1, steps, arch, start))


def pair(steps: int, arch: str) -> list[float]:
    """Two one-thread processes started together: each one's ms per step."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(steps, arch, start, out)) for _ in range(2)]
    for p in procs:
        p.start()
    times = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sorted(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="timed SGD steps per measurement")
    ap.add_argument("--arch", default="cnn_mnist")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()
    alone = step_ms(1, args.steps, args.arch)
    side_by_side = pair(args.steps, args.arch)
    two_threads = step_ms(2, args.steps, args.arch)
    result = {"arch": args.arch, "steps": args.steps, "cpu_count": mp.cpu_count(),
              "machine": platform.node(), "torch": torch.__version__,
              "alone_ms": round(alone, 2), "pair_ms": [round(t, 2) for t in side_by_side],
              "two_threads_ms": round(two_threads, 2)}
    print(f"{args.arch}, batch 128, ms per SGD step ({args.steps} steps each):")
    print(f"  one process, 1 thread, alone        {alone:7.2f}")
    print(f"  two processes, 1 thread each, at once {side_by_side[0]:7.2f} / {side_by_side[1]:.2f}"
          f"  ({sum(side_by_side) / 2 / alone:.2f}× alone)")
    print(f"  one process, 2 threads              {two_threads:7.2f}  ({alone / two_threads:.2f}× "
          "faster than alone)")
    print(f"  steps per second, whole machine: alone {1000 / alone:.1f}, pair "
          f"{sum(1000 / t for t in side_by_side):.1f}, two threads {1000 / two_threads:.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
