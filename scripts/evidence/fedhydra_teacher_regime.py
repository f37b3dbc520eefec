"""FedHydra's teacher × distillation-regime table, on the same clients as DENSE.

For 2c/c and Dirichlet α = 0.1 (FedHydra Tables 2 and 1 at quick scale: embedded FMNIST,
m = 5, cnn_mnist clients with 10 local epochs, the quick server sizes of
``notebooks/two_classes_per_client.py``'s parameters cell — 5 server epochs of 5 generator
steps, batch 32, ngf 32, stratification 3 steps × 8 images), seeds 1–3: every variant of
:func:`ofl_core.sections.teacher_regime.variants` (FedHydra with each teacher and each
distillation regime, the robust u, DENSE) runs on one set of clients per (setting, seed), with
one stratification; the last and best test accuracy of each run go to the results file.

Teacher panel (per setting and seed, no distillation; the test set's real images):
- label-free accuracy: the teacher without labels (FedHydra Fig. 8's SA is one of them);
- true-label accuracy, *leaky*: the teacher fed the true test labels as its target labels
  (Eq. 10 picks the row Ū_r(y_i, ·)); a server never has them, so this is not an accuracy
  a method can reach — a high value means the label decides the prediction;
- random-label echo rate: with labels ỹ drawn uniformly at random, independently of the
  images, the share of images where the teacher's argmax equals ỹ. 100/C = 10 % for a
  label-free teacher; near 100 % for a teacher that echoes the label it is given, which a
  generator trained on CE(T(x̂, y), y) satisfies with almost any image.
The oracle (true class owners from the label counts) is a diagnostic, never a method.

``--scale paper`` runs the larger-scale check needed before concluding on Table 2
(docs/decisions/fedhydra.md#fedhydra-t2-paper-scale): full FashionMNIST (60k / 10k) 2c/c, m = 5
cnn_mnist clients with the paper's E = 200 local epochs, T_G = 30 generator steps of b = 128,
the 30 × 128 stratification probe, ngf 64, and T_g = 10 server epochs instead of the paper's 200
(a 2-core CPU budget; the results file records what was reduced), seed 1, the rows of
``PAPER_SCALE_ROWS`` (DENSE, the paper preset, ``sa_no_uc / pool`` in FedHydra's and DENSE's
loops), to ``results/fedhydra_teacher_regime_fmnist_full.json``.

Resumable: the JSON file is rewritten after every run and rows already in it are skipped
(clients come from the upload cache once trained). One thread (``torch.set_num_threads(1)``,
one client-training worker).

    nohup python scripts/evidence/fedhydra_teacher_regime.py > /tmp/hydra_table.log 2>&1 &
    python scripts/evidence/fedhydra_teacher_regime.py --table          # print the tables only
    python scripts/evidence/fedhydra_teacher_regime.py --epochs 20 --settings 2c/c \\
        --out results/fedhydra_teacher_regime_e20.json --only 'dense: mean_logits / pool;...'
    nohup python scripts/evidence/fedhydra_teacher_regime.py --scale paper \\
        > /tmp/hydra_full.log 2>&1 &
"""

import argparse
import dataclasses
from pathlib import Path

import pandas as pd
import torch

from ofl_core.sections.teacher_regime import (
    PAPER_SCALE_ROWS,
    RESULTS,
    RESULTS_FULL,
    SCALES,
    load_results,
    panel_summary,
    run_table,
    summarise,
    variants,
    wall_time,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="quick",
                    help="quick: embedded FMNIST, every variant; paper: full FMNIST 2c/c, the "
                    "paper's client and generator sizes, PAPER_SCALE_ROWS only")
    ap.add_argument("--out", default=None, help=f"results file (default: {RESULTS} for "
                    f"quick, {RESULTS_FULL} for paper, under results/)")
    ap.add_argument("--seeds", default=None, help="default: 1,2,3 (quick), 1 (paper)")
    ap.add_argument("--settings", default=None, help="default: 2c/c,α=0.1 (quick), 2c/c "
                    "(paper)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="server epochs (default: the scale's: 5 quick, 10 paper)")
    ap.add_argument("--local-epochs", type=int, default=None,
                    help="the clients' local epochs (default: the scale's: 10 quick, 200 "
                    "paper; another value needs another --out file)")
    ap.add_argument("--only", default="", help="run only these variants: labels separated "
                    "by ';', e.g. 'dense: mean_logits / pool;fedhydra: sa / intermediate' "
                    "(default: all for quick, PAPER_SCALE_ROWS for paper)")
    ap.add_argument("--table", action="store_true", help="print the tables, run nothing")
    args = ap.parse_args()
    torch.set_num_threads(1)
    scale = SCALES[args.scale]
    if args.local_epochs is not None:
        scale = dataclasses.replace(scale, local_epochs=args.local_epochs, reduced=(
            f"{scale.reduced}; local epochs {args.local_epochs} (paper: 200)"))
    out = args.out or str(Path("results") / (RESULTS if args.scale == "quick" else RESULTS_FULL))
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(scale.seeds)
    settings = args.settings.split(",") if args.settings else list(scale.settings)
    only = {v.strip() for v in args.only.split(";") if v.strip()}
    if not only and args.scale == "paper":
        only = {v.label for v in PAPER_SCALE_ROWS}
    unknown = only - {v.label for v in variants()}
    if unknown:
        ap.error(f"--only: unknown variants {sorted(unknown)}")
    if not args.table:
        epochs = scale.server["epochs"] if args.epochs is None else args.epochs
        run_table(out, seeds, settings, {**scale.server, "epochs": epochs},
                  only=(lambda v: v.label in only) if only else None,
                  log=lambda s: print(s, flush=True), scale=scale)
    data = load_results(out)
    if not data["rows"]:
        print(f"no results in {out} yet")
        return
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        cols = ["setting", "variant", "n", "last", "best"]
        if data.get("scale"):
            print("scale:", data["scale"])
        print("server:", data["server"], "| wall time:", wall_time(data))
        print(summarise(data)[cols].to_string(index=False))
        print(panel_summary(data).to_string(index=False))


if __name__ == "__main__":
    main()
