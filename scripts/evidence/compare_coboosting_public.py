"""Co-Boosting's server loop against its public code on identical clients and partition.

The public code (``rong-dai/Co-Boosting``, commit b95d715) trains m LeNet-5 clients on its own
FashionMNIST Dirichlet partition (``fl_pretrain.py``: 32 px, inputs (x − 0.5)/0.5); both servers
then distil those same clients under one budget — the public ``datafree_kd.py --method
co_boosting`` and ofl's ``coboosting`` ``authors_code`` preset (``input_norm="half"``, the
pool floored to 8 bits) — and their per-epoch test curves are printed side by side.
Subcommands:

``setup``
    export the public code from a local git copy (``--mirror``, a bare git directory) into
    ``PUBLIC/code`` and make it run on this CPU: its hard-coded ``/gdata/dairong`` root becomes
    ``$COB_ROOT`` (one folder per run), ``.cuda()`` a no-op, ``.to('cuda')`` the CPU, data
    loaders without worker processes; ``termcolor`` and ``torchvision.models.utils`` (gone
    from today's torchvision) are stand-ins made by the launcher. Writes
    ``PUBLIC/run_public.py``, the launcher (``--root``, ``--threads``, ``--partition-out``: the
    index lists ``partition_data`` returned, as JSON).
    ``PUBLIC`` is kept outside this repository; nothing of the public code is committed.
``clients``
    train the clients with the public code (``fl_pretrain.py --model lenet``), keep their state
    dicts (``OUT/clients.pkl``) and the partition's index lists (``OUT/partition.json``), and
    check the lists against ofl's ``dirichlet_client`` partition of the same seed.
``run``
    the servers, one (side, seed) at a time; a finished one is skipped. ``public``: the public
    code with the given server seed; ``ofl``: ofl's Co-Boosting (``--preset``, default
    ``authors_code``) on the same clients, mapped onto ofl's ``lenet`` (checked: identical logits
    on a test batch), on the test set resized as the code resizes it (PIL bilinear). Writes
    ``OUT/<side>_s<seed>.json`` (the curve, the wall time, ofl's A_w accuracy and w).
``table``
    both curves per seed, every ``--every`` epochs and at the last, and their means.

Commands (one thread each, one heavy process at a time; PUBLIC and OUT outside the checkout):

    PYTHONPATH=. python scripts/evidence/compare_coboosting_public.py setup \\
        --mirror Co-Boosting.git --public-dir PUBLIC   # git clone --bare https://github.com/rong-dai/Co-Boosting
    PYTHONPATH=. python scripts/evidence/compare_coboosting_public.py clients \\
        --public-dir PUBLIC --out OUT [--local-epochs 100 --beta 0.6 --num-users 10 --seed 42]
    PYTHONPATH=. python scripts/evidence/compare_coboosting_public.py run --public-dir PUBLIC \\
        --out OUT --sides public ofl --seeds 1 2 --epochs 20
    PYTHONPATH=. python scripts/evidence/compare_coboosting_public.py table --out OUT
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _public_code import (
    common_parser,
    export_public_code,
    load_runs,
    print_curves,
    run_logged,
    run_sides,
)

import ofl_core
from ofl_core.coboosting.server import CoBoostingConfig
from ofl_core.data.datasets import ImageDataset, load_dataset
from ofl_core.data.partition import make_partition
from ofl_core.evaluate import accuracy
from ofl_core.registry import run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload, build_from_upload

REPO = Path(ofl_core.__file__).resolve().parents[1]
#: text replacements that make the public code run on a CPU, per file ("*" = every .py file)
STAND_INS: dict[str, list[tuple[str, str]]] = {
    "*": [("'/gdata/dairong", "os.environ['COB_ROOT'] + '"),
          ("num_workers=4", "num_workers=0"), ("pin_memory=True", "pin_memory=False"),
          (".to('cuda')", ".to('cpu')")],
}
LAUNCHER = '''"""Run Co-Boosting's public code (patched copy in code/) on a CPU; written by
scripts/evidence/compare_coboosting_public.py of the ofl repository.

    python run_public.py --root DIR --threads N [--partition-out F] -- SCRIPT.py <arguments>
