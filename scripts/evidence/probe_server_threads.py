"""Does a server's arithmetic depend on the number of torch threads?

CPU records are bit-identical only at equal thread counts (docs/decisions/reliability.md,
"Bit-identity"): this script shows how far a server departs at another count. It takes the
clients of one (β, seed) of FedLPA's own FashionMNIST setting from the client cache (the
grid's task settings: 10 × ``simplecnn_mnist``, label-Dirichlet β, 10 local epochs, batch 64,
weight decay 1e-5; trained here when absent), runs one server method for a few epochs at each
thread count given, without server checkpoints (so no run resumes another), and prints per run
the test accuracy after each epoch and the largest absolute difference of the final model's
weights from the first run's. List a thread count twice to see that a fixed count repeats itself.

    PYTHONPATH=. python scripts/evidence/probe_server_threads.py \\
        --beta 0.3 --seed 1 --method dense --epochs 3 --threads 1 1 2 [--out probe.jsonl]
"""

from __future__ import annotations

import argparse
import sys

import torch
from _fedlpa_setting import setting_config
from _output import emit

from ofl_core.experiment import setup_experiment
from ofl_core.registry import method_config, run_method


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--beta", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--method", default="dense")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 1, 2])
    ap.add_argument("--local-epochs", type=int, default=10)
    ap.add_argument("--out", help="append one JSON line per run here (default: stdout only)")
    args = ap.parse_args()
    if args.epochs < 1 or min(args.threads) < 1:
        ap.error("--epochs and every --threads value must be at least 1")
    torch.set_num_threads(args.threads[0])
    setup = setup_experiment(setting_config(args.beta, args.seed, args.local_epochs,
                                            checkpoint_every=0))
    first: dict[str, torch.Tensor] | None = None
    for threads in args.threads:
        torch.set_num_threads(threads)
        res = run_method(args.method, setup.uploads,
                         method_config(args.method, epochs=args.epochs), setup.context())
        state = {k: v.detach().float().clone() for k, v in res.model.state_dict().items()}
        if first is None:
            first = state
        diff = max((state[k] - first[k]).abs().max().item() for k in state)
        emit({"beta": args.beta, "seed": args.seed, "method": args.method,
              "epochs": args.epochs, "threads": threads,
              "mean_client": sum(setup.client_accs) / len(setup.client_accs),
              "curve": res.curve, "max_abs_weight_diff_vs_first": diff}, args.out)


if __name__ == "__main__":
    sys.exit(main())
