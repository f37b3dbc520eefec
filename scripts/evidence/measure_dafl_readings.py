"""Fed-DAFL under its two readings of DENSE §3.1.4 ("all baseline methods use the same
setting as ours") on the same clients: ``kd_data="fresh"`` (DAFL's loop: one student step per
generator step, 6000 KD steps; the paper preset) and ``"pool"`` (DENSE's distillation stage:
each epoch's best batch joins a pool, one KD pass over it, ≈ 20 000 steps). DENSE Table 1's
setting: m = 5 ``cnn_mnist``, Dirichlet α, seed 1; the clients come from the client cache when
a run trained them before (the shipped grid ``results/grids/dense_table1_fmnist.yaml`` for
``--dataset fmnist --local-epochs 200``). Prints one JSON line per (α, reading): the clients'
logit ensemble, the last and best epoch, the curve every 10 epochs, the seconds. One torch
thread; the server checkpoints every 5 epochs, so a re-run resumes.

    python scripts/evidence/measure_dafl_readings.py --alphas 0.5 --kd-data pool     # paper scale
    python scripts/evidence/measure_dafl_readings.py --dataset fmnist_embedded --local-epochs 10 \\
        --server-epochs 15 --steps-per-epoch 10 --batch-size 32 --seeds 1 2 3  # quick scale
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from dense_t1_setup import add_cell_args, add_server_args, dense_t1_setup, server_sizes

from ofl_core.methods.dafl import FedDAFLConfig
from ofl_core.registry import run_method


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cell_args(p, "fmnist", 200)
    p.add_argument("--kd-data", nargs="+", default=["fresh", "pool"], choices=["fresh", "pool"])
    add_server_args(p)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    server = server_sizes(args, kd_batch=True)
    for alpha in args.alphas:
        for seed in args.seeds:
            setup = dense_t1_setup(args.dataset, alpha, seed, args.local_epochs)
            ctx = setup.context()
            for kd_data in args.kd_data:
                t0 = time.perf_counter()
                res = run_method("fed-dafl", setup.uploads,
                                 FedDAFLConfig(**server, kd_data=kd_data), ctx)
                print(json.dumps({"alpha": alpha, "seed": seed, "kd_data": kd_data,
                                  "ensemble": setup.ensemble_acc,
                                  "last": res.last_acc, "best": res.best_acc,
                                  "kd_steps": res.extras["kd_steps"],
                                  "curve_every_10": res.curve[9::10],
                                  "seconds": round(time.perf_counter() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