"""
import argparse
import importlib.util
import json
import os
import runpy
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ap = argparse.ArgumentParser()
ap.add_argument("--root", required=True)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--partition-out")
ap.add_argument("rest", nargs=argparse.REMAINDER)
a = ap.parse_args()
rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
os.environ["COB_ROOT"] = str(Path(a.root).resolve())
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
sys.path.insert(0, str(HERE / "code"))
import torch  # noqa: E402

torch.set_num_threads(a.threads)
torch.Tensor.cuda = lambda self, *args, **kwargs: self
torch.nn.Module.cuda = lambda self, *args, **kwargs: self
torch.cuda.empty_cache = lambda: None
# modules the code imports that this environment lacks or moved: stand-ins
termcolor = types.ModuleType("termcolor")
termcolor.colored = lambda text, *args, **kwargs: text
sys.modules.setdefault("termcolor", termcolor)
import torch.hub  # noqa: E402

tv_utils = types.ModuleType("torchvision.models.utils")
tv_utils.load_state_dict_from_url = torch.hub.load_state_dict_from_url
sys.modules["torchvision.models.utils"] = tv_utils
if a.partition_out:
    import utils_fl  # noqa: E402

    _partition = utils_fl.partition_data

    def partition_data(*args, **kwargs):
        out = _partition(*args, **kwargs)
        Path(a.partition_out).write_text(json.dumps(
            {str(k): [int(i) for i in v] for k, v in out[2].items()}))
        return out

    utils_fl.partition_data = partition_data
os.chdir(HERE / "code")
script = str(HERE / "code" / rest[0])
sys.argv = [script, *rest[1:]]
runpy.run_path(script, run_name="__main__")
'''


def setup(args: argparse.Namespace) -> None:
    """Export the public code into PUBLIC/code with the CPU stand-ins; write the launcher."""
    pub = Path(args.public_dir)
    code = pub / "code"
    changed = export_public_code(args.mirror, args.commit, code, STAND_INS)
    (pub / "run_public.py").write_text(LAUNCHER)
    print(f"public code {args.commit} in {code}; stand-ins in {', '.join(changed)}")


def public_root(root: Path) -> Path:
    """A run folder for the public code: ``$COB_ROOT`` with its data folder linked to
    FashionMNIST's files (torchvision's layout, from ofl's data root)."""
    raw = root / "fedsam" / "Data" / "Raw"
    raw.mkdir(parents=True, exist_ok=True)
    link = raw / "FashionMNIST"
    if not link.exists():
        load_dataset("fmnist")  # unpacks the files into ofl's data root when needed
        from ofl_core.data.datasets import default_data_root
        link.symlink_to(default_data_root() / "FashionMNIST")
    return root


def launch(pub: Path, root: Path, threads: int, argv: list[str], log: Path,
           partition_out: Path | None = None) -> float:
    cmd = [sys.executable, str(pub / "run_public.py"), "--root", str(root), "--threads",
           str(threads), *(["--partition-out", str(partition_out)] if partition_out else []),
           "--", *argv]
    return run_logged(cmd, threads, log)


def fl_model_id(a: argparse.Namespace) -> str:
    """The public code's name of a client set (``fl_pretrain.py``'s ``args.identity``)."""
    return (f"fmnist_clients{a.num_users}_dir{a.beta}_sig0.0_lenet_Llr0.01_Le{a.local_epochs}"
            f"_seed{a.seed}")


