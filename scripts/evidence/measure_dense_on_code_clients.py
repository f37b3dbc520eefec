"""DENSE on clients trained the way DENSE's public code trains them (BN layers in eval mode
after the first local epoch, ``LocalTrainConfig.bn_eval_after_first_epoch``), everything else
as DENSE Table 1's FashionMNIST cell: m = 5 ``cnn_mnist``, Dirichlet α, seed 1, the paper's
local epochs, DENSE's ``paper`` server preset (200 epochs, T_G = 30, batch 128).

FedHydra's Table 1 re-runs DENSE's α = 0.5 cell with a FedAvg of 75.76 — the FedAvg that this
local training gives on our partition — and prints 71.14 for DENSE; DENSE's own paper prints
85.94 over a FedAvg of 83.72. This runs DENSE on such clients, to see which it lands near.
``--bn-eval off`` gives the paper's clients (those of ``results/grids/dense_table1_fmnist.yaml``,
from the client cache). Prints one JSON line per α: FedAvg (weighted / unweighted), the
clients' logit ensemble, DENSE's last and best epoch, its curve every 10 epochs, the seconds.
One torch thread; the server checkpoints every 5 epochs, so a re-run resumes.

    python scripts/evidence/measure_dense_on_code_clients.py --alphas 0.5            # paper scale
    python scripts/evidence/measure_dense_on_code_clients.py --dataset fmnist_embedded \\
        --local-epochs 2 --server-epochs 2 --steps-per-epoch 2            # a smoke run
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from dense_t1_setup import dense_t1_setup

from ofl_core.dense.server import DenseConfig
from ofl_core.evaluate import accuracy
from ofl_core.methods.fedavg import FedAvgConfig
from ofl_core.registry import run_method


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="fmnist")
    p.add_argument("--alphas", type=float, nargs="+", default=[0.5])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--local-epochs", type=int, default=200, help="the paper's 200")
    p.add_argument("--bn-eval", choices=["on", "off"], default="on",
                   help="on: DENSE's code's local training (BN eval after epoch 1)")
    p.add_argument("--preset", default="paper", choices=["paper", "authors_code"],
                   help="DENSE's server preset")
    p.add_argument("--server-epochs", type=int, default=None, help="default: the preset's")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="default: the preset's")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    server = {k: v for k, v in (("epochs", args.server_epochs),
                                ("steps_per_epoch", args.steps_per_epoch)) if v is not None}
    for alpha in args.alphas:
        t0 = time.perf_counter()
        setup = dense_t1_setup(args.dataset, alpha, args.seed, args.local_epochs,
                               bn_eval_after_first_epoch=args.bn_eval == "on")
        ctx = setup.context()
        t_clients = time.perf_counter() - t0
        acc = {}
        for weighted in (True, False):
            fedavg = run_method("fedavg", setup.uploads, FedAvgConfig(weighted=weighted), ctx)
            acc[weighted] = accuracy(fedavg.model, setup.dataset.x_test, setup.dataset.y_test)
        t1 = time.perf_counter()
        res = run_method("dense", setup.uploads,
                         DenseConfig.for_preset(args.preset, **server), ctx)
        print(json.dumps({"alpha": alpha, "seed": args.seed, "bn_eval": args.bn_eval,
                          "local_epochs": args.local_epochs, "preset": args.preset,
                          "fedavg_weighted": acc[True], "fedavg_unweighted": acc[False],
                          "ensemble": setup.ensemble_acc,
                          "dense_last": res.last_acc, "dense_best": res.best_acc,
                          "curve_every_10": res.curve[9::10],
                          "client_seconds": round(t_clients, 1),
                          "server_seconds": round(time.perf_counter() - t1, 1)}), flush=True)


if __name__ == "__main__":
    main()
