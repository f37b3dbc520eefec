"""DENSE's server loop against its public code on identical teachers.

Both servers distil the same m = 5 cnn_mnist teachers — trained by DENSE's public code
(``loop_df_fl.py --type=pretrain``, which saves the clients' state dicts as one list) on its
FashionMNIST Dirichlet partition — under one budget, and their per-epoch test curves are compared
(docs/decisions/authors-code.md#dense-public-code). Subcommands:

``teachers``
    map the public state dicts onto ofl's ``cnn_mnist`` (:data:`KEY_MAP`), check the mapping
    (both nets give identical logits on a test batch) and evaluate every teacher and the
    mean-logit ensemble D (DENSE Eq. 1) on the test set in ofl (plain models, and the
    ``TeacherBank`` the server distils from) and in the public nets (their ``Ensemble``'s
    running sum / m); writes ``OUT/b<β>/teachers.json``.
``run``
    the servers, one (β, seed, side) row at a time; a finished row is skipped, so an
    interrupted run resumes. ``ofl``: ofl's DENSE ``authors_code`` preset on those teachers;
    ``--variant NAME --set field=value ...`` runs it with config overrides as side
    ``ofl-NAME`` instead (e.g. ``--variant train --set synthesis_student_mode=train`` for the
    student's mode before this comparison). ``public``: the public code, through the launcher
    of the local copy (``--public-dir``), with the same hyperparameters, the given server seed
    and a JSON curve. Writes ``OUT/b<β>/<side>_s<seed>.json``.
``table``
    each side's curve every ``--every`` epochs and at the last, mean (± sd, n) over server
    seeds, with each teacher set's ensemble accuracy.

``--public-dir`` is a local copy of DENSE's public code, kept outside this repository (never
committed): ``code/`` (the code, with the stand-ins it needs on a CPU) and ``run_public.py`` (its
launcher: ``run_public.py --workdir DIR --threads N -- <loop_df_fl.py arguments>``, with
``loop_df_fl.py`` extended by ``--teachers``, ``--acc_json`` and ``--server_seed``).

    python scripts/evidence/compare_dense_public.py teachers --beta 0.1 --teachers T.pkl \\
        --public-dir D
    python scripts/evidence/compare_dense_public.py run --beta 0.1 --teachers T.pkl \\
        --public-dir D --sides public ofl --seeds 1 2 3 [--epochs 30 --batch-size 128 \\
        --g-steps 30]
    python scripts/evidence/compare_dense_public.py table [--out results/dense_public]

Run it from the checkout with ``PYTHONPATH=.``, so that this checkout's ``ofl_core`` is the one
imported (rows record its commit and path).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from _public_code import subcommands
from torch import nn

import ofl_core
from ofl_core.clients import init_model
from ofl_core.data.datasets import ImageDataset, load_dataset
from ofl_core.data.partition import make_partition
from ofl_core.dense.server import DenseConfig
from ofl_core.distill.teachers import TeacherBank
from ofl_core.evaluate import accuracy, predict_logits
from ofl_core.registry import run_method
from ofl_core.server import ServerContext, average_states
from ofl_core.uploads import ClientUpload, build_from_upload

#: the public ``CNNMnist``'s state-dict prefixes → ofl's ``cnn_mnist`` (same layers, same order:
#: conv 5×5 → BN → ReLU → max-pool twice, then the linear layer)
KEY_MAP = {"layer1.0.": "conv.0.", "layer1.1.": "conv.1.", "layer2.0.": "conv.4.",
           "layer2.1.": "conv.5.", "fc.": "fc."}
REPO = Path(ofl_core.__file__).resolve().parents[1]  # the checkout actually imported
EVAL_BATCH = 256  # the public code's test batch


def map_public_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A public ``CNNMnist`` state dict with ofl's ``cnn_mnist`` key names (values shared)."""
    out = {}
    for key, value in state.items():
        prefix = next((p for p in KEY_MAP if key.startswith(p)), None)
        if prefix is None:
            raise KeyError(f"public state-dict key {key!r} has no ofl counterpart")
        out[KEY_MAP[prefix] + key[len(prefix):]] = value.detach().cpu()
    return out


