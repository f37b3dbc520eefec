"""Each server's cost beside DENSE's, on the same clients and the same budget.

The one-shot servers do very different work after the uploads arrive: FedAvg and OT fusion
average (OT first aligns the neurons), FedLPA solves a per-layer system from the clients' K-FAC
factors (its clients make one more pass over their data for the factors: timed apart, as
``client step``), and DENSE, Co-Boosting and IntactOFL synthesize data against the ensemble and
distil or gate on it. Here every server runs once on one shared set of clients (trained
untimed, or loaded from ``--cache-dir``), the generator methods with one budget (``--epochs``
× ``--steps`` generator steps, batch ``--batch``), FedLPA with its own ``newton_steps``, and
the table gives the seconds, the seconds per epoch and the cost relative to DENSE (the
reference of the field's later papers), with the test accuracy reached (a budget this small
compares cost, not accuracy).

    OMP_NUM_THREADS=1 python benchmarks/bench_servers.py --threads 1
    OMP_NUM_THREADS=1 python benchmarks/bench_servers.py --threads 1 --dataset fmnist \\
        --local-epochs 20 --epochs 10 --cache-dir ~/.cache/ofl/clients   # DENSE's FMNIST setting

Run it on an idle machine (no other heavy process): the numbers are wall-clock seconds. The
authors' public codes are not timed here: docs/decisions/speed.md has the DENSE server against
its code (``bench_stages.py --stage dense``); FedLPA's, Co-Boosting's and IntactOFL's
comparison scripts in ``scripts/evidence/`` print the public code's time beside ours for
their own budgets.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, method_config, setup_experiment
from ofl_core.registry import method_spec, run_method

#: the servers timed, in the order of the table
METHODS = ("fedavg", "ot", "fedlpa", "feddf", "dense", "coboosting", "intactofl")
#: the methods that spend ``--epochs`` × ``--steps`` generator steps
GENERATOR = {"feddf", "dense", "coboosting", "intactofl"}


def budget(method: str, args: argparse.Namespace) -> dict:
    if method not in GENERATOR:
        return {}
    return dict(epochs=args.epochs, steps_per_epoch=args.steps, batch_size=args.batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dataset", default="fmnist_embedded")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--local-epochs", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=5, help="server epochs of the generator methods")
    ap.add_argument("--steps", type=int, default=30, help="generator steps per epoch (T_G)")
    ap.add_argument("--batch", type=int, default=128, help="synthetic batch size")
    ap.add_argument("--preset", default="paper", choices=("paper", "authors_code"))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--cache-dir", default=None, help="client cache (default: a fresh one)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalTrainConfig.for_preset(args.preset, epochs=args.local_epochs)
        exp = ExperimentConfig(dataset=args.dataset, partition="dirichlet", alpha=args.alpha,
                               num_clients=args.clients, seed=1, local=local,
                               cache_dir=args.cache_dir or tmp, experiment="bench",
                               device=args.device, progress=False)
        setup = setup_experiment(exp)  # untimed: the clients every server shares
        rows = []
        for m in args.methods:
            cfg = method_config(m, args.preset, **budget(m, args))
            t0 = time.perf_counter()
            uploads = setup.uploads_for(m, cfg)
            step = time.perf_counter() - t0 if method_spec(m).client_step else None
            with tempfile.TemporaryDirectory() as servers:  # fresh checkpoints: never resumed
                ctx = replace(setup.context(), cache_dir=servers)
                t0 = time.perf_counter()
                res = run_method(m, uploads, cfg, ctx)
                secs = time.perf_counter() - t0
            acc = res.last_acc if res.last_acc is not None else (
                res.curve[-1] if res.curve else ctx.evaluate(res.model))
            rows.append((m, secs, step, acc))
    dense = next((s for m, s, _, _ in rows if m == "dense"), None)
    print(f"{args.dataset}, α {args.alpha}, {args.clients} × {local.arch} clients "
          f"({args.local_epochs} local epochs, {args.preset}); generator methods: "
          f"{args.epochs} epochs × {args.steps} steps, batch {args.batch}; {args.threads} "
          f"thread(s) on {args.device}; ensemble {setup.ensemble_acc:.2f}")
    print(f"{'method':<11} {'server s':>9} {'s/epoch':>8} {'× DENSE':>8} {'client step s':>14}"
          f" {'last acc':>9}")
    for m, secs, step, acc in rows:
        per = f"{secs / args.epochs:8.2f}" if m in GENERATOR else f"{'':>8}"
        rel = f"{secs / dense:8.2f}" if dense else f"{'':>8}"
        st = f"{step:14.2f}" if step is not None else f"{'':>14}"
        print(f"{m:<11} {secs:9.2f} {per} {rel} {st} {acc:9.2f}")


if __name__ == "__main__":
    main()