def clients(args: argparse.Namespace) -> None:
    """Train the clients with the public code; keep them and the partition."""
    pub, out = Path(args.public_dir).resolve(), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = public_root(out / "public_root")
    part = out / "partition.json"
    secs = launch(pub, root, args.threads,
                  ["fl_pretrain.py", "--dataset=fmnist", "--partition=dir",
                   f"--beta={args.beta}", f"--seed={args.seed}", f"--num_users={args.num_users}",
                   "--model=lenet", "--local_lr=0.01", f"--local_ep={args.local_epochs}",
                   "--sigma", "0.0", "--batch_size", "128"],
                  out / "clients.log", partition_out=part)
    pkl = root / "Co_boosting" / "checkpoints" / "FL_pretrain" / f"{fl_model_id(args)}.pkl"
    (out / "clients.pkl").write_bytes(pkl.read_bytes())
    meta = {k: getattr(args, k) for k in ("beta", "num_users", "local_epochs", "seed")}
    meta.update(fl_model=fl_model_id(args), train_seconds=round(secs, 1))
    (out / "clients.json").write_text(json.dumps(meta, indent=1))
    lists = json.loads(part.read_text())
    ours = make_partition(load_dataset("fmnist").y_train.numpy(), args.num_users,
                          "dirichlet_client", alpha=args.beta, seed=args.seed)
    same = all(np.array_equal(np.asarray(lists[str(k)]), ours.client_indices[k])
               for k in range(args.num_users))
    print(f"clients trained in {secs:.0f} s; sizes {[len(v) for v in lists.values()]}; "
          f"ofl's dirichlet_client partition (seed {args.seed}, α {args.beta}) "
          f"{'identical' if same else 'DIFFERENT'}")


#: the public ``LeNet5``'s state-dict keys → ofl's ``lenet`` at 32 px (its 5×5 conv to 120
#: channels on a 5×5 map is ofl's 400 → 120 linear layer, weights flattened C, H, W)
KEY_MAP = {"features.0.": "conv.0.", "features.3.": "conv.3.", "features.6.": "hidden.0.",
           "fc.0.": "hidden.2.", "fc.2.": "fc."}


def map_public_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in state.items():
        prefix = next(p for p in KEY_MAP if k.startswith(p))
        nk = KEY_MAP[prefix] + k[len(prefix):]
        out[nk] = v.reshape(v.shape[0], -1) if nk == "hidden.0.weight" else v
    return out


def pil_resized_fmnist() -> ImageDataset:
    """FashionMNIST at 32 px resized as the code's ``T.Resize((32, 32))`` does (PIL bilinear)."""
    from PIL import Image

    ds = load_dataset("fmnist")

    def resize(x: torch.Tensor) -> torch.Tensor:
        arr = np.stack([np.asarray(Image.fromarray(a).resize((32, 32), Image.BILINEAR))
                        for a in x[:, 0].numpy()])
        return torch.from_numpy(arr).unsqueeze(1).contiguous()

    return ImageDataset(name="fmnist@32pil", x_train=ds.x_train[:0].new_zeros((0, 1, 32, 32)),
                        y_train=ds.y_train[:0], x_test=resize(ds.x_test), y_test=ds.y_test,
                        num_classes=10, classes=ds.classes)


def ofl_uploads(out: Path) -> list[ClientUpload]:
    states = torch.load(out / "clients.pkl", weights_only=True)
    lists = json.loads((out / "partition.json").read_text())
    return [ClientUpload(client_id=k, arch="lenet", state_dict=map_public_state(s),
                         num_classes=10, in_channels=1, image_size=32,
                         num_samples=len(lists[str(k)]), model_kwargs={"input_norm": "half"})
            for k, s in enumerate(states)]


