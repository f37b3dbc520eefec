"""Where does OT fusion depart from FedAvg in FedLPA's own FashionMNIST setting?

On clients trained from one shared initialisation for 10 local epochs OT fusion's transport
plan is usually the identity, so it equals FedAvg; on the β = 0.1, seed-3 clients it lands
0.08 points below (docs/decisions/fedlpa.md#fedlpa-own-setting). This script takes the clients
of the setting from the client cache (the grid's task settings: 10 × ``simplecnn_mnist``,
label-Dirichlet β, 10 local epochs, batch 64, weight decay 1e-5; trained here when absent),
runs OT fusion and FedAvg on them, and prints per client the fraction of its neurons the
plan moves (``fraction_neurons_moved``, over the aligned layers) beside both accuracies.

    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/evidence/probe_ot_plan.py \\
        --beta 0.1 --seeds 1 3 [--out probe.jsonl]
"""

from __future__ import annotations

import argparse
import sys

import torch
from _fedlpa_setting import setting_config
from _output import emit

from ofl_core.experiment import setup_experiment
from ofl_core.registry import method_config, run_method


def one_seed(beta: float, seed: int, local_epochs: int) -> dict:
    setup = setup_experiment(setting_config(beta, seed, local_epochs))
    ctx = setup.context()
    ot = run_method("ot", setup.uploads, method_config("ot"), ctx)
    avg = run_method("fedavg", setup.uploads, method_config("fedavg"), ctx)
    return {"beta": beta, "seed": seed,
            "mean_client": sum(setup.client_accs) / len(setup.client_accs),
            "ot": ctx.evaluate(ot.model), "fedavg": ctx.evaluate(avg.model),
            "anchor": ot.extras["anchor"], "layers": ot.extras["layers"],
            "fraction_neurons_moved": ot.extras["fraction_neurons_moved"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--local-epochs", type=int, default=10)
    ap.add_argument("--out", help="append one JSON line per seed here (default: stdout only)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for seed in args.seeds:
        emit(one_seed(args.beta, seed, args.local_epochs), args.out)


if __name__ == "__main__":
    sys.exit(main())
