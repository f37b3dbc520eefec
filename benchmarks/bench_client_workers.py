"""The clients' phase: ``train_clients``' worker pool against two plain processes, same work.

    OMP_NUM_THREADS=2 python benchmarks/bench_client_workers.py [--alpha 0.3] [--epochs 6]
        [--reps 3] [--json FILE]

DENSE Table 1's clients (FMNIST, Dirichlet α, 5 × ``cnn_mnist``, the ``paper`` local
training, real shards) are trained for ``--epochs`` local epochs, in each repetition three ways:

- ``pool``: :func:`~ofl_core.client_training.train_clients` with ``workers=2`` (its spawn
  pool, one thread per worker, no cache), as a two-core task trains them;
- ``plain pair``: two spawned processes started together at one thread each, each running
  :func:`~ofl_core.clients.train_local` on the clients the pool's first-free scheduling gives
  that worker (clients 0, 2, 3 and 1, 4 for α = 0.3), each timing its own loop;
- ``alone``: one of those two processes' work with nothing else of this benchmark running.

If ``pool`` is about ``plain pair`` the pool adds nothing beyond two processes side by side;
``plain pair`` against ``alone`` is what the second process costs the first on this machine.
Run it on an otherwise idle machine; the repetitions show how much the machine itself drifts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path

import torch

from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig, train_local
from ofl_core.experiment import ExperimentConfig, setup_experiment


def _loop(shards: list[tuple[torch.Tensor, torch.Tensor]], cfg: LocalTrainConfig,
          start: mp.synchronize.Barrier | None, out: mp.Queue) -> None:
    torch.set_num_threads(1)
    if start is not None:
        start.wait()
    t0 = time.perf_counter()
    for x, y in shards:
        train_local(x, y, cfg, 10, seed=1, progress=False)
    out.put(time.perf_counter() - t0)


def _spawned(groups: list[list[tuple[torch.Tensor, torch.Tensor]]], cfg: LocalTrainConfig
             ) -> list[float]:
    ctx = mp.get_context("spawn")
    start, out = (ctx.Barrier(len(groups)) if len(groups) > 1 else None), ctx.Queue()
    procs = [ctx.Process(target=_loop, args=(g, cfg, start, out)) for g in groups]
    for p in procs:
        p.start()
    times = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return times


def first_free(sizes: list[int], workers: int = 2) -> list[list[int]]:
    """Which clients each worker of a pool trains when every job goes to the first free
    worker, in client order, with work proportional to the shard size."""
    load, groups = [0] * workers, [[] for _ in range(workers)]
    for k, n in enumerate(sizes):
        w = min(range(workers), key=lambda i: (load[i], i))
        groups[w].append(k)
        load[w] += n
    return groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--alpha", type=float, default=0.3)
    ap.add_argument("--epochs", type=int, default=6, help="local epochs of each client")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(2)
    local = LocalTrainConfig.for_preset("paper")
    setup = setup_experiment(ExperimentConfig(
        dataset="fmnist", partition="dirichlet", alpha=args.alpha, num_clients=5, seed=1,
        local=local, experiment="bench_client_workers", device="cpu", progress=False))
    ds, part = setup.dataset, setup.partition
    cfg = LocalTrainConfig.for_preset("paper", epochs=args.epochs)
    shards = [(ds.x_train[torch.as_tensor(i)], ds.y_train[torch.as_tensor(i)])
              for i in part.client_indices]
    groups = first_free([len(y) for _, y in shards])
    steps = [sum(-(-len(shards[k][1]) // cfg.batch_size) * args.epochs for k in g)
             for g in groups]
    print(f"FMNIST α {args.alpha}, shards {[len(y) for _, y in shards]}, workers' clients "
          f"{groups}, {args.epochs} epochs: {steps} SGD steps per worker")
    rows = []
    for rep in range(args.reps):
        t0 = time.perf_counter()
        train_clients(ds, part, cfg, seed=1, cache=None, workers=2, progress=False)
        pool = time.perf_counter() - t0
        pair = _spawned([[shards[k] for k in g] for g in groups], cfg)
        alone = _spawned([[shards[k] for k in groups[0]]], cfg)[0]
        per_step = [round(t / s * 1000, 2) for t, s in zip(pair, steps, strict=True)]
        row = {"rep": rep, "pool_wall_s": round(pool, 2),
               "pair_loop_s": [round(t, 2) for t in pair], "alone_loop_s": round(alone, 2),
               "pair_ms_per_step": per_step,
               "alone_ms_per_step": round(alone / steps[0] * 1000, 2)}
        rows.append(row)
        print(f"rep {rep}: pool {pool:6.1f} s wall (with its start-up) | plain pair "
              f"{pair[0]:6.1f} / {pair[1]:6.1f} s ({row['pair_ms_per_step'][0]:.2f} / "
              f"{row['pair_ms_per_step'][1]:.2f} ms a step) | worker 1's work alone "
              f"{alone:6.1f} s ({row['alone_ms_per_step']:.2f} ms a step)", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"alpha": args.alpha, "epochs": args.epochs,
                                         "groups": groups, "steps": steps,
                                         "torch": torch.__version__, "rows": rows}, indent=1)
                             + "\n")


if __name__ == "__main__":
    main()
