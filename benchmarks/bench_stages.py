"""The three standard stages end to end, in absolute seconds, against the authors' public code.

The authors' figures (measured before this benchmark existed: their code run on this 2-core CPU
at one torch thread, same FashionMNIST partition and budget):

- local training, DENSE Dirichlet β = 0.1, seed 1, 5 × ``cnn_mnist``, 20 epochs with DENSE
  code's local preset (BN eval after epoch 1), batch 128: **418 s** (their time includes a
  test pass after every epoch and 4 DataLoader worker processes);
- DENSE server, 30 epochs × 30 generator steps, batch 128, KD from the pool: **685 s**;
- FedCVAE-Ens end to end at FedCVAE's FMNIST Table 1 settings (α = 0.01, m = 10, 50 % subset
  at 32 px, seed 1693): **~374 s**.

Each stage runs the library as ``run_tables``/``run_method`` do, clients cold (a fresh
temporary cache). Run one stage at a time on an idle machine:

    OMP_NUM_THREADS=1 python benchmarks/bench_stages.py --stage local --threads 1
    OMP_NUM_THREADS=1 python benchmarks/bench_stages.py --stage dense --threads 1
    OMP_NUM_THREADS=1 python benchmarks/bench_stages.py --stage fedcvae --threads 1
    python benchmarks/bench_stages.py --stage local --threads 2
    python benchmarks/bench_stages.py --stage dense --device cuda   # on a GPU

(``dense`` trains its clients first, untimed, with the library's default local precision, or
loads them from ``--cache-dir``; there ``--precision`` sets the server's arithmetic and
``--seed`` the server seed, so that

    for s in 1 2 3; do for p in fp32 bf16; do OMP_NUM_THREADS=1 python \
      benchmarks/bench_stages.py --stage dense --precision $p --seed $s --cache-dir C; done; done

gives the float32-vs-bfloat16 accuracy check on the same clients; for ``fedcvae``,
``--precision`` sets the CVAE clients' arithmetic and ``--seed`` the model seed, the partition
staying that of seed 1693, so that ``for s in 1693 1588 7089`` gives the paper's three model
seeds.) Options: ``--precision`` (``default``: the library's defaults, i.e. bfloat16 where the
CPU has it natively for local training and DENSE's server, float32 for the CVAE clients;
``fp32`` or ``bf16``), ``--trainer`` (grouped or sequential client training), ``--tiny``
(each stage at toy size — 5 % of the data, one epoch, a few server steps — to check the
code path, e.g. scripts/gpu_check.sh ``--tiny``; its times compare with nothing).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import (
    ExperimentConfig,
    configure_methods,
    method_config,
    setup_experiment,
)
from ofl_core.precision import resolve_amp
from ofl_core.registry import run_method

AUTHORS = {"local": 418.0, "dense": 685.0, "fedcvae": 374.0}
#: ``--tiny``: the stages at toy size (set by main)
TINY = False


def local_amp(precision: str) -> bool | str:
    """Local training's ``amp`` for ``--precision`` ("default" = the library's "auto")."""
    return {"default": "auto", "fp32": False, "bf16": True}[precision]


def server_amp(precision: str) -> dict[str, bool]:
    """A server method's ``amp`` override for ``--precision`` (none for "default": the
    method's own default)."""
    return {} if precision == "default" else {"amp": precision == "bf16"}


def dense_experiment(cache_dir: str, precision: str, device: str) -> ExperimentConfig:
    local = LocalTrainConfig.for_preset("authors_code", epochs=1 if TINY else 20,
                                        batch_size=128, amp=local_amp(precision))
    return ExperimentConfig(dataset="fmnist", partition="dirichlet", alpha=0.1, num_clients=5,
                            seed=1, local=local, cache_dir=cache_dir, experiment="bench",
                            device=device, subset=0.05 if TINY else 1.0)


def stage_local(cache_dir: str, precision: str, trainer: str, seed: int,
                device: str) -> tuple[float, str]:
    from ofl_core.client_training import train_clients
    from ofl_core.data.partition import make_partition
    from ofl_core.experiment import load_experiment_data

    exp = dense_experiment(cache_dir, precision, device)
    ds = load_experiment_data(exp)
    part = make_partition(ds.y_train.numpy(), exp.num_clients, exp.partition, alpha=exp.alpha,
                          seed=exp.seed, subset=exp.subset)
    t0 = time.perf_counter()
    ups = train_clients(ds, part, exp.local, exp.seed, cache=None, workers=1, progress=False,
                        trainer=trainer, device=device)
    secs = time.perf_counter() - t0
    return secs, f"{len(ups)} clients, sizes {part.sizes.tolist()}"


