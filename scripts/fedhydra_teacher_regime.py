"""FedHydra's teacher × distillation-regime table (issue 20), on the same clients as DENSE.

For 2c/c and Dirichlet α = 0.1 (FedHydra Tables 2 and 1 at quick scale: embedded FMNIST,
m = 5, cnn_mnist clients with 10 local epochs, the quick server sizes of
``notebooks/two_classes_per_client.py``'s parameters cell — 5 server epochs of 5 generator
steps, batch 32, ngf 32, stratification 3 steps × 8 images), seeds 1–3: every variant of
:func:`ofl_core.fedhydra.teacher_regime.variants` (FedHydra with each teacher and each
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

Resumable: the JSON file is rewritten after every run and rows already in it are skipped.
One thread (``torch.set_num_threads(1)``, one client-training worker).

    nohup python scripts/fedhydra_teacher_regime.py > /tmp/hydra_table.log 2>&1 &
    python scripts/fedhydra_teacher_regime.py --table          # print the tables only
    python scripts/fedhydra_teacher_regime.py --epochs 20 --settings 2c/c \
        --out results/fedhydra_teacher_regime_e20.json --only 'dense: mean_logits / pool;...'
"""

import argparse

import pandas as pd
import torch

from ofl_core.fedhydra.teacher_regime import (
    QUICK,
    SETTINGS,
    load_results,
    panel_summary,
    run_table,
    summarise,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/fedhydra_teacher_regime.json")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--epochs", type=int, default=QUICK["epochs"], help="server epochs")
    ap.add_argument("--only", default="", help="run only these variants: labels separated "
                    "by ';', e.g. 'dense: mean_logits / pool;fedhydra: sa / intermediate'")
    ap.add_argument("--table", action="store_true", help="print the tables, run nothing")
    args = ap.parse_args()
    torch.set_num_threads(1)
    only = {v.strip() for v in args.only.split(";") if v.strip()}
    if not args.table:
        run_table(args.out, [int(s) for s in args.seeds.split(",")],
                  args.settings.split(","), {**QUICK, "epochs": args.epochs},
                  only=(lambda v: v.label in only) if only else None,
                  log=lambda s: print(s, flush=True))
    data = load_results(args.out)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        cols = ["setting", "variant", "n", "last", "best"]
        print(summarise(data)[cols].to_string(index=False))
        print(panel_summary(data).to_string(index=False))


if __name__ == "__main__":
    main()
