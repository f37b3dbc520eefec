#!/usr/bin/env python
"""float32 vs bfloat16 autocast at the main_tables quick setting, same partitions and seeds.

    OMP_NUM_THREADS=1 python scripts/evidence/measure_precision.py --seeds 1 2 3 \\
        --out precision.json

Per seed: the clients are trained twice (LocalTrainConfig.amp False / True) and every method
runs on each set with its own ``amp`` False / True; the test accuracies (last and best epoch,
client mean, ensemble) go to the JSON file, one record per (precision, seed, method), written
after each run so an interrupted measurement keeps what finished (re-run skips it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.tables import Run, Serves, run_tables, server_settings

METHODS = ["fedavg", "feddf", "fed-dafl", "fed-adi", "dense", "fedhydra"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default="precision.json")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--local-epochs", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    done = json.loads(out.read_text()) if out.is_file() else []
    have = {(d["precision"], d["seed"]) for d in done}
    for seed in args.seeds:
        for precision in ("fp32", "bf16"):
            if (precision, seed) in have:
                continue
            amp = precision == "bf16"
            server = server_settings(epochs=15, steps_per_epoch=10, batch_size=32,
                                     kd_batch_size=32, strat_steps=3, strat_batch_size=8, amp=amp)
            exp = ExperimentConfig(dataset="fmnist_embedded", partition="dirichlet", alpha=0.1,
                                   num_clients=5, seed=seed, cache_dir=args.cache_dir,
                                   experiment="precision",
                                   local=LocalTrainConfig(epochs=args.local_epochs, amp=amp))
            t0 = time.perf_counter()
            tables = run_tables([Run(exp, tuple(configure_methods(METHODS, common=server)),
                                     (Serves("dense", "T1"),))], verbose=False)
            secs = time.perf_counter() - t0
            for r in tables.records:
                done.append({"precision": precision, "seed": seed, "method": r.method,
                             "last": r.last_acc, "best": r.best_acc,
                             "mean_client": r.mean_client_acc, "ensemble": r.ensemble_acc,
                             "run_seconds": round(secs, 1)})
            out.write_text(json.dumps(done, indent=1))
            print(f"seed {seed} {precision}: {secs:.0f} s", flush=True)


if __name__ == "__main__":
    main()