def stage_dense(cache_dir: str, precision: str, trainer: str, seed: int,
                device: str) -> tuple[float, str]:
    # the clients always as the library trains them by default, so that float32 and bfloat16
    # servers distil the same teachers; ``precision`` is the server's
    exp = dense_experiment(cache_dir, "default", device)
    setup = setup_experiment(exp)  # clients trained (untimed) or loaded from the cache
    # the authors' 685 s used batch 128 for the synthetic and the KD batches
    cfg = method_config("dense", "authors_code", epochs=2 if TINY else 30,
                        steps_per_epoch=2 if TINY else 30, batch_size=128, kd_batch_size=128,
                        **server_amp(precision))
    with tempfile.TemporaryDirectory() as servers:
        # checkpoints are written as in a real run, but to a fresh folder: never resumed
        ctx = replace(setup.context(seed=seed), cache_dir=servers)
        t0 = time.perf_counter()
        res = run_method("dense", setup.uploads, cfg, ctx)
        secs = time.perf_counter() - t0
    return secs, f"server seed {seed}: last {res.curve[-1]:.2f} best {max(res.curve):.2f} " \
                 f"(ensemble {setup.ensemble_acc:.2f})"


def stage_fedcvae(cache_dir: str, precision: str, trainer: str, seed: int,
                  device: str) -> tuple[float, str]:
    from ofl_core.sections.fedcvae_runs import fedcvae_data_settings, fedcvae_runs
    from ofl_core.tables import Serves, run_tables

    # partition seed 1693 as in the paper's Table 1 runs; ``seed`` = the model seed
    data = fedcvae_data_settings("fmnist")
    if TINY:
        data["subset"] = 0.05
    exp = ExperimentConfig(dataset="fmnist", partition="dirichlet_fedcvae", alpha=0.01,
                           num_clients=10, seed=seed, cache_dir=cache_dir, experiment="bench",
                           device=device, **data)
    cvae = {} if precision == "default" else {"amp": precision == "bf16"}
    server = {"dataset": "fmnist"}
    if TINY:
        cvae["epochs"] = 1
        server.update(num_samples=500, classifier_epochs=1)
    t0 = time.perf_counter()
    tables = run_tables(fedcvae_runs(exp, configure_methods(["fedcvae-ens"], common=server),
                                     [Serves("fedcvae", "T1")], cvae=cvae, partition_seed=1693),
                        verbose=False)
    secs = time.perf_counter() - t0
    rec = tables.records[0]
    return secs, f"model seed {seed}: last {rec.last_acc:.2f} best {rec.best_acc:.2f}"


def resolved_precision(args: argparse.Namespace) -> str:
    """What ``--precision`` meant on this machine for the stage, e.g. ``server bf16``."""
    if args.stage == "fedcvae":
        from ofl_core.fedcvae.clients import CVAETrainConfig

        amp = CVAETrainConfig().amp if args.precision == "default" else args.precision == "bf16"
        return f"CVAE clients {'bf16' if resolve_amp(amp, args.device) else 'fp32'}, server fp32"
    if args.stage == "local":
        return f"local {'bf16' if resolve_amp(local_amp(args.precision), args.device) else 'fp32'}"
    amp = server_amp(args.precision).get("amp", method_config("dense", "authors_code").amp)
    return f"clients local default, server {'bf16' if resolve_amp(amp, args.device) else 'fp32'}"


STAGES = {"local": stage_local, "dense": stage_dense, "fedcvae": stage_fedcvae}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stage", choices=sorted(STAGES), required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", default="default", choices=("default", "fp32", "bf16"),
                    help="default: the library's defaults (bfloat16 where native for local "
                    "training and DENSE's server); fp32 / bf16: local training (the local "
                    "stage), DENSE's server (the dense stage) or the CVAE clients (the fedcvae "
                    "stage) in that precision")
    ap.add_argument("--trainer", default="auto", choices=("auto", "grouped", "sequential"))
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 … (default cpu)")
    ap.add_argument("--seed", type=int, default=None,
                    help="server seed of the dense stage (default 1; its clients stay those of "
                    "seed 1), model seed of the fedcvae stage (default 1693, the partition's)")
    ap.add_argument("--cache-dir", default=None, help="client cache (default: a fresh one)")
    ap.add_argument("--tiny", action="store_true", help="toy size: checks the code path only")
    args = ap.parse_args()
    global TINY
    TINY = args.tiny
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        seed = args.seed if args.seed is not None else (1693 if args.stage == "fedcvae" else 1)
        secs, note = STAGES[args.stage](args.cache_dir or tmp, args.precision, args.trainer,
                                        seed, args.device)
    peer = AUTHORS[args.stage]
    if TINY:
        print(f"{args.stage} (tiny): {secs:.1f} s on {args.device}, trainer {args.trainer}, "
              f"precision {args.precision} ({resolved_precision(args)}); {note}")
        return
    # the authors' figures are CPU times: against a GPU run a ratio would be no comparison
    peer_note = (f"authors' code {peer:.0f} s → {peer / secs:.2f}×" if args.device == "cpu"
                 else f"authors' code not run on {args.device} (their {peer:.0f} s is a CPU "
                      f"time, no peer for this run)")
    print(f"{args.stage}: {secs:.1f} s on {args.device} at {args.threads} thread(s)"
          f", precision {args.precision} ({resolved_precision(args)}); {peer_note} ({note})")


if __name__ == "__main__":
    main()