def load_public_states(path: Path) -> list[dict[str, torch.Tensor]]:
    """The list of client state dicts that ``loop_df_fl.py --type=pretrain`` saves."""
    states = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(states, list) or not all(isinstance(s, dict) for s in states):
        raise ValueError(f"{path}: expected a list of state dicts, got {type(states).__name__}")
    return states


def ofl_teacher(state: dict[str, torch.Tensor]) -> nn.Module:
    """ofl's ``cnn_mnist`` holding a public teacher (strict load: every key mapped)."""
    model = init_model("cnn_mnist", 10, 1, 28, seed=0)
    model.load_state_dict(map_public_state(state), strict=True)
    return model.eval()


def public_net_class(public_dir: Path) -> type[nn.Module]:
    """The public code's ``CNNMnist`` (``code/models/nets.py`` of the local copy)."""
    spec = importlib.util.spec_from_file_location(
        "dense_public_nets", public_dir / "code" / "models" / "nets.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no code/models/nets.py under {public_dir}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CNNMnist


def uploads_from_states(states: list[dict[str, torch.Tensor]], sizes: list[int]
                        ) -> list[ClientUpload]:
    """The public teachers as ofl client uploads (``num_samples``: the partition's sizes)."""
    return [ClientUpload(client_id=i, arch="cnn_mnist", state_dict=map_public_state(s),
                         num_classes=10, in_channels=1, image_size=28, num_samples=int(n))
            for i, (s, n) in enumerate(zip(states, sizes, strict=True))]


@torch.no_grad()
def batched_logits(fn: Any, x: torch.Tensor, batch: int = EVAL_BATCH) -> torch.Tensor:
    """``fn`` on uint8 images ``x`` in float batches of ``batch`` (inputs /255, as ToTensor)."""
    return torch.cat([fn(x[i:i + batch].float().div_(255.0)).float()
                      for i in range(0, len(x), batch)])


def pct(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(1) == y).float().mean() * 100.0)


