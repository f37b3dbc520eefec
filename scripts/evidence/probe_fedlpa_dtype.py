"""Is FedLPA's spread over near-identical clients numerical? Its server in float32 and float64.

FedLPA's server inverts the clients' averaged K-FAC factors per layer (the closed form
M = Ḡ⁻¹ Z Ā⁻¹) and refines M by 10,000 gradient steps; the public code does both in float32
(``FedLPAConfig.dtype``). On clients that differ by well under a point of test accuracy
(FedLPA's own FashionMNIST setting, trained again by a later version of the client code) the
closed form moved by up to 19 points a run (docs/decisions/fedlpa.md#fedlpa-own-setting). This
script takes the clients of that setting from the client cache (the grid's task settings:
10 × ``simplecnn_mnist``, label-Dirichlet β, 10 local epochs, batch 64, weight decay 1e-5),
computes their factors once, and runs the server in float32 and in float64 on the same
factors: the test accuracy of the closed form and of the refinement, and per layer the
condition numbers of Ā and Ḡ (float64 eigenvalues). If float64 lands where float32 does, the
spread belongs to the method on these clients, not to its arithmetic.

    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/evidence/probe_fedlpa_dtype.py \\
        --beta 0.3 --seeds 1 2 3 [--newton-steps 10000] [--out probe.jsonl]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch
from _fedlpa_setting import setting_config
from _output import emit

from ofl_core.evaluate import accuracy
from ofl_core.experiment import setup_experiment
from ofl_core.fedlpa.server import FedLPAConfig, aggregate, attach_factors, client_weights
from ofl_core.uploads import build_from_upload


def condition_numbers(uploads: list) -> dict[str, dict[str, float]]:
    """Per layer, cond(Ā) and cond(Ḡ) of the n_k-weighted factor averages, in float64."""
    w = client_weights(uploads)
    out = {}
    for name in uploads[0].curvature:
        conds = {}
        for i, key in enumerate(("A", "G")):
            bar = sum(wk * u.curvature[name][i].double() for wk, u in zip(w, uploads, strict=True))
            ev = torch.linalg.eigvalsh((bar + bar.T) / 2)
            conds[key] = float(ev.max() / ev.min())
        out[name] = conds
    return out


def one_seed(args: argparse.Namespace, seed: int) -> dict:
    cfg = setting_config(args.beta, seed, args.local_epochs)
    t0 = time.perf_counter()
    setup = setup_experiment(cfg)
    ds = setup.dataset
    base = FedLPAConfig(newton_steps=args.newton_steps)
    uploads = attach_factors(setup.uploads, ds, setup.partition, base, "cpu")
    out: dict = {"beta": args.beta, "seed": seed, "newton_steps": args.newton_steps,
                 "mean_client": sum(setup.client_accs) / len(setup.client_accs),
                 "setup_seconds": time.perf_counter() - t0,
                 "condition": condition_numbers(uploads)}
    for dtype in ("float32", "float64"):
        t0 = time.perf_counter()
        refined, biased, diag = aggregate(uploads, dataclasses.replace(base, dtype=dtype), "cpu")
        accs = {}
        for key, state in (("closed_form", biased), ("refined", refined)):
            model = build_from_upload(dataclasses.replace(uploads[0], state_dict=state,
                                                          client_id=-1, curvature=None))
            accs[key] = accuracy(model, ds.x_test, ds.y_test)
        out[dtype] = {**accs, "seconds": time.perf_counter() - t0, "residuals": diag}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--beta", type=float, default=0.3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--local-epochs", type=int, default=10)
    ap.add_argument("--newton-steps", type=int, default=10_000)
    ap.add_argument("--out", help="append one JSON line per seed here (default: stdout only)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for seed in args.seeds:
        emit(one_seed(args, seed), args.out)


if __name__ == "__main__":
    sys.exit(main())
