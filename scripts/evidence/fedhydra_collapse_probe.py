"""Why FedHydra's student collapses at paper scale: its first epochs under one change at a time.

At paper scale (FashionMNIST, Dirichlet α = 0.3, seed 1, 5 × ``cnn_mnist`` clients with 200
local epochs, T_G = 30 generator steps of b = 128, ngf 64) FedHydra's ``paper`` preset predicts
one class from its third server epoch on (docs/decisions/paper-gaps.md#fedhydra-t1). This
script re-runs the first ``--epochs`` server epochs of FedHydra on the same clients and the
same stratification (computed once, exactly as the server does) for the paper preset and for
each variant that changes one thing (the adversarial term, the global model's optimiser, the
teacher, the distillation regime), plus DENSE's ``paper`` preset on the same clients for
reference. Per run: the test curve, and on 2,000 test images the share of the student's
penultimate units that never fire (``dead_units``) and the share of zero activations
(``zero_activations``) — a student whose every unit is dead outputs its last bias.

One row per variant is appended to ``--out`` (JSON lines); variants already there at the same
number of epochs are skipped, so an interrupted run resumes. One thread. The clients come from
the client cache when the shipped grid ``results/grids/dense_fedhydra_table1_fmnist.yaml``
trained them (else they are trained first, about 30 minutes on 2 cores).

    python scripts/evidence/fedhydra_collapse_probe.py --epochs 6
    python scripts/evidence/fedhydra_collapse_probe.py --epochs 20 --only paper adv_weight=0
    python scripts/evidence/fedhydra_collapse_probe.py \
        --checkpoint ~/.cache/ofl/clients/servers/<key>.ckpt

``--checkpoint`` inspects a finished or interrupted FedHydra (or DENSE) server checkpoint of
this cell instead (the file of the grid's run, in the client cache's ``servers`` folder): the
student's test accuracy with its own BN statistics and with BN statistics re-estimated on
2,048 real training images (a diagnostic: a server has no real data), its dead units, and the
class it predicts.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from pathlib import Path

import torch
from dense_t1_setup import dense_t1_setup

from ofl_core.checkpoint.store import BadFile, unpack_checkpoint
from ofl_core.clients import init_model
from ofl_core.dense.server import DenseConfig, run_dense
from ofl_core.distill.stratification import Stratification
from ofl_core.evaluate import accuracy, predict_logits
from ofl_core.experiment import Setup
from ofl_core.fedhydra.server import FedHydraConfig, run_fedhydra
from ofl_core.sections.teacher_regime import setup_stratification

#: one change each against FedHydra's paper preset (the config fields it sets)
VARIANTS: dict[str, dict] = {
    "paper": {},
    "adv_weight=0": {"adv_weight": 0.0},
    "adv_weight=0.1": {"adv_weight": 0.1},
    "adv_mask": {"adv_mask": True},
    "kd_ce_weight=0": {"kd_ce_weight": 0.0},
    "kd_lr=0.001": {"kd_lr": 0.001},
    "kd_momentum=0": {"kd_momentum": 0.0},
    "sa_rescale": {"sa_rescale": True},
    "teacher=sa_probs": {"teacher": "sa_probs"},
    "teacher=sa_no_uc": {"teacher": "sa_no_uc"},
    "kd_data=pool": {"kd_data": "pool"},
    # the best reading at quick scale (docs/decisions/fedhydra.md#fedhydra-readings): two changes
    "teacher=sa_no_uc,kd_data=pool": {"teacher": "sa_no_uc", "kd_data": "pool"},
}
DENSE_REFERENCE = "dense paper"
OUT = Path("results/measurements/fedhydra_collapse_fmnist_a03.jsonl")


def unit_activity(model: torch.nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(share of the last Linear layer's input units that are zero on every image, share of
    zero activations) for float images ``x``."""
    last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    seen: list[torch.Tensor] = []
    hook = last.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    model.eval()
    with torch.no_grad():
        model(x)
    hook.remove()
    f = seen[0].flatten(1)
    return float((f > 0).sum(0).eq(0).float().mean()), float(f.eq(0).float().mean())