def check_mapping(pub: Path, uploads: list[ClientUpload], states: list, x: torch.Tensor) -> float:
    """Max |logit difference| between the public LeNet5 on (x − 0.5)/0.5 and ofl's lenet
    (``input_norm="half"``) on x, over every client."""
    spec = importlib.util.spec_from_file_location(
        "public_lenet", pub / "code" / "datafree" / "models" / "classifiers" / "lenet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the public net, for this check only
    LeNet5 = module.LeNet5

    diff = 0.0
    for u, s in zip(uploads, states, strict=True):
        net = LeNet5(num_classes=10).eval()
        net.load_state_dict(s)
        with torch.no_grad():
            a = net((x - 0.5) / 0.5)
            b = build_from_upload(u)(x)
        diff = max(diff, float((a - b).abs().max()))
    return diff


def run_ofl(args: argparse.Namespace, out: Path, seed: int) -> dict:
    pub = Path(args.public_dir).resolve()
    uploads = ofl_uploads(out)
    ds = pil_resized_fmnist()
    x = ds.x_test[:256].float() / 255
    diff = check_mapping(pub, uploads, torch.load(out / "clients.pkl", weights_only=True), x)
    if diff > 1e-4:
        sys.exit(f"mapped clients differ from the public nets by {diff:.2g} in their logits")

    def evaluate(m: torch.nn.Module) -> float:
        return accuracy(m, ds.x_test, ds.y_test)

    cfg = CoBoostingConfig.for_preset(args.preset, epochs=args.epochs, steps_per_epoch=30,
                                      batch_size=128, kd_batch_size=128, kd_lr=0.01,
                                      amp=False)
    ctx = ServerContext(num_classes=10, in_channels=1, image_size=32, seed=seed,
                        evaluate=evaluate, progress=False)
    t0 = time.perf_counter()
    res = run_method("coboosting", uploads, cfg, ctx)
    return {"curve": res.curve, "seconds": round(time.perf_counter() - t0, 1),
            "weighted_ensemble_acc": res.extras.get("weighted_ensemble_acc"),
            "mean_ensemble_acc": res.extras.get("mean_ensemble_acc"),
            "ensemble_weights": res.extras.get("ensemble_weights"),
            "client_accs": [evaluate(build_from_upload(u)) for u in uploads],
            "logit_check": diff, "preset": args.preset}


def run_public(args: argparse.Namespace, out: Path, seed: int) -> dict:
    pub = Path(args.public_dir).resolve()
    meta = json.loads((out / "clients.json").read_text())
    root = public_root(out / f"public_s{seed}")
    ckpt = root / "Co_boosting" / "checkpoints" / "FL_pretrain"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / f"{meta['fl_model']}.pkl").write_bytes((out / "clients.pkl").read_bytes())
    for old in (root / "Co_boosting" / "checkpoints" / meta["fl_model"]).glob("*"):
        if old.is_dir():  # a pool left by an earlier run would join this run's pool
            subprocess.run(["rm", "-rf", str(old)], check=True)
    log = out / f"public_s{seed}.log"
    secs = launch(pub, root, args.threads,
                  ["datafree_kd.py", "--method", "co_boosting", "--dataset", "fmnist",
                   "--fl_model", meta["fl_model"], "--batch_size", "128", "--teacher", "lenet",
                   "--student", "lenet", "--kd_lr", "0.01", "--epochs", str(args.epochs),
                   "--g_steps", "30", "--lr_g", "1e-3", "--seed", str(seed),
                   "--print_freq", "1000"], log)
    text = log.read_text()
    curve = [float(a) for a in re.findall(r"\[Eval\] Epoch=\d+ Acc@1=([\d.]+)", text)]
    return {"curve": curve, "seconds": round(secs, 1)}


def run(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()
    run_sides(args, lambda side, seed: run_ofl(args, out, seed) if side == "ofl"
              else run_public(args, out, seed),
              lambda row: f"last {row['curve'][-1]:.2f}, best {max(row['curve']):.2f}, "
                          f"{row['seconds']:.0f} s")


def table(args: argparse.Namespace) -> None:
    by, seeds, sides = load_runs(Path(args.out), ("public", "ofl"))
    print_curves(by, seeds, sides, args.every)
    for seed in seeds:
        r = by.get(("ofl", seed))
        if r and r.get("weighted_ensemble_acc") is not None:
            print(f"ofl seed {seed}: A_w {r['weighted_ensemble_acc']:.2f}, mean ensemble "
                  f"{r['mean_ensemble_acc']:.2f}, clients "
                  f"{[round(a, 1) for a in r['client_accs']]}")


def main(argv: list[str] | None = None) -> None:
    ap, sub = common_parser(__doc__, "a bare git copy of rong-dai/Co-Boosting", "b95d715", 5)
    c, r = sub["clients"], sub["run"]
    c.add_argument("--local-epochs", type=int, default=100)
    c.add_argument("--beta", type=float, default=0.6)
    c.add_argument("--num-users", type=int, default=10)
    c.add_argument("--seed", type=int, default=42)
    r.add_argument("--sides", nargs="+", choices=("public", "ofl"), default=["public", "ofl"])
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    r.add_argument("--epochs", type=int, default=20)
    r.add_argument("--preset", default="authors_code")
    args = ap.parse_args(argv)
    {"setup": setup, "clients": clients, "run": run, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
