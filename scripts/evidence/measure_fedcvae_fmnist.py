"""FedCVAE FMNIST at the paper's settings (m=10, 50% subset, Tables 3/4), one α per call.

Needs the full FashionMNIST (README "Data"). Appends JSON lines to $OFL_MEASURE_OUT (default
./fedcvae_fmnist_results.jsonl), each with its α and preset. Measured on 2 CPU cores at
α = 0.01, paper preset (last-epoch accuracy, %):

    seed   FedCVAE-Ens  FedCVAE-KD  FedAvg  FedOneShot  decoder param-avg
    1693   75.75        71.44       35.90   40.94       10.00
    1588   76.97        71.23       27.43   39.94        9.97
    7089   77.30        73.35       25.11   39.61       10.00
    mean   76.67        72.01       29.48   40.16
    paper  76.62        69.97       45.85   37.63      (FedCVAE Table 1, FMNIST α = 0.01)

About 20 min per seed on an idle CPU (Ens clients 339 s + server 47 s; KD clients 365 s +
server 76 s; FedAvg clients 160 s; FedOneShot clients 203 s). The ``authors_code`` baselines
train their own clients (no conv ReLU; FedOneShot's clients initialised each on its own), so
expect about the baselines' time again (not yet timed at full scale).

    python scripts/evidence/measure_fedcvae_fmnist.py SEED [SEED ...] --alpha 0.01
        [--presets paper authors_code] [--only-cvae | --only-baselines]
        [--local-epochs N] [--cvae-epochs N]      # reduced epochs: a smoke test only
        [--amp auto|off] [--baselines fedavg]     # off: float32 baseline clients
        [--cvae-amp on|off] [--cvae-kinds fedcvae-kd]  # CVAE clients' precision, which ones
        [--cvae-presets CLIENTS SERVER] [--server-set KEY=VALUE ...]
        [--cvae-shared-init]                      # every client CVAE from one initialisation
        [--param-avg-only]                        # Table 6's param-avg alone (no KD server)
        [--label-noise GAMMA MODE]                # Table 8: noise on the uploaded label counts
        [--subset FRACTION]                       # Table 7: the share of the training set

``--cvae-presets authors_code paper`` runs FedCVAE-Ens/-KD on the authors' code's decoders with
the paper's server (and the reverse), ``--server-set allocation=equal conv_relu=false`` changes
single server fields on top: this separates which of the code's differences moves a number
(client CVAE: the encoder without the label; server: proportional allocation, no ReLU after
the classifier's convolutions). The decoders come from the client cache when a run trained
them before (e.g. the shipped Table 1 runs). ``--label-noise 0.1 std`` adds Table 8's noise
ε_c ~ N(0, γ·n_k) to the uploaded class counts (MODE ``variance``: γ·n_k is the variance, as
the paper says; ``std``: its standard deviation); the noise is drawn at upload, so the same
cached decoders serve every γ.

The partition seed is fixed at 1693 (the authors' data_seed); SEED is the model/training seed,
as in the paper's "seeded parameter initializations". The shipped measurements use 1693 1588
7089 and α ∈ {0.001, 0.01, 0.05} (docs/decisions/paper-gaps.md#fedcvae-t1-a0001).
FedCVAE-Ens/-KD run under the paper preset; FedAvg and FedOneShot under every ``--presets``
(FedAvg weighted by n_k under both, as FedCVAE's code does).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from ofl_core.client_training import train_clients
from ofl_core.data.datasets import load_dataset
from ofl_core.data.partition import make_partition
from ofl_core.evaluate import accuracy
from ofl_core.experiment import configure_methods
from ofl_core.presets import PRESETS
from ofl_core.registry import run_method
from ofl_core.sections.fedcvae_runs import client_config
from ofl_core.server import ServerContext
from ofl_core.upload_cache import UploadCache

PARTITION_SEED = 1693
ALPHAS = (0.001, 0.01, 0.05)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seeds", type=int, nargs="+", help="model/training seeds")
    p.add_argument("--alpha", type=float, default=0.01, choices=ALPHAS,
                   help="Dirichlet α of FedCVAE Table 1 (default 0.01)")
    p.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS,
                   help="presets of the FedAvg/FedOneShot baselines (default: both)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--only-cvae", action="store_true", help="FedCVAE-Ens/-KD only")
    which.add_argument("--only-baselines", action="store_true", help="FedAvg/FedOneShot only")
    p.add_argument("--local-epochs", type=int, default=None,
                   help="baseline client epochs (default: Table 4's; fewer = a smoke test)")
    p.add_argument("--cvae-epochs", type=int, default=None,
                   help="CVAE client epochs (default: Table 4's; fewer = a smoke test)")
    p.add_argument("--baselines", nargs="+", default=["fedavg", "fedoneshot"],
                   choices=["fedavg", "fedoneshot"], help="which baselines (default: both)")
    p.add_argument("--cvae-presets", nargs=2, metavar=("CLIENTS", "SERVER"),
                   default=["paper", "paper"], choices=PRESETS,
                   help="presets of FedCVAE's client CVAEs and of its servers (default: paper "
                        "paper)")
    p.add_argument("--server-set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="FedCVAE-Ens/-KD server fields to override, e.g. allocation=equal "
                        "conv_relu=false (values read as JSON where they parse)")
    p.add_argument("--param-avg-only", action="store_true",
                   help="run only Table 6's param-avg on the FedCVAE-KD decoders (no KD server)")
    p.add_argument("--cvae-shared-init", action="store_true",
                   help="every client CVAE starts from the same weights (CVAETrainConfig."
                        "shared_init; the authors' code's Table 6 script sets "
                        "should_initialize_same=1)")
    p.add_argument("--subset", type=float, default=0.5,
                   help="fraction of the training set the clients share (Table 7: 0.05, 0.1, "
                        "0.25, 0.5; FedCVAE's default 0.5)")
    p.add_argument("--label-noise", nargs=2, metavar=("GAMMA", "MODE"), default=None,
                   help="Table 8's label-count noise on the decoders' uploads: γ and "
                        "variance|std")
    p.add_argument("--cvae-amp", choices=["default", "on", "off"], default="default",
                   help="CVAE clients under bfloat16 autocast (on) or in float32 (off); "
                        "default: the library's")
    p.add_argument("--cvae-kinds", nargs="+", default=["fedcvae-ens", "fedcvae-kd"],
                   choices=["fedcvae-ens", "fedcvae-kd"], help="which CVAE clients to train")
    p.add_argument("--amp", choices=["auto", "off"], default="auto",
                   help="baseline clients under bfloat16 autocast where native (auto, the "
                        "notebooks' default) or in float32 (off)")
    args = p.parse_args(argv)
    args.server_overrides = server_overrides(p, args.server_set)
    if not 0 < args.subset <= 1:
        p.error(f"--subset takes a fraction in (0, 1] (got {args.subset})")
    args.noise = {}
    if args.label_noise is not None:
        gamma, mode = args.label_noise
        try:
            g = float(gamma)
        except ValueError:
            g = -1.0
        if g < 0 or mode not in ("variance", "std"):
            p.error("--label-noise takes GAMMA MODE: a number >= 0 and variance or std "
                    f"(got {gamma} {mode})")
        args.noise = {"label_noise_gamma": g, "label_noise": mode}
    return args


def server_overrides(p: argparse.ArgumentParser, items: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings as a dict (JSON values: true, 5000, "equal"; else the string)."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--server-set takes KEY=VALUE (got {item!r})")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def groups(args: argparse.Namespace) -> list[tuple[str, str, object, list[tuple[str, object]]]]:
    """(client kind, preset, client config, [(method, method config)]) to run, in order."""
    out = []
    if not args.only_baselines:
        cvae = {"epochs": args.cvae_epochs,
                **({} if args.cvae_amp == "default" else {"amp": args.cvae_amp == "on"}),
                **({"shared_init": True} if args.cvae_shared_init else {}), **args.noise}
        clients, server = args.cvae_presets
        for kind, methods in (("fedcvae-ens", ["fedcvae-ens"]),
                              ("fedcvae-kd", (["fedcvae-kd"] if not args.param_avg_only else [])
                               + ["param-avg"])):
            if kind not in args.cvae_kinds:
                continue
            mcfgs = configure_methods(methods, [server], common={"dataset": "fmnist"},
                                      overrides={m: args.server_overrides for m in methods})
            out.append((kind, clients, client_config(kind, "fmnist", clients, cvae=cvae),
                        mcfgs))
    if not args.only_cvae:
        local = {"epochs": args.local_epochs, "amp": None if args.amp == "auto" else False}
        weighted = {"fedavg": {"weighted": True}}  # FedCVAE's code weights by n_k (both presets)
        for preset in args.presets:
            for name in args.baselines:
                mcfgs = configure_methods([name], [preset], overrides=weighted)
                out.append((name, preset, client_config(name, "fmnist", preset, local=local),
                            mcfgs))
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.set_num_threads(1)
    out = open(os.environ.get("OFL_MEASURE_OUT", "fedcvae_fmnist_results.jsonl"), "a")

    def log(**kw: object) -> None:
        line = json.dumps({"alpha": args.alpha, "subset": args.subset, **kw})
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    t0 = time.perf_counter()
    ds = load_dataset("fmnist").resized(32)
    part = make_partition(ds.y_train.numpy(), 10, "dirichlet_fedcvae", alpha=args.alpha,
                          seed=PARTITION_SEED, subset=args.subset)
    log(event="data", sizes=part.sizes.tolist(), secs=round(time.perf_counter() - t0, 1))
    cache = UploadCache()
    for seed in args.seeds:
        ctx = ServerContext(10, 1, 32, seed=seed, progress=False,
                            evaluate=lambda m: accuracy(m, ds.x_test, ds.y_test))
        for kind, preset, clients, methods in groups(args):
            t = time.perf_counter()
            ups = train_clients(ds, part, clients, seed, cache=cache, workers="auto",
                                progress=False)
            log(event="clients", kind=kind, seed=seed, preset=preset,
                epochs=clients.epochs, amp=getattr(clients, "amp", None),
                secs=round(time.perf_counter() - t, 1))
            for name, mcfg in methods:
                t = time.perf_counter()
                res = run_method(name, ups, mcfg, ctx)
                last = (res.last_acc if res.last_acc is not None
                        else accuracy(res.model, ds.x_test, ds.y_test))
                best = res.best_acc if res.best_acc is not None else last
                server_set = args.server_overrides if kind.startswith("fedcvae") else {}
                log(event="result", method=name, seed=seed, preset=mcfg.preset,
                    clients=preset, epochs=clients.epochs, amp=getattr(clients, "amp", None),
                    server_set=server_set,
                    shared_init=getattr(clients, "shared_init", None),
                    label_noise=[getattr(clients, "label_noise_gamma", None),
                                 getattr(clients, "label_noise", None)],
                    last=last, best=best, curve=res.curve, secs=round(time.perf_counter() - t, 1))
    log(event="done", total_secs=round(time.perf_counter() - t0, 1))


if __name__ == "__main__":
    main()
