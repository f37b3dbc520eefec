"""FedDF with the student's BN layers in train mode (the literal reading) or eval mode
(``kd_student_mode``) on the same clients: DENSE Table 1's setting (m = 5 ``cnn_mnist``,
Dirichlet α, seed 1). The clients come from the client cache when a run trained them before
(e.g. the shipped grid ``results/grids/dense_table1_fmnist.yaml`` for ``--dataset fmnist
--local-epochs 200``). Prints one line per (α, mode): FedAvg's accuracy (the student's start),
the last and best epoch. ``--proxy`` swaps the noise for a dataset's training images. One
torch thread.

    python scripts/evidence/measure_feddf_student_mode.py --dataset fmnist --alphas 0.1 0.5 \\
        --local-epochs 200 [--modes train eval] [--seeds 1]      # paper scale
    python scripts/evidence/measure_feddf_student_mode.py --seeds 1 2 3 --server-epochs 15 \\
        --steps-per-epoch 10 --batch-size 32                     # quick scale (embedded FMNIST)
"""

from __future__ import annotations

import argparse
import json

import torch
from dense_t1_setup import add_cell_args, add_server_args, dense_t1_setup, server_sizes

from ofl_core.evaluate import accuracy
from ofl_core.methods.fedavg import FedAvgConfig
from ofl_core.methods.feddf import FedDFConfig
from ofl_core.registry import run_method


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cell_args(p, "fmnist_embedded", 10)
    p.add_argument("--modes", nargs="+", default=["train", "eval"], choices=["train", "eval"])
    p.add_argument("--proxy", default="noise",
                   help="FedDF's proxy: noise (data-free, the default) or a dataset name, e.g. "
                        "the task's own training images as an in-domain upper bound")
    add_server_args(p)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    server = server_sizes(args)
    for alpha in args.alphas:
        for seed in args.seeds:
            setup = dense_t1_setup(args.dataset, alpha, seed, args.local_epochs)
            ctx = setup.context()
            fedavg = run_method("fedavg", setup.uploads, FedAvgConfig(weighted=True), ctx)
            for mode in args.modes:
                res = run_method("feddf", setup.uploads,
                                 FedDFConfig(**server, proxy=args.proxy,
                                             kd_student_mode=mode), ctx)
                print(json.dumps({"alpha": alpha, "seed": seed, "mode": mode,
                                  "proxy": res.extras["proxy"],
                                  "fedavg": accuracy(fedavg.model, setup.dataset.x_test,
                                                     setup.dataset.y_test),
                                  "ensemble": setup.ensemble_acc,
                                  "last": res.last_acc, "best": res.best_acc,
                                  "curve_every_10": res.curve[9::10]}), flush=True)


if __name__ == "__main__":
    main()
