"""Build a runnable local copy of DENSE's public code (outside this repository) on a CPU.

DENSE's public code (``zj-jayzhang/DENSE``, commit 237c5dd) is what the comparison scripts
(``scripts/evidence/compare_dense_public.py``,
``scripts/evidence/compare_dense_clients.py``) run as "the public
side". It is never copied into this repository: this script takes a checkout of it, copies it to
a scratch folder and applies the stand-ins it needs on a CPU-only machine as small, checked text
patches (each must match the checkout exactly, so another commit fails loudly) and wrapper
modules. The algorithm is unchanged. Get the checkout with git::

    git clone https://github.com/zj-jayzhang/DENSE /tmp/DENSE && git -C /tmp/DENSE checkout 237c5dd

(or ``git --git-dir=<a bare mirror> archive 237c5dd | tar -x -C /tmp/DENSE``), then::

    python scripts/evidence/setup_dense_public.py --checkout /tmp/DENSE --out PUBLIC

which writes ``OUT/code/`` (the patched code), ``OUT/shims/`` (no-op ``wandb`` and ``ipdb``
modules) and ``OUT/run_public.py``, the launcher::

    python OUT/run_public.py --workdir DIR --threads N -- <loop_df_fl.py arguments>

The launcher runs ``loop_df_fl.py`` in ``DIR`` (its image pool ``DIR/run/synthesis`` emptied
first: the code reads every PNG under ``--save_dir``, so an earlier run's pool would leak in) at
``N`` threads, with ``.cuda()`` a no-op, ``torch._six`` pointing at ``collections.abc`` (imported
by the unused ViT) and FashionMNIST read from ``$DENSE_DATA_ROOT`` (default: ofl's data root,
where :func:`ofl_core.data.datasets.load_dataset` unpacks the Debian package's files into
torchvision's layout). kornia 0.6.8 (the code's pinned version; only the server's generator
steps use it) is taken from ``--pydeps`` when given (``pip install --no-deps --target DIR
kornia==0.6.8``).

Stand-ins patched into the code: the FashionMNIST root from the environment; DataLoader
``num_workers`` 0 (one process, one thread); and options ``--teachers`` (where ``--type=pretrain``
saves, and ``kd_train`` loads, the clients' state dicts as one list), ``--client_seed`` (reseeds
every RNG with the code's ``setup_seed`` right after the partition is drawn, before the global
model and the clients are built: ``--seed`` keeps fixing the partition), ``--server_seed`` (the
same right before the server's student is built) and ``--acc_json`` (pretrain: each client's
per-epoch test accuracy, the FedAvg and ensemble accuracies; kd_train: the student's per-epoch
accuracy and the ensemble's).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

#: (file, old text, new text, expected occurrences of the old text)
PATCHES: list[tuple[str, str, str, int]] = [
    # FashionMNIST root (and the other datasets' roots) from the environment
    ("helpers/datasets.py", "data_dir = '/dataset'",
     "data_dir = os.environ.get('DENSE_DATA_ROOT', '/dataset')", 1),
    ("helpers/utils.py", "'/youtu-face-identify-public/jiezhang/data'",
     "os.environ.get('DENSE_DATA_ROOT', '/dataset')", 10),
    # one process: no DataLoader workers
    ("loop_df_fl.py", "num_workers=4", "num_workers=0", 2),
    ("helpers/synthesizers.py", "num_workers=4, pin_memory=True, )",
     "num_workers=0, pin_memory=False, )", 2),  # one of them in a comment
    # the added options
    ("loop_df_fl.py", "    args = parser.parse_args()\n",
     "    parser.add_argument('--teachers', default=None, type=str)\n"
     "    parser.add_argument('--client_seed', default=None, type=int)\n"
     "    parser.add_argument('--server_seed', default=None, type=int)\n"
     "    parser.add_argument('--acc_json', default=None, type=str)\n"
     "    args = parser.parse_args()\n", 1),
    ("loop_df_fl.py",
     "        args.dataset, args.partition, beta=args.beta, num_users=args.num_users)\n",
     "        args.dataset, args.partition, beta=args.beta, num_users=args.num_users)\n"
     "    if args.client_seed is not None:  # stand-in: client training seed\n"
     "        setup_seed(args.client_seed)\n", 1),
    ("loop_df_fl.py", "'{}_{}clients_{}.pkl'.format(args.dataset, args.num_users, args.beta)",
     "(args.teachers or '{}_{}clients_{}.pkl'.format(args.dataset, args.num_users, args.beta))",
     2),
    ("loop_df_fl.py",
     "        print(\"ensemble acc:\")\n        test(ensemble_model, test_loader)\n",
     "        print(\"ensemble acc:\")\n        ens_acc, _ = test(ensemble_model, test_loader)\n",
     2),
    ("loop_df_fl.py",
     "        ens_acc, _ = test(ensemble_model, test_loader)\n"
     "        # ===============================================\n    else:\n",
     "        ens_acc, _ = test(ensemble_model, test_loader)\n"
     "        if args.acc_json:  # stand-in: the clients' curves as JSON\n"
     "            import json\n"
     "            with open(args.acc_json, 'w') as f:\n"
     "                json.dump({'local_acc': [list(map(float, a)) for a in acc_list],\n"
     "                           'fedavg_acc': float(test_acc), 'ensemble_acc': float(ens_acc)},"
     " f)\n"
     "        # ===============================================\n    else:\n", 1),
    ("loop_df_fl.py",
     "        global_model = get_model(args)\n"
     "        # ===============================================\n\n        # data generator\n",
     "        if args.server_seed is not None:  # stand-in: server seed\n"
     "            setup_seed(args.server_seed)\n"
     "        global_model = get_model(args)\n"
     "        # ===============================================\n\n        # data generator\n",
     1),
    ("loop_df_fl.py", "            distill_acc.append(acc)\n",
     "            distill_acc.append(acc)\n"
     "            if args.acc_json:  # stand-in: the student's curve as JSON\n"
     "                import json\n"
     "                with open(args.acc_json, 'w') as f:\n"
     "                    json.dump({'acc': distill_acc, 'ensemble_acc': float(ens_acc)}, f)\n",
     1),
]

SHIMS = {
    "wandb.py": '''"""No-op stand-in for wandb (the public code logs to it)."""


def init(*args, **kwargs):
    return None


def log(*args, **kwargs):
    return None


class plot:  # noqa: N801 - wandb.plot.line_series
    @staticmethod
    def line_series(*args, **kwargs):
        return None
''',
    "ipdb.py": '"""No-op stand-in for ipdb (imported, unused)."""\n\n\ndef set_trace(*a, **k):\n'
               '    return None\n',
}

LAUNCHER = '''"""Run DENSE's public code (patched copy in code/) on a CPU: written by
scripts/evidence/setup_dense_public.py of the ofl repository.

    python run_public.py --workdir DIR --threads N -- <loop_df_fl.py arguments>
