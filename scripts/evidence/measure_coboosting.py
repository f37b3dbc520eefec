"""Co-Boosting beside DENSE on the same clients, in main_tables' quick setting.

Embedded FMNIST, DENSE's Dirichlet α = 0.1, m = 5, cnn_mnist clients with 10 local epochs,
the server sizes of ``notebooks/main_tables.py``'s parameters cell (15 epochs × 10 steps,
batch 32, paper generator ngf = 64), seeds 1–3, one thread; the paper preset of both methods
(and, with ``--presets paper authors_code``, the code presets too). Prints one line per run
and the mean last/best accuracy per method (docs/decisions/coboosting.md#coboosting-beside-dense).

    OMP_NUM_THREADS=1 python scripts/evidence/measure_coboosting.py [--seeds 1 2 3] \\
        [--presets paper]
"""

import argparse

import pandas as pd
import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.tables import Run, Serves, run_tables, server_settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--presets", nargs="+", default=["paper"])
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    server = server_settings(epochs=15, steps_per_epoch=10, batch_size=32, kd_batch_size=32)
    runs = [Run(ExperimentConfig(dataset="fmnist_embedded", partition="dirichlet",
                                 alpha=args.alpha, num_clients=5, seed=s, progress=False,
                                 cache_dir=args.cache_dir, experiment="main_tables",
                                 local=LocalTrainConfig(arch="cnn_mnist", epochs=10)),
                tuple((n, c, c.preset) for n, c in configure_methods(
                    ["ensemble", "dense", "coboosting"], args.presets, common=server)),
                (Serves("dense", "T1"),))
            for s in args.seeds]
    tables = run_tables(runs)
    frame = tables.frame()
    print(frame.pivot_table(index="seed", columns=["method", "preset"],
                            values=["last_acc", "best_acc"]).round(2).to_string())
    with pd.option_context("display.width", 120):
        print(frame.groupby(["method", "preset"])[["last_acc", "best_acc", "ensemble_acc",
                                                  "wall_time_s"]].mean().round(2))
    for (i, name), res in tables.results.items():  # the boosted ensemble A_w vs the mean D
        if name.startswith("coboosting"):
            ex = res.extras
            print(f"seed {args.seeds[i]} {name}: A_w {ex['weighted_ensemble_acc']:.2f} "
                  f"(mean ensemble {ex['mean_ensemble_acc']:.2f}), w = "
                  f"{[round(v, 3) for v in ex['ensemble_weights']]}")


if __name__ == "__main__":
    main()