def teachers_report(states: list[dict[str, torch.Tensor]], ds: ImageDataset,
                    public_dir: Path, sizes: list[int]) -> dict[str, Any]:
    """The mapping check and each teacher's and D's test accuracy in ofl and in the public nets.

    Mapping: the public net (its own keys) and ofl's ``cnn_mnist`` (mapped keys) on the first
    256 test images, plain eval-mode forwards. Ensembles: ofl's plain mean of the teachers'
    logits, ofl's ``TeacherBank`` as the server builds it (fused ReLU/max-pool, channels-last
    on the CPU: equal up to float rounding), and the public ``Ensemble``'s running sum / m.
    Also FedAvg of the teachers, weighted by the partition's ``sizes`` (DENSE Eq. 2) and
    unweighted (DENSE's code), and the mean of their softmax outputs."""
    net_cls = public_net_class(public_dir)
    theirs, ours = [], []
    for s in states:
        net = net_cls()
        net.load_state_dict(s, strict=True)
        theirs.append(net.eval())
        ours.append(ofl_teacher(s))
    xb = ds.x_test[:EVAL_BATCH].float().div(255.0)
    with torch.no_grad():
        diffs = [(o(xb) - t(xb)).abs().max().item() for o, t in zip(ours, theirs, strict=True)]
        identical = all(torch.equal(o(xb), t(xb)) for o, t in zip(ours, theirs, strict=True))
    if max(diffs) > 1e-4:
        raise RuntimeError(f"key mapping is wrong: max |logit difference| {max(diffs):.3g}")
    y = ds.y_test
    ours_lg = torch.stack([predict_logits(m, ds.x_test) for m in ours])
    theirs_lg = torch.stack([batched_logits(t, ds.x_test) for t in theirs])

    def public_ensemble(x: torch.Tensor) -> torch.Tensor:
        total = 0
        for t in theirs:
            total = total + t(x)
        return total / len(theirs)

    bank = TeacherBank([ofl_teacher(s) for s in states])
    d_bank = batched_logits(bank, ds.x_test)
    bank.close()
    d_ours, d_theirs = ours_lg.mean(0), batched_logits(public_ensemble, ds.x_test)
    ups = uploads_from_states(states, sizes)
    fedavg = {name: pct(predict_logits(build_from_upload(replace(
        ups[0], state_dict=average_states([u.state_dict for u in ups], w))), ds.x_test), y)
        for name, w in (("weighted", sizes), ("unweighted", [1.0] * len(ups)))}
    return {
        "key_map": KEY_MAP,
        "mapping_check": {"batch": EVAL_BATCH, "identical_logits": identical,
                          "max_abs_diff": max(diffs)},
        "clients_ofl": [pct(lg, y) for lg in ours_lg],
        "clients_public": [pct(lg, y) for lg in theirs_lg],
        "clients_max_abs_logit_diff": (ours_lg - theirs_lg).abs().max().item(),
        "ensemble_ofl": pct(d_ours, y),
        "mean_softmax_ofl": pct(ours_lg.softmax(-1).mean(0), y),
        "fedavg_weighted": fedavg["weighted"],
        "fedavg_unweighted": fedavg["unweighted"],
        "ensemble_ofl_server_bank": pct(d_bank, y),
        "ensemble_public": pct(d_theirs, y),
        "ensemble_max_abs_logit_diff": max((d_ours - d_theirs).abs().max().item(),
                                           (d_bank - d_theirs).abs().max().item()),
        "ensemble_argmax_disagreements": int(
            ((d_ours.argmax(1) != d_theirs.argmax(1))
             | (d_bank.argmax(1) != d_theirs.argmax(1))).sum()),
    }


