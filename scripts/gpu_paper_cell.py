"""One paper-scale cell end to end, timed per stage, with peak GPU memory: DENSE Table 1,
FashionMNIST, Dirichlet α = 0.1, seed 1, 5 × ``cnn_mnist`` clients × 200 local epochs (the
paper's local training), DENSE's ``paper`` preset (200 server epochs, T_G = 30, batch 128) —
the cell that ``results/grids/dense_table1_fmnist.yaml`` runs through the main_tables notebook,
here through the library directly (no notebook machinery needed on the GPU machine).

    python scripts/gpu_paper_cell.py --out OUTDIR --device cuda [--data-root D] [--cache-dir C]
    python scripts/gpu_paper_cell.py --out OUTDIR --device cpu --tiny      # toy size

Writes, each as soon as it is known (a run stopped by its time cap leaves what it reached):
``OUTDIR/paper_cell.json`` (settings, machine, each stage's wall time and peak GPU memory,
the record), ``OUTDIR/paper_cell_epochs.jsonl`` (DENSE's test accuracy after each server epoch,
with the seconds since the server started) and ``OUTDIR/paper_cell_records.json`` (the
record, as ``ofl_core.results.record`` writes it). ``--tiny``: 5 % of the training set, 1 local
epoch, 2 server epochs of 2 steps at batch 32 — the same code path in seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file from anywhere, without an install
    sys.path.insert(0, str(ROOT))

from ofl_core.clients import LocalTrainConfig  # noqa: E402
from ofl_core.experiment import (  # noqa: E402
    ExperimentConfig,
    load_experiment_data,
    method_config,
    setup_experiment,
)
from ofl_core.registry import run_method  # noqa: E402
from ofl_core.results import record  # noqa: E402


class Stages:
    """Wall time and peak GPU memory of each stage, written to ``path`` after each one."""

    def __init__(self, path: Path, info: dict, device: str) -> None:
        self.path, self.info, self.cuda = path, info, device.startswith("cuda")
        self.info["stages"] = []
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.info, indent=1, default=str))
        os.replace(tmp, self.path)

    def run(self, name: str, fn):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        entry = {"stage": name, "status": "running"}
        self.info["stages"].append(entry)
        self.write()
        t0 = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize()
            entry["peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            entry["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        entry["status"] = "done"
        self.write()
        print(f"{name}: {entry['seconds']} s" + (
            f", peak {entry['peak_allocated_mib']} MiB allocated" if self.cuda else ""),
            flush=True)
        return out


def machine(device: str) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cpu_threads": torch.get_num_threads(), "host": platform.node()}
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(torch.device(device))
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1),
                    cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                    bf16_native=torch.cuda.is_bf16_supported(including_emulation=False),
                    cudnn_conv_fp32=torch.backends.cudnn.conv.fp32_precision,
                    matmul_fp32=torch.backends.cuda.matmul.fp32_precision)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for the JSON outputs")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:1, cpu, auto")
    ap.add_argument("--tiny", action="store_true", help="toy size (the same code path)")
    ap.add_argument("--data-root", default=None, help="FashionMNIST's data root "
                    "(default: $OFL_DATA_ROOT, ~/.cache/ofl/data, the Debian package)")
    ap.add_argument("--cache-dir", default=None, help="client cache (default OUTDIR/cache)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    local_epochs, subset = (1, 0.05) if args.tiny else (200, 1.0)
    server = dict(epochs=2, steps_per_epoch=2, batch_size=32, kd_batch_size=32) \
        if args.tiny else {}
    cfg = ExperimentConfig(
        dataset="fmnist", partition="dirichlet", alpha=0.1, num_clients=5, seed=1,
        subset=subset, local=LocalTrainConfig(arch="cnn_mnist", epochs=local_epochs),
        data_root=args.data_root, cache_dir=args.cache_dir or str(out / "cache"),
        device=args.device, experiment="main_tables", paper="dense", table="T1",
        progress=False)
    dense = method_config("dense", "paper", **server)
    info = {"cell": "DENSE T1, fmnist, alpha=0.1, seed 1, 5 x cnn_mnist",
            "tiny": args.tiny, "local": dataclasses.asdict(cfg.local),
            "dense": dataclasses.asdict(dense), "machine": machine(args.device)}
    stages = Stages(out / "paper_cell.json", info, args.device)

    ds = stages.run("data", lambda: load_experiment_data(cfg))
    setup = stages.run("clients (train 5, evaluate)", lambda: setup_experiment(cfg, dataset=ds))
    info.update(device=setup.device, client_accs=setup.client_accs,
                ensemble_acc=setup.ensemble_acc)
    stages.write()

    epochs_log = out / "paper_cell_epochs.jsonl"
    epochs_log.unlink(missing_ok=True)
    ctx = setup.context()
    test_accuracy = ctx.evaluate
    t_server = time.perf_counter()

    def evaluate(model: torch.nn.Module) -> float:
        acc = test_accuracy(model)
        with open(epochs_log, "a") as f:
            f.write(json.dumps({"acc": acc, "seconds": round(time.perf_counter() - t_server, 2)})
                    + "\n")
        return acc

    ctx = dataclasses.replace(ctx, evaluate=evaluate)

    def server_stage():
        nonlocal t_server
        t_server = time.perf_counter()
        return run_method("dense", setup.uploads, dense, ctx)

    res = stages.run("dense server (paper preset)", server_stage)
    wall = stages.info["stages"][-1]["seconds"]
    last = res.last_acc if res.last_acc is not None else test_accuracy(res.model)
    best = res.best_acc if res.best_acc is not None else max([last, *res.curve])
    rec = setup.record("dense", dense, last, best, wall_time_s=wall)
    record([rec], out / "paper_cell_records.json")
    info["record"] = rec.to_dict()
    stages.write()
    print(f"DENSE last {rec.last_acc:.2f} best {rec.best_acc:.2f} (ensemble "
          f"{rec.ensemble_acc}; paper: DENSE T1 FMNIST α=0.1), precision {rec.precision}",
          flush=True)


if __name__ == "__main__":
    main()
