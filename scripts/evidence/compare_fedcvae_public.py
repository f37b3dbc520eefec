"""FedCVAE and its baselines against FedCVAE's public code on one partition and one budget.

The public code (``ceh-2000/fed_cvae``, commit 444b8c5) runs one whole one-shot experiment per
call of its ``main.py`` (partition, local training, server, test); ofl's ``authors_code``
preset runs the same experiment on the partition the code made (its per-client index lists)
with the same epochs, and the two final test accuracies are printed side by side per method
and seed. Methods, by the code's names: ``fedavg``, ``oneshot`` (FedOneShot),
``fedcvaeens``, ``fedcvaekd``. Settings are FedCVAE Table 1's on FashionMNIST (10 users,
α = 0.01, 50 % of the training set, ``--data_seed 1693``, the code's
``experiments/best_hyperparameters/fashion/*.txt``; ``--num-users`` changes m as Table 2
does); ``--epochs`` reduces each method's local
epochs on both sides alike.

Subcommands:

``setup``
    export the public code from a local git copy (``--mirror``, a bare git directory) into
    ``PUBLIC/code`` and make it run here: ``main.py``'s tensorboard import (unused with
    ``--should_log 0``) and the models' ``torchsummary`` import (unused) become ``None``,
    scikit-learn's ``OneHotEncoder`` (its ``sparse=`` argument is gone from today's
    scikit-learn) a stand-in giving the same float64 one-hot array, ``data.py``'s
    ``int(np.random.choice(..., size=1))`` (an error in numpy 2) takes element 0 of the same
    draw, and after the partition is made ``main.py`` writes
    its index lists into the training set to ``$FEDCVAE_PARTITION_OUT`` when that is set.
    FashionMNIST's four files are unpacked into ``PUBLIC/data/mnist/FashionMNIST/raw``
    (``--fmnist-dir``, default the Debian package's folder), where the code's torchvision
    loader finds them without downloading. ``PUBLIC`` is kept outside this repository;
    nothing of the public code is committed.
``run``
    one (side, method, seed) at a time; a finished one is skipped. ``public``: the code's
    ``main.py`` with ``--seed SEED`` (its one ``torch.manual_seed``), the partition written
    to ``OUT/partition.json`` by the first public run; ``ofl``: ofl's ``authors_code`` clients
    and server of that method on those index lists (checked first against ofl's own
    ``dirichlet_fedcvae`` partition of the same seed), the model seed SEED. Writes
    ``OUT/<side>_<method>_s<seed>.json`` (final test accuracy, wall seconds).
``table``
    per method the two sides' accuracies per seed, their means and standard deviations.

Commands (one thread each; PUBLIC and OUT outside the checkout):

    PYTHONPATH=. python scripts/evidence/compare_fedcvae_public.py setup \\
        --mirror MIRROR --public-dir PUBLIC
    PYTHONPATH=. python scripts/evidence/compare_fedcvae_public.py run --public-dir PUBLIC \\
        --out OUT --sides public ofl --methods fedcvaeens fedcvaekd --seeds 1693 1588 7089 \\
        [--epochs fedcvaeens=5 fedcvaekd=5 fedavg=2 oneshot=3]
    PYTHONPATH=. python scripts/evidence/compare_fedcvae_public.py table --out OUT

MIRROR, a bare git copy of the public code:
``git clone --bare https://github.com/ceh-2000/fed_cvae MIRROR``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _public_code import export_public_code, run_logged

from ofl_core.client_training import train_clients
from ofl_core.data.datasets import load_dataset
from ofl_core.data.partition import Partition, make_partition
from ofl_core.evaluate import accuracy
from ofl_core.experiment import configure_methods
from ofl_core.registry import run_method
from ofl_core.sections.fedcvae_runs import client_config
from ofl_core.server import ServerContext

COMMIT = "444b8c5"
FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")
ALPHA, SAMPLE_RATIO, DATA_SEED = 0.01, 0.5, 1693
# The code's experiments/best_hyperparameters/fashion/<algorithm>.txt (local_LR 0.001, Adam).
PUBLIC_ARGS = {
    "fedavg": ["--local_epochs", "10"],
    "oneshot": ["--local_epochs", "15", "--one_shot_sampling", "all"],
    "fedcvaeens": ["--local_epochs", "25", "--z_dim", "10", "--beta", "1.0",
                   "--classifier_num_train_samples", "5000", "--classifier_epochs", "5",
                   "--uniform_range", "(-3.0,3.0)"],
    "fedcvaekd": ["--local_epochs", "25", "--z_dim", "100", "--beta", "1.0",
                  "--classifier_num_train_samples", "5000", "--classifier_epochs", "5",
                  "--decoder_num_train_samples", "5000", "--decoder_epochs", "10",
                  "--decoder_LR", "0.01", "--uniform_range", "(-2.0,2.0)"],
}
# The code's name → ofl's method (and client kind).
OFL_METHOD = {"fedavg": "fedavg", "oneshot": "fedoneshot", "fedcvaeens": "fedcvae-ens",
              "fedcvaekd": "fedcvae-kd"}
DUMP = '''        visualize=True if args.alpha is not None else False,
    )
'''
DUMP_NEW = DUMP + '''    if os.environ.get("FEDCVAE_PARTITION_OUT"):  # ofl: the users' index lists
        import json as _json
        _base = getattr(d.train_data[0].dataset, "indices", None)
        _lists = [[int(_base[i]) if _base is not None else int(i) for i in s.indices]
                  for s in d.train_data]
        with open(os.environ["FEDCVAE_PARTITION_OUT"], "w") as _fh:
            _json.dump(_lists, _fh)
'''


# scikit-learn's OneHotEncoder(sparse=False, categories=[...]) as the code calls it (today's
# scikit-learn has renamed ``sparse``): a float64 one-hot array, an unknown label an error.
ONE_HOT = """import numpy as _np