def ofl_config(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> DenseConfig:
    """ofl's DENSE ``authors_code`` preset at the comparison's budget (one batch size for the
    synthetic batch and the KD batch, as ``--batch_size``/``--synthesis_batch_size``)."""
    # float32 as the public code, unless an override asks otherwise (DENSE's default is
    # bfloat16 where native)
    return DenseConfig.for_preset(
        "authors_code", epochs=args.epochs, steps_per_epoch=args.g_steps,
        batch_size=args.batch_size, kd_batch_size=args.batch_size,
        **{"amp": False, **(overrides or {})})


def public_arguments(cfg: DenseConfig, args: argparse.Namespace, seed: int, teachers: Path,
                     acc_json: Path) -> list[str]:
    """``loop_df_fl.py --type=kd_train`` arguments for the same budget and hyperparameters as
    ``cfg`` (the README command's flags; its ``--bn 1.0`` is inert in the code: L_BN is 0)."""
    return [
        "--type=kd_train", "--iid=0", "--partition=dirichlet", "--model=fmnist_cnn",
        "--dataset=fmnist", f"--num_users={args.clients}", f"--beta={args.beta}",
        f"--seed={args.partition_seed}", f"--server_seed={seed}", f"--epochs={cfg.epochs}",
        f"--lr={cfg.kd_lr}", f"--batch_size={cfg.kd_batch_size}",
        f"--synthesis_batch_size={cfg.batch_size}", f"--g_steps={cfg.steps_per_epoch}",
        f"--lr_g={cfg.g_lr}", f"--nz={cfg.nz}", "--bn=1.0", f"--oh={cfg.ce_weight}",
        f"--adv={cfg.adv_weight}", f"--T={cfg.kd_temperature}", "--save_dir=run/synthesis",
        f"--other=dense_b{args.beta}_s{seed}", f"--teachers={teachers}",
        f"--acc_json={acc_json}"]


def run_public(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One public-code server run in ``<public-dir>/runs/b<β>_s<seed>`` (log.txt there)."""
    workdir = args.public_dir / "runs" / f"b{args.beta}_s{seed}"
    workdir.mkdir(parents=True, exist_ok=True)
    acc_json = workdir / "acc.json"
    acc_json.unlink(missing_ok=True)
    cfg = ofl_config(args)
    cmd = [sys.executable, str(args.public_dir / "run_public.py"), "--workdir", str(workdir),
           "--threads", str(args.threads), "--",
           *public_arguments(cfg, args, seed, args.teachers.resolve(), acc_json)]
    t0 = time.perf_counter()
    with open(workdir / "log.txt", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    rec = json.loads(acc_json.read_text())
    return {"curve": rec["acc"], "ensemble_acc": rec["ensemble_acc"],
            "time_s": round(time.perf_counter() - t0, 1), "command": cmd[1:]}


def run_ofl(args: argparse.Namespace, seed: int, ds: ImageDataset,
            uploads: list[ClientUpload], overrides: dict[str, Any]) -> dict[str, Any]:
    """One ofl server run: DENSE ``authors_code`` (+ overrides) on the public teachers."""
    cfg = ofl_config(args, overrides)
    ctx = ServerContext(num_classes=10, in_channels=1, image_size=28, seed=seed,
                        evaluate=lambda m: accuracy(m, ds.x_test, ds.y_test), progress=False)
    t0 = time.perf_counter()
    res = run_method("dense", uploads, cfg, ctx)
    return {"curve": res.curve, "time_s": round(time.perf_counter() - t0, 1),
            "config": asdict(cfg), "overrides": overrides,
            "ofl_commit": git_commit(), "ofl_core": str(REPO)}


def git_commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``field=value`` pairs; values read as Python literals where they parse, else strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set expects field=value, got {pair!r}")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    DenseConfig(**out)  # unknown fields and bad values fail here, before any run
    return out


def budget(args: argparse.Namespace) -> dict[str, Any]:
    return {"epochs": args.epochs, "batch_size": args.batch_size, "g_steps": args.g_steps,
            "clients": args.clients, "partition_seed": args.partition_seed,
            "teachers": str(args.teachers.resolve()), "threads": args.threads}


def beta_dir(out: Path, beta: float) -> Path:
    return out / f"b{beta}"


def finished(path: Path, want: dict[str, Any]) -> bool:
    """Whether ``path`` holds a finished row of this budget; a row of another budget is an
    error (use another --out), never silently mixed or overwritten."""
    if not path.is_file():
        return False
    row = json.loads(path.read_text())
    if row.get("budget") != want:
        raise SystemExit(f"{path} was made with budget {row.get('budget')}, not {want}; "
                         "use another --out")
    return len(row.get("curve", [])) == want["epochs"]


def write_json(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def cmd_teachers(args: argparse.Namespace, ds: ImageDataset) -> dict[str, Any]:
    """Write (or reuse) ``teachers.json`` for this β; print its summary."""
    path = beta_dir(args.out, args.beta) / "teachers.json"
    if path.is_file() and json.loads(path.read_text()).get("teachers") == str(
            args.teachers.resolve()) and "fedavg_unweighted" in json.loads(path.read_text()):
        rep = json.loads(path.read_text())
    else:
        states = load_public_states(args.teachers)
        part = make_partition(ds.y_train.numpy(), args.clients, "dirichlet", alpha=args.beta,
                              seed=args.partition_seed)
        rep = {"teachers": str(args.teachers.resolve()), "beta": args.beta,
               "partition_counts_ofl": part.counts.tolist(),
               **teachers_report(states, ds, args.public_dir, part.sizes.tolist())}
        write_json(path, rep)
    print(f"β={args.beta}: mapping identical logits {rep['mapping_check']['identical_logits']} "
          f"(max |Δ| {rep['mapping_check']['max_abs_diff']:.2g}); clients ofl "
          f"{[round(a, 2) for a in rep['clients_ofl']]} / public "
          f"{[round(a, 2) for a in rep['clients_public']]}; ensemble ofl "
          f"{rep['ensemble_ofl']:.2f} (server bank {rep['ensemble_ofl_server_bank']:.2f}) / "
          f"public {rep['ensemble_public']:.2f}, max |Δ logit| "
          f"{rep['ensemble_max_abs_logit_diff']:.2g}, argmax disagreements "
          f"{rep['ensemble_argmax_disagreements']}; mean softmax {rep['mean_softmax_ofl']:.2f}; "
          f"FedAvg weighted {rep['fedavg_weighted']:.2f} / unweighted "
          f"{rep['fedavg_unweighted']:.2f}", flush=True)
    return rep


def cmd_run(args: argparse.Namespace, ds: ImageDataset) -> None:
    """Every missing (seed, side) row for this β, one after another."""
    cmd_teachers(args, ds)
    overrides = parse_overrides(args.set)
    if overrides and not args.variant:
        raise SystemExit("--set needs --variant NAME (the row kind it makes)")
    want = budget(args)
    states = load_public_states(args.teachers)
    part = make_partition(ds.y_train.numpy(), args.clients, "dirichlet", alpha=args.beta,
                          seed=args.partition_seed)
    uploads = uploads_from_states(states, part.sizes.tolist())
    for seed in args.seeds:
        for side in args.sides:
            name = f"ofl-{args.variant}" if side == "ofl" and args.variant else side
            path = beta_dir(args.out, args.beta) / f"{name}_s{seed}.json"
            if finished(path, want):
                print(f"skip β={args.beta} seed={seed} {name}: done", flush=True)
                continue
            print(f"run  β={args.beta} seed={seed} {name} ...", flush=True)
            row = (run_public(args, seed) if side == "public"
                   else run_ofl(args, seed, ds, uploads, overrides))
            write_json(path, {"side": name, "beta": args.beta, "seed": seed, "budget": want,
                              **row})
            print(f"     last {row['curve'][-1]:.2f}, best {max(row['curve']):.2f}, "
                  f"{row['time_s']:.0f} s", flush=True)


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    sd = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.2f}{sd} ({len(values)})"


def side_values(rows: list[dict[str, Any]], side: str, epoch: int | str) -> list[float]:
    """One value per server seed of ``side``: the accuracy after ``epoch`` (1-based), each
    curve's maximum for ``"best"``, or its mean over a window of epochs for ``"last 5"`` and
    ``"epochs a–b"`` (less epoch-to-epoch noise than single epochs)."""
    mine = [r["curve"] for r in rows if r["side"] == side]
    if epoch == "best":
        return [max(c) for c in mine]
    if epoch == "last 5":
        return [statistics.mean(c[-5:]) for c in mine]
    if isinstance(epoch, str):  # "epochs a–b"
        a, b = (int(v) for v in epoch.removeprefix("epochs ").split("–"))
        return [statistics.mean(c[a - 1 : b]) for c in mine if len(c) >= b]
    return [c[epoch - 1] for c in mine if len(c) >= epoch]


def curve_table(rows: list[dict[str, Any]], every: int) -> list[str]:
    """Markdown lines: each side's accuracy every ``every`` epochs, at the last and the best
    epoch, mean ± sd (n seeds), and each side's difference to the public code's mean."""
    sides = sorted({r["side"] for r in rows}, key=lambda s: (s != "public", s))
    others = [s for s in sides if s != "public"]
    epochs = max(len(r["curve"]) for r in rows)
    lines = ["| epoch | " + " | ".join(sides) + " | "
             + " | ".join(f"{s} − public" for s in others) + " |",
             "|---" * (1 + len(sides) + len(others)) + "|"]
    windows = [f"epochs {a}–{min(a + 9, epochs)}" for a in range(1, epochs + 1, 10)]
    for e in [*sorted({*range(every, epochs + 1, every), epochs}), "best", "last 5", *windows]:
        pub = side_values(rows, "public", e)
        cells = [mean_sd(side_values(rows, s, e)) for s in sides]
        deltas = []
        for s in others:
            mine = side_values(rows, s, e)
            deltas.append(f"{statistics.mean(mine) - statistics.mean(pub):+.2f}"
                          if mine and pub else "–")
        lines.append(f"| {e} | " + " | ".join(cells) + " | " + " | ".join(deltas) + " |")
    return lines


def cmd_table(args: argparse.Namespace) -> None:
    """Per β: the teachers' and D's accuracies and the table of the curves."""
    for bdir in sorted(p for p in args.out.glob("b*") if p.is_dir()):
        rows = [json.loads(p.read_text()) for p in sorted(bdir.glob("*_s*.json"))]
        rows = [r for r in rows if r.get("curve")]
        if not rows:
            continue
        tpath = bdir / "teachers.json"
        head = f"\n### {bdir.name}"
        if tpath.is_file():
            t = json.loads(tpath.read_text())
            head += (f": teachers {[round(a, 1) for a in t['clients_ofl']]}, ensemble D ofl "
                     f"{t['ensemble_ofl']:.2f} / public {t['ensemble_public']:.2f}")
        print(head)
        print("\n".join(curve_table(rows, args.every)))
        for line in agreement(rows, args.every, args.tolerance):
            print(line)


def agreement(rows: list[dict[str, Any]], every: int, tolerance: float) -> list[str]:
    """Per side: whether its mean curve is within ``tolerance`` points of the public code's at
    every ``every``-th epoch (the comparison's agreement criterion: 1.5), with the largest gap."""
    out = []
    epochs = max(len(r["curve"]) for r in rows)
    for side in sorted({r["side"] for r in rows} - {"public"}):
        gaps = []
        for e in range(every, epochs + 1, every):
            mine, pub = side_values(rows, side, e), side_values(rows, "public", e)
            if mine and pub:
                gaps.append((abs(statistics.mean(mine) - statistics.mean(pub)), e))
        if not gaps:
            continue
        worst, at = max(gaps)
        n = len([r for r in rows if r["side"] == side]), len(
            [r for r in rows if r["side"] == "public"])
        verdict = "yes" if worst <= tolerance else "no"
        out.append(f"{side} within {tolerance} of public at every {every}th epoch: {verdict} "
                   f"(largest |Δ| {worst:.2f} at epoch {at}; seeds {n[0]} / {n[1]})")
    return out


def main() -> None:
    ap, parsers = subcommands(__doc__, ("teachers", "run", "table"), Path("results/dense_public"))
    for name, p in parsers.items():
        if name == "table":
            p.add_argument("--every", type=int, default=5)
            p.add_argument("--tolerance", type=float, default=1.5)
            continue
        p.add_argument("--beta", type=float, required=True)
        p.add_argument("--teachers", type=Path, required=True,
                       help="the public pretrain's saved list of client state dicts")
        p.add_argument("--public-dir", type=Path, required=True,
                       help="local copy of DENSE's public code: code/ and run_public.py")
        p.add_argument("--clients", type=int, default=5)
        p.add_argument("--partition-seed", type=int, default=1)
        p.add_argument("--threads", type=int, default=1)
        if name == "run":
            p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
            p.add_argument("--sides", nargs="+", choices=("public", "ofl"),
                           default=["public", "ofl"])
            p.add_argument("--epochs", type=int, default=30)
            p.add_argument("--batch-size", type=int, default=128)
            p.add_argument("--g-steps", type=int, default=30)
            p.add_argument("--variant", default="")
            p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE")
    args = ap.parse_args()
    if args.cmd == "table":
        cmd_table(args)
        return
    torch.set_num_threads(args.threads)
    args.public_dir = args.public_dir.resolve()
    ds = load_dataset("fmnist")
    if args.cmd == "teachers":
        cmd_teachers(args, ds)
    else:
        cmd_run(args, ds)


if __name__ == "__main__":
    main()