"""
import argparse
import collections.abc
import os
import runpy
import shutil
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA_ROOT = {data_root!r}
PYDEPS = {pydeps!r}

ap = argparse.ArgumentParser()
ap.add_argument("--workdir", required=True)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("rest", nargs=argparse.REMAINDER)
a = ap.parse_args()
rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
os.environ.setdefault("DENSE_DATA_ROOT", DATA_ROOT)
for p in (PYDEPS, str(HERE / "shims"), str(HERE / "code")):
    if p:
        sys.path.insert(0, p)

import torch  # noqa: E402

torch.set_num_threads(a.threads)
torch.Tensor.cuda = lambda self, *args, **kwargs: self
torch.nn.Module.cuda = lambda self, *args, **kwargs: self
six = types.ModuleType("torch._six")
six.container_abcs = collections.abc
six.string_classes = (str, bytes)
six.int_classes = int
sys.modules["torch._six"] = six

work = Path(a.workdir).resolve()
work.mkdir(parents=True, exist_ok=True)
shutil.rmtree(work / "run" / "synthesis", ignore_errors=True)
(work / "df_ckpt").mkdir(exist_ok=True)
os.chdir(work)
sys.argv = [str(HERE / "code" / "loop_df_fl.py"), *rest]
runpy.run_path(str(HERE / "code" / "loop_df_fl.py"), run_name="__main__")
'''


def apply_patches(code: Path) -> None:
    """Apply :data:`PATCHES` to the copy in ``code``; each old text must occur exactly as
    often as expected (another commit of the code fails here, not later)."""
    for rel, old, new, count in PATCHES:
        path = code / rel
        text = path.read_text()
        found = text.count(old)
        if found != count:
            raise SystemExit(f"{rel}: expected {count} occurrence(s) of {old[:60]!r}, found "
                             f"{found}: not the checkout of commit 237c5dd?")
        path.write_text(text.replace(old, new))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkout", type=Path, required=True,
                    help="a checkout of zj-jayzhang/DENSE at commit 237c5dd")
    ap.add_argument("--out", type=Path, required=True,
                    help="scratch folder outside the repository (code/, shims/, run_public.py)")
    ap.add_argument("--data-root", default=None,
                    help="FashionMNIST root in torchvision's layout (default: ofl's data root, "
                         "unpacked there by ofl's loader)")
    ap.add_argument("--pydeps", default="",
                    help="folder with kornia 0.6.8 (pip install --no-deps --target DIR)")
    args = ap.parse_args()
    if not (args.checkout / "loop_df_fl.py").is_file():
        raise SystemExit(f"{args.checkout}: no loop_df_fl.py (not a DENSE checkout)")
    repo = Path(__file__).resolve().parents[1]
    out = args.out.resolve()
    if out == repo or repo in out.parents:
        raise SystemExit("--out must lie outside this repository")
    data_root = args.data_root
    if data_root is None:
        from ofl_core.data.datasets import default_data_root, load_dataset
        load_dataset("fmnist")  # unpacks the Debian package's files into torchvision's layout
        data_root = str(default_data_root())
    code = out / "code"
    shutil.rmtree(code, ignore_errors=True)
    shutil.copytree(args.checkout, code, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    apply_patches(code)
    shims = out / "shims"
    shims.mkdir(parents=True, exist_ok=True)
    for name, text in SHIMS.items():
        (shims / name).write_text(text)
    pydeps = str(Path(args.pydeps).resolve()) if args.pydeps else ""
    (out / "run_public.py").write_text(LAUNCHER.format(data_root=data_root, pydeps=pydeps))
    print(f"wrote {code}, {shims}, {out / 'run_public.py'} (FashionMNIST root {data_root})")


if __name__ == "__main__":
    main()