class OneHotEncoder:  # ofl: stand-in for scikit-learn's, as one_hot_encode calls it
    def __init__(self, sparse=False, categories=None):
        self.categories = list(categories[0])

    def fit_transform(self, x):
        cols = [self.categories.index(v) for v in x[:, 0].tolist()]
        out = _np.zeros((len(cols), len(self.categories)))
        out[_np.arange(len(cols)), cols] = 1.0
        return out
"""


def setup(args: argparse.Namespace) -> None:
    pub = Path(args.public_dir).resolve()
    stand_ins = {
        "*": [("from torchsummary import summary",
               "summary = None  # ofl: torchsummary only prints model summaries"),
              ("from sklearn.preprocessing import OneHotEncoder", ONE_HOT)],  # utils.py
        # numpy 2 no longer converts a 1-element array with int(); the same draw, indexed
        "data.py": [("size=1)\n                    )  # choose a user",
                     "size=1)[0]\n                    )  # choose a user")],
        "main.py": [("from torch.utils.tensorboard import SummaryWriter",
                     "import os\nSummaryWriter = None  # ofl: unused with --should_log 0"),
                    (DUMP, DUMP_NEW)],
    }
    changed = export_public_code(args.mirror, args.commit, pub / "code", stand_ins)
    raw = pub / "data" / "mnist" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in FMNIST_FILES:
        src = Path(args.fmnist_dir) / f"{name}.gz"
        if not src.exists():
            sys.exit(f"{src} not found; install the Debian package dataset-fashion-mnist or "
                     f"pass --fmnist-dir")
        with gzip.open(src) as fin, (raw / name).open("wb") as fout:
            shutil.copyfileobj(fin, fout)
    print(f"public code at {pub / 'code'} (changed: {', '.join(changed)}); "
          f"FashionMNIST in {raw}")


def epochs_of(args: argparse.Namespace, method: str) -> int:
    default = int(PUBLIC_ARGS[method][PUBLIC_ARGS[method].index("--local_epochs") + 1])
    return args.epoch_map.get(method, default)


def run_public(args: argparse.Namespace, out: Path, method: str, seed: int) -> dict:
    pub = Path(args.public_dir).resolve()
    argv = list(PUBLIC_ARGS[method])
    argv[argv.index("--local_epochs") + 1] = str(epochs_of(args, method))
    cmd = [sys.executable, str(pub / "code" / "main.py"), "--algorithm", method,
           "--dataset", "fashion", "--num_users", str(args.num_users), "--alpha", str(ALPHA),
           "--sample_ratio", str(SAMPLE_RATIO), "--glob_epochs", "1", "--local_LR", "0.001",
           "--use_adam", "1", "--should_log", "0", "--seed", str(seed),
           "--data_seed", str(DATA_SEED), *argv]
    log = out / f"public_{method}_s{seed}.log"
    os.environ["MPLBACKEND"] = "Agg"
    part = out / "partition.json"
    if not part.exists():
        os.environ["FEDCVAE_PARTITION_OUT"] = str(part)
    cwd = os.getcwd()
    os.chdir(pub)  # the code reads its data from the relative root data/mnist
    try:
        secs = run_logged(cmd, args.threads, log)
    finally:
        os.chdir(cwd)
        os.environ.pop("FEDCVAE_PARTITION_OUT", None)
    found = re.findall(r"Server model accuracy was: ([\d.]+)%", log.read_text())
    if not found:
        sys.exit(f"no accuracy in {log}")
    return {"acc": float(found[-1]), "seconds": round(secs, 1)}


def code_partition(out: Path, labels: np.ndarray, num_users: int) -> Partition:
    """The code's index lists as an ofl partition, after comparing them with ofl's own
    ``dirichlet_fedcvae`` partition of the same seed."""
    f = out / "partition.json"
    if not f.exists():
        sys.exit(f"{f} missing: run one public side first (it writes the partition)")
    lists = [np.asarray(ix, dtype=np.int64) for ix in json.loads(f.read_text())]
    if len(lists) != num_users:
        sys.exit(f"{f} has {len(lists)} users, not {num_users}: one --out folder per --num-users")
    ours = make_partition(labels, num_users, "dirichlet_fedcvae", alpha=ALPHA, seed=DATA_SEED,
                          subset=SAMPLE_RATIO)
    same = all(np.array_equal(np.sort(a), np.sort(b))
               for a, b in zip(lists, ours.client_indices, strict=True))
    print(f"the code's partition {'equals' if same else 'DIFFERS from'} ofl's dirichlet_fedcvae "
          f"(seed {DATA_SEED}); client sizes {[len(ix) for ix in lists]}")
    counts = np.stack([np.bincount(labels[ix], minlength=10) for ix in lists])
    return Partition(client_indices=tuple(lists), counts=counts, scheme="dirichlet_fedcvae",
                     seed=DATA_SEED, alpha=ALPHA, subset=SAMPLE_RATIO)


def run_ofl(args: argparse.Namespace, out: Path, method: str, seed: int) -> dict:
    t0 = time.perf_counter()
    ds = load_dataset("fmnist").resized(32)
    part = code_partition(out, ds.y_train.numpy(), args.num_users)
    name = OFL_METHOD[method]
    epochs = epochs_of(args, method)
    if method.startswith("fedcvae"):
        cfg = client_config(name, "fmnist", "authors_code", cvae={"epochs": epochs})
        common = {"dataset": "fmnist"}
    else:
        cfg = client_config(name, "fmnist", "authors_code",
                            local={"epochs": epochs, "amp": None if args.amp == "auto" else False})
        common = {}
    overrides = {"fedavg": {"weighted": True}}  # FedCVAE's code weights FedAvg by n_k
    [(_, mcfg)] = configure_methods([name], ["authors_code"], common=common, overrides=overrides)
    ups = train_clients(ds, part, cfg, seed, cache=None, workers=1, progress=False)
    ctx = ServerContext(10, 1, 32, seed=seed, progress=False,
                        evaluate=lambda m: accuracy(m, ds.x_test, ds.y_test))
    res = run_method(name, ups, mcfg, ctx)
    acc = res.last_acc if res.last_acc is not None else accuracy(res.model, ds.x_test, ds.y_test)
    return {"acc": round(float(acc), 2), "seconds": round(time.perf_counter() - t0, 1)}


def run(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for method in args.methods:
        for seed in args.seeds:
            for side in args.sides:
                f = out / f"{side}_{method}_s{seed}.json"
                if f.exists():
                    print(f"{f.name}: done")
                    continue
                torch.set_num_threads(args.threads)
                one = run_public if side == "public" else run_ofl
                row = one(args, out, method, seed)
                row.update(side=side, method=method, seed=seed, epochs=epochs_of(args, method),
                           num_users=args.num_users,
                           amp=args.amp if side == "ofl" else "off")
                f.write_text(json.dumps(row, indent=1))
                print(f"{side} {method} seed {seed}: {row['acc']:.2f} in {row['seconds']:.0f} s",
                      flush=True)


def table(args: argparse.Namespace) -> None:
    rows = [json.loads(f.read_text()) for f in sorted(Path(args.out).glob("*_s*.json"))]
    if not rows:
        sys.exit(f"no runs in {args.out}")
    for method in PUBLIC_ARGS:
        got = [r for r in rows if r["method"] == method]
        if not got:
            continue
        seeds = sorted({r["seed"] for r in got})
        by = {(r["side"], r["seed"]): r for r in got}
        print(f"{method} (m = {got[0].get('num_users', 10)}, {got[0]['epochs']} local epochs)")
        for side in ("public", "ofl"):
            accs = [by[side, s]["acc"] for s in seeds if (side, s) in by]
            if not accs:
                continue
            cells = "  ".join(f"{by[side, s]['acc']:6.2f}" if (side, s) in by else "     —"
                              for s in seeds)
            sd = f" ± {statistics.stdev(accs):.2f}" if len(accs) > 1 else ""
            secs = statistics.mean(by[side, s]["seconds"] for s in seeds if (side, s) in by)
            print(f"  {side:6s} seeds {seeds}: {cells}   mean {statistics.mean(accs):.2f}{sd}"
                  f"   {secs:.0f} s a run")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--mirror", required=True, help="a bare git copy of ceh-2000/fed_cvae")
    s.add_argument("--commit", default=COMMIT)
    s.add_argument("--public-dir", required=True)
    s.add_argument("--fmnist-dir", default="/usr/share/datasets/fashion-mnist")
    r = sub.add_parser("run")
    r.add_argument("--public-dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--sides", nargs="+", default=["public", "ofl"], choices=["public", "ofl"])
    r.add_argument("--methods", nargs="+", default=list(PUBLIC_ARGS), choices=list(PUBLIC_ARGS))
    r.add_argument("--seeds", nargs="+", type=int, default=[1693, 1588])
    r.add_argument("--num-users", type=int, default=10,
                   help="m (default 10, Table 1's; Table 2 also has 5, 20, 50)")
    r.add_argument("--epochs", nargs="*", default=[], metavar="METHOD=N",
                   help="local epochs per method on both sides (default: the code's)")
    r.add_argument("--amp", choices=["auto", "off"], default="auto",
                   help="ofl's baseline clients under bfloat16 autocast where native (auto, "
                        "the notebooks' default) or in float32 (off, as the code)")
    t = sub.add_parser("table")
    t.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        args.epoch_map = {}
        for item in args.epochs:
            key, sep, value = item.partition("=")
            if not sep or key not in PUBLIC_ARGS or not value.isdigit():
                ap.error(f"--epochs takes METHOD=N with METHOD one of {list(PUBLIC_ARGS)} "
                         f"(got {item!r})")
            args.epoch_map[key] = int(value)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    {"setup": setup, "run": run, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