def cached_stratification(setup: Setup, alpha: float, seed: int) -> Stratification:
    """FedHydra's stratification of the setup's clients (paper settings: 30 steps × 128 images
    per client and class, about 25 minutes at one thread), kept in the client cache's folder
    after the first run of this script (loaded with ``weights_only=True``)."""
    path = setup.cache_root / "evidence" / f"fedhydra_stratification_a{alpha}_s{seed}.pt"
    if path.exists():
        d = torch.load(path, map_location="cpu", weights_only=True)
        strat = Stratification(**d)
        if tuple(strat.U.shape) == (setup.dataset.num_classes, len(setup.uploads)):
            return strat
    strat = setup_stratification(setup, {})
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(dataclasses.asdict(strat), path)
    return strat


def read_checkpoint(path: Path) -> tuple[int, dict]:
    """(epoch, pieces) of a server checkpoint file, validated as the servers read theirs."""
    try:
        epoch, state = unpack_checkpoint(torch.load(path, map_location="cpu", weights_only=True))
    except BadFile as e:
        raise SystemExit(f"{path}: {e}") from None
    return epoch, state["pieces"]


def inspect_checkpoint(path: Path, alpha: float, seed: int) -> dict:
    """What the checkpoint's student does on the test set (module docstring)."""
    epoch, pieces = read_checkpoint(path)
    setup = dense_t1_setup("fmnist", alpha, seed, 200)
    ds = setup.dataset
    model = init_model(setup.uploads[0].arch, ds.num_classes, ds.channels, ds.image_size, 0,
                       **setup.uploads[0].model_kwargs)
    model.load_state_dict(pieces["student"])
    x_test = ds.x_test.float() / 255
    real = ds.x_train[torch.randperm(len(ds.x_train),
                                     generator=torch.Generator().manual_seed(0))[:2048]]
    refit = copy.deepcopy(model)
    for bn in refit.modules():
        if isinstance(bn, torch.nn.modules.batchnorm._BatchNorm):
            bn.reset_running_stats()
            bn.momentum = None  # a plain average over the batches
    refit.train()
    with torch.no_grad():
        for xb in (real.float() / 255).split(128):
            refit(xb)
    dead, zeros = unit_activity(model, x_test[:2000])
    preds = predict_logits(model, ds.x_test).argmax(1)
    curve = [round(float(c), 2) for c in pieces["curve"]["curve"]]
    return {"checkpoint": path.name[:12], "epoch": epoch, "alpha": alpha, "seed": seed,
            "curve": curve,
            "test_acc": accuracy(model, ds.x_test, ds.y_test),
            "test_acc_bn_refit_on_real": accuracy(refit, ds.x_test, ds.y_test),
            "predicted_classes": torch.bincount(preds, minlength=ds.num_classes).tolist(),
            "dead_units": round(dead, 3), "zero_activations": round(zeros, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=6, help="server epochs per run (paper: 200)")
    p.add_argument("--only", nargs="+", default=None,
                   help=f"variants to run (default: all, then DENSE): {', '.join(VARIANTS)}, "
                        f"'{DENSE_REFERENCE}'")
    p.add_argument("--alpha", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="inspect this server checkpoint's student instead (module docstring)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.checkpoint is not None:
        print(json.dumps(inspect_checkpoint(args.checkpoint.expanduser(), args.alpha,
                                            args.seed)))
        return
    names = args.only or [*VARIANTS, DENSE_REFERENCE]
    unknown = [n for n in names if n not in VARIANTS and n != DENSE_REFERENCE]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; choose from {[*VARIANTS, DENSE_REFERENCE]}")
    done = set()
    if args.out.exists():
        rows = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        done = {(r["variant"], r["epochs"], r["alpha"], r["seed"]) for r in rows}
    todo = [n for n in names if (n, args.epochs, args.alpha, args.seed) not in done]
    if not todo:
        print(f"every variant asked for is in {args.out}")
        return
    setup = dense_t1_setup("fmnist", args.alpha, args.seed, 200)
    strat = cached_stratification(setup, args.alpha, args.seed)
    x_test = setup.dataset.x_test[:2000].float() / 255
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in todo:
        t0 = time.perf_counter()
        if name == DENSE_REFERENCE:
            res = run_dense(setup.uploads, DenseConfig(epochs=args.epochs), setup.context())
        else:
            cfg = FedHydraConfig(epochs=args.epochs, **VARIANTS[name])
            res = run_fedhydra(setup.uploads, cfg, setup.context(), stratification=strat)
        dead, zeros = unit_activity(res.model, x_test)
        row = {"variant": name, "epochs": args.epochs, "alpha": args.alpha, "seed": args.seed,
               "curve": [round(c, 2) for c in res.curve], "dead_units": round(dead, 3),
               "zero_activations": round(zeros, 3),
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
