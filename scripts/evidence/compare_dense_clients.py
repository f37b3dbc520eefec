"""ofl's ``authors_code`` clients against the clients trained by DENSE's public code.

Same FashionMNIST partition on both sides (DENSE's Dirichlet, partition seed 1, m = 5
``cnn_mnist`` clients, 20 local epochs), several client-training seeds; every client set is
evaluated the same way (ofl's ``cnn_mnist`` on the 10k test images): each client's accuracy,
the mean-logit ensemble D (DENSE Eq. 1), the mean of the softmax outputs, logit scale, ECE and
NLL, per-class accuracy, BN running statistics, FedAvg of the set. Sides:

``public``
    ``loop_df_fl.py --type=pretrain`` through the launcher of the local copy (``--public-dir``,
    made by ``scripts/evidence/setup_dense_public.py``), with ``--client_seed S``.
``ofl-bf16`` / ``ofl-fp32``
    :func:`ofl_core.clients.train_local` under ``LocalTrainConfig.for_preset("authors_code",
    epochs=20)`` with bfloat16 autocast (the library default where the CPU has it) or float32;
    the data order from :func:`ofl_core.seeds.client_seed`, the shared initial weights from
    :func:`ofl_core.seeds.init_seed` (the library's own streams for experiment seed S).
``ofl-fp32-pubinit``
    as ``ofl-fp32``, from the public code's initial weights for client seed S (its ``setup_seed(S)``
    then ``CNNMnist()``: the same as ofl's ``cnn_mnist`` built after ``torch.manual_seed(S)``).
``ofl-fp32-public-rng``
    as ``ofl-fp32-pubinit`` with the public code's data order too (the permutations its
    ``DataLoader(shuffle=True)`` draws from the global RNG, replayed into ``train_local``) and
    contiguous (not channels-last) tensors: identical inputs, so the clients should equal the
    public code's (``torch.equal`` against the public row's states is recorded).
``ofl-bf16-public-rng``
    the same with bfloat16 autocast (the precision alone, on identical inputs).

Subcommands::

    python scripts/evidence/compare_dense_clients.py train --beta 0.1 --seeds 1 2 3 \\
        --sides public ofl-bf16 ofl-fp32 --public-dir PUBLIC --states STATES
    python scripts/evidence/compare_dense_clients.py table [--out results/dense_public/clients]

``train`` runs every missing (seed, side) row, one at a time (a finished row is skipped, so an
interrupted run resumes); rows go to ``OUT/b<β>/<side>_s<seed>.json``, the client state dicts
(ofl's key names) to ``--states`` (outside the repository; ``PUBLIC``: the copy of DENSE's
public code that ``scripts/evidence/setup_dense_public.py`` makes). Run from the checkout with
``PYTHONPATH=.`` and one thread (``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from _public_code import subcommands

from ofl_core.clients import LocalTrainConfig, init_model, train_local
from ofl_core.data.datasets import ImageDataset, load_dataset
from ofl_core.data.partition import Partition, make_partition
from ofl_core.evaluate import predict_logits
from ofl_core.methods.fedavg import average_states
from ofl_core.models import build_model
from ofl_core.precision import resolve_amp
from ofl_core.seeds import client_seed
from ofl_core.uploads import ClientUpload, build_from_upload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dense_public import (  # noqa: E402
    git_commit,
    load_public_states,
    map_public_state,
    write_json,
)

SIDES = ("public", "ofl-bf16", "ofl-fp32", "ofl-fp32-pubinit", "ofl-fp32-public-rng",
         "ofl-bf16-public-rng")
ECE_BINS = 15


# ----------------------------------------------------------------------------- training
def local_config(side: str, epochs: int) -> LocalTrainConfig:
    """The ``authors_code`` local preset at ``epochs`` for an ofl side."""
    amp = "bf16" in side
    cfg = LocalTrainConfig.for_preset("authors_code", epochs=epochs, amp=amp)
    if side.endswith("public-rng"):
        cfg = replace(cfg, channels_last=False)
    return cfg


def public_rng_stream(seed: int, sizes: list[int], epochs: int
                      ) -> tuple[dict[str, torch.Tensor], list[list[torch.Tensor]]]:
    """The public code's initial weights and every client's per-epoch data order for client
    seed ``seed``, replayed from its global RNG: ``setup_seed(seed)``, ``CNNMnist()``; then per
    client and epoch one draw for the training ``DataLoader`` iterator's base seed, one for its
    ``RandomSampler`` (a generator seeded with it gives ``randperm(n)``), one for the test
    loader's iterator after the epoch (``test()``). The global RNG is restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        init = build_model("cnn_mnist", 10, 1, 28).state_dict()  # the draws of CNNMnist()
        perms: list[list[torch.Tensor]] = []
        for n in sizes:
            mine = []
            for _ in range(epochs):
                torch.empty((), dtype=torch.int64).random_()  # train iterator base seed
                s = int(torch.empty((), dtype=torch.int64).random_().item())  # sampler
                mine.append(torch.randperm(n, generator=torch.Generator().manual_seed(s)))
                torch.empty((), dtype=torch.int64).random_()  # test iterator base seed
            perms.append(mine)
    return {k: v.clone() for k, v in init.items()}, perms


@contextlib.contextmanager
def replayed_randperm(perms: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Make ``torch.randperm`` return ``perms`` in turn (``train_local`` calls it once per
    epoch); the list is emptied as they are used."""
    original = torch.randperm
    queue = list(perms)

    def fake(n: int, *args: Any, **kwargs: Any) -> torch.Tensor:
        p = queue.pop(0)
        if len(p) != n:
            raise RuntimeError(f"replayed permutation has {len(p)} entries, asked for {n}")
        return p.clone()

    torch.randperm = fake
    try:
        yield queue
    finally:
        torch.randperm = original


def train_ofl(side: str, seed: int, ds: ImageDataset, part: Partition, epochs: int
              ) -> tuple[list[dict[str, torch.Tensor]], dict[str, Any]]:
    """Train the five clients of one ofl side; return their states and what was run."""
    cfg = local_config(side, epochs)
    sizes = [len(ix) for ix in part.client_indices]
    init_state, perms = None, None
    if side != "ofl-bf16" and side != "ofl-fp32":
        init_state, perms = public_rng_stream(seed, sizes, epochs)
    states, times = [], []
    for cid, ix in enumerate(part.client_indices):
        idx = torch.as_tensor(ix, dtype=torch.long)
        t0 = time.perf_counter()
        kwargs = dict(cfg=cfg, num_classes=10, seed=client_seed(seed, cid), init_from=seed,
                      init_state=init_state, progress=False, client_id=cid)
        if side.endswith("public-rng"):
            with replayed_randperm(perms[cid]) as left:
                st = train_local(ds.x_train[idx], ds.y_train[idx], **kwargs)
            if left:
                raise RuntimeError(f"{len(left)} replayed permutations unused")
        else:
            st = train_local(ds.x_train[idx], ds.y_train[idx], **kwargs)
        times.append(round(time.perf_counter() - t0, 1))
        states.append(st)
    info = {"config": asdict(cfg), "amp_resolved": resolve_amp(cfg.amp, torch.device("cpu")),
            "init": "public (torch.manual_seed(S); CNNMnist())" if init_state is not None
            else "ofl init_seed(S)", "data_order": "public DataLoader replay"
            if side.endswith("public-rng") else "ofl client_seed(S, c)",
            "train_s": times, "ofl_commit": git_commit()}
    return states, info


def train_public(args: argparse.Namespace, seed: int) -> tuple[list[dict[str, torch.Tensor]],
                                                              dict[str, Any]]:
    """The public code's pretrain for client seed ``seed`` (log and JSON in its workdir)."""
    workdir = args.public_dir / "runs" / f"clients_b{args.beta}_s{seed}"
    workdir.mkdir(parents=True, exist_ok=True)
    pkl = workdir / "clients.pkl"
    acc_json = workdir / "acc.json"
    cmd = [sys.executable, str(args.public_dir / "run_public.py"), "--workdir", str(workdir),
           "--threads", "1", "--", "--type=pretrain", "--iid=0", "--lr=0.01",
           "--model=fmnist_cnn", "--dataset=fmnist", f"--beta={args.beta}",
           f"--seed={args.partition_seed}", "--num_users=5", f"--local_ep={args.epochs}",
           f"--client_seed={seed}", f"--teachers={pkl}", f"--acc_json={acc_json}"]
    t0 = time.perf_counter()
    if not (pkl.is_file() and acc_json.is_file()):
        with open(workdir / "log.txt", "w") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    rec = json.loads(acc_json.read_text())
    states = [map_public_state(s) for s in load_public_states(pkl)]
    return states, {"command": cmd[1:], "time_s": round(time.perf_counter() - t0, 1),
                    "public_local_acc": rec["local_acc"],
                    "public_printed": {"fedavg": rec["fedavg_acc"],
                                       "ensemble": rec["ensemble_acc"]}}


# ----------------------------------------------------------------------------- statistics
def ece_nll(logits: torch.Tensor, y: torch.Tensor, probs: torch.Tensor | None = None
            ) -> tuple[float, float]:
    """Expected calibration error (15 equal-width confidence bins, %) and NLL (nats)."""
    p = logits.softmax(-1) if probs is None else probs
    conf, pred = p.max(1)
    correct = (pred == y).float()
    ece = 0.0
    edges = torch.linspace(0, 1, ECE_BINS + 1)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        m = (conf > lo) & (conf <= hi)
        if m.any():
            ece += float(m.float().mean() * (conf[m].mean() - correct[m].mean()).abs())
    nll = float(F.nll_loss(p.clamp_min(1e-12).log(), y))
    return ece * 100.0, nll


def pct(scores: torch.Tensor, y: torch.Tensor) -> float:
    return float((scores.argmax(1) == y).float().mean() * 100.0)


def per_class(scores: torch.Tensor, y: torch.Tensor) -> list[float]:
    pred = scores.argmax(1)
    return [round(float((pred[y == c] == c).float().mean() * 100), 2) for c in range(10)]


def logit_stats(lg: torch.Tensor) -> dict[str, float]:
    """Scale of a logit matrix (N, C): mean L2 norm, mean per-sample std over classes, mean
    max logit, mean top-1 − top-2 margin."""
    top2 = lg.topk(2, dim=1).values
    return {"norm": float(lg.norm(dim=1).mean()), "std": float(lg.std(dim=1).mean()),
            "max": float(lg.max(1).values.mean()),
            "margin": float((top2[:, 0] - top2[:, 1]).mean())}


@torch.no_grad()
def bn_stats(states: list[dict[str, torch.Tensor]], ds: ImageDataset,
             part: Partition) -> dict[str, Any]:
    """BN running statistics: per layer and client the mean running mean / running var, the
    spread across clients (mean over channels of the sd across clients), and the mismatch of
    the frozen running statistics with the batch statistics of the final weights on the
    client's own data (mean over channels of |log(var_actual / running_var)| and of
    |mean_actual − running_mean| / sqrt(running_var))."""
    out: dict[str, Any] = {}
    for layer, conv_i in (("conv.1", 0), ("conv.5", 4)):
        rm = torch.stack([s[f"{layer}.running_mean"] for s in states])
        rv = torch.stack([s[f"{layer}.running_var"] for s in states])
        mism_v, mism_m = [], []
        for s, ix in zip(states, part.client_indices, strict=True):
            model = init_model("cnn_mnist", 10, 1, 28, seed=0)
            model.load_state_dict(s)
            model.eval()
            x = ds.x_train[torch.as_tensor(ix[:2048], dtype=torch.long)].float().div(255.0)
            h = model.conv[: conv_i + 1](x)  # the BN layer's input
            mu, var = h.mean((0, 2, 3)), h.var((0, 2, 3), unbiased=False)
            r_m, r_v = s[f"{layer}.running_mean"], s[f"{layer}.running_var"]
            mism_v.append(float((var / r_v).log().abs().mean()))
            mism_m.append(float(((mu - r_m).abs() / r_v.sqrt()).mean()))
        out[layer] = {"running_mean_avg": [round(float(v), 4) for v in rm.mean(1)],
                      "running_var_avg": [round(float(v), 4) for v in rv.mean(1)],
                      "across_clients_sd_mean": float(rm.std(0).mean()),
                      "across_clients_sd_var": float(rv.std(0).mean()),
                      "mismatch_logvar": [round(v, 4) for v in mism_v],
                      "mismatch_mean_z": [round(v, 4) for v in mism_m]}
    return out


def evaluate_set(states: list[dict[str, torch.Tensor]], ds: ImageDataset,
                 part: Partition) -> dict[str, Any]:
    """Everything measured on one client set (the module docstring's list)."""
    ups = uploads_from_states_ofl(states, part)
    y = ds.y_test
    lg = torch.stack([predict_logits(build_from_upload(u), ds.x_test) for u in ups])
    d = lg.mean(0)
    sm = lg.softmax(-1).mean(0)
    sizes = [u.num_samples for u in ups]
    fedavg = {name: pct(predict_logits(build_from_upload(replace(
        ups[0], state_dict=average_states([u.state_dict for u in ups], w))), ds.x_test), y)
        for name, w in (("weighted", sizes), ("unweighted", [1.0] * len(ups)))}
    cal = [ece_nll(z, y) for z in lg]
    d_cal, sm_cal = ece_nll(d, y), ece_nll(sm, y, probs=sm)
    # which client's argmax D follows where the clients disagree, and each client's share
    agree = [float((z.argmax(1) == d.argmax(1)).float().mean() * 100) for z in lg]
    return {
        "clients": [pct(z, y) for z in lg],
        "ensemble": pct(d, y), "mean_softmax": pct(sm, y),
        "fedavg_weighted": fedavg["weighted"], "fedavg_unweighted": fedavg["unweighted"],
        "clients_ece": [round(c[0], 3) for c in cal], "clients_nll": [round(c[1], 4) for c in cal],
        "ensemble_ece": d_cal[0], "ensemble_nll": d_cal[1],
        "mean_softmax_ece": sm_cal[0], "mean_softmax_nll": sm_cal[1],
        "clients_logits": [logit_stats(z) for z in lg], "ensemble_logits": logit_stats(d),
        "clients_agree_with_D": agree,
        "ensemble_per_class": per_class(d, y),
        "clients_per_class": [per_class(z, y) for z in lg],
        "weight_norm": [float(torch.cat([v.flatten() for k, v in s.items()
                                         if k.endswith("weight")]).norm()) for s in states],
        "bn": bn_stats(states, ds, part),
    }


def uploads_from_states_ofl(states: list[dict[str, torch.Tensor]], part: Partition
                            ) -> list[ClientUpload]:
    """ofl-keyed client states as uploads (``num_samples``: the partition's sizes)."""
    return [ClientUpload(client_id=i, arch="cnn_mnist", state_dict=s, num_classes=10,
                         in_channels=1, image_size=28, num_samples=len(ix))
            for i, (s, ix) in enumerate(zip(states, part.client_indices, strict=True))]


# ----------------------------------------------------------------------------- commands
def cmd_train(args: argparse.Namespace) -> None:
    ds = load_dataset("fmnist")
    part = make_partition(ds.y_train.numpy(), 5, "dirichlet", alpha=args.beta,
                          seed=args.partition_seed)
    for seed in args.seeds:
        for side in args.sides:
            path = args.out / f"b{args.beta}" / f"{side}_s{seed}.json"
            if path.is_file():
                print(f"skip β={args.beta} seed={seed} {side}: done", flush=True)
                continue
            print(f"run  β={args.beta} seed={seed} {side} ...", flush=True)
            t0 = time.perf_counter()
            if side == "public":
                states, info = train_public(args, seed)
            else:
                states, info = train_ofl(side, seed, ds, part, args.epochs)
            wall = round(time.perf_counter() - t0, 1)
            args.states.mkdir(parents=True, exist_ok=True)
            torch.save(states, args.states / f"b{args.beta}_{side}_s{seed}.pt")
            row = {"side": side, "beta": args.beta, "seed": seed, "epochs": args.epochs,
                   "partition_seed": args.partition_seed, "wall_s": wall, **info,
                   **evaluate_set(states, ds, part)}
            pub = args.states / f"b{args.beta}_public_s{seed}.pt"
            if side != "public" and pub.is_file():
                row["equal_to_public"], row["max_abs_diff_to_public"] = compare_states(
                    states, torch.load(pub, weights_only=True))
            write_json(path, row)
            print(f"     clients {[round(a, 1) for a in row['clients']]}, D "
                  f"{row['ensemble']:.2f}, softmax {row['mean_softmax']:.2f}, FedAvg "
                  f"{row['fedavg_unweighted']:.2f}, {wall:.0f} s"
                  + (f", equal to public {row['equal_to_public']}"
                     if "equal_to_public" in row else ""), flush=True)


def ms(values: list[float], digits: int = 2) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (1)"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f} " \
           f"({len(values)})"


def cmd_table(args: argparse.Namespace) -> None:
    """Per β and side, mean ± sd over client seeds."""
    for bdir in sorted(p for p in args.out.glob("b*") if p.is_dir()):
        rows = [json.loads(p.read_text()) for p in sorted(bdir.glob("*_s*.json"))]
        sides = [s for s in SIDES if any(r["side"] == s for r in rows)]
        print(f"\n### β = {bdir.name[1:]} (mean ± sd over client seeds, n)\n")
        print("| side | seeds | mean client | clients 0–4 (means) | D (mean logits) "
              "| mean softmax | FedAvg unweighted | FedAvg weighted |")
        print("|---|---|---|---|---|---|---|---|")
        for s in sides:
            rs = [r for r in rows if r["side"] == s]
            per_client = [ms([r["clients"][c] for r in rs], 1) for c in range(5)]
            print(f"| {s} | {','.join(str(r['seed']) for r in rs)} | "
                  f"{ms([statistics.mean(r['clients']) for r in rs])} | "
                  f"{' / '.join(p.split(' (')[0] for p in per_client)} | "
                  f"{ms([r['ensemble'] for r in rs])} | {ms([r['mean_softmax'] for r in rs])} | "
                  f"{ms([r['fedavg_unweighted'] for r in rs])} | "
                  f"{ms([r['fedavg_weighted'] for r in rs])} |")
        print("\n| side | client logit norm | D logit norm | client ECE % | client NLL | "
              "D ECE % | D NLL | client weight norm | BN1 mismatch |log var ratio| | "
              "BN2 mismatch | BN2 across-client sd of running var |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for s in sides:
            rs = [r for r in rows if r["side"] == s]

            def avg(key: str, rs: list[dict[str, Any]] = rs) -> list[float]:
                return [statistics.mean(r[key]) for r in rs]
            print(f"| {s} | {ms([statistics.mean(c['norm'] for c in r['clients_logits']) for r in rs])} | "  # noqa: E501
                  f"{ms([r['ensemble_logits']['norm'] for r in rs])} | "
                  f"{ms(avg('clients_ece'))} | {ms(avg('clients_nll'), 3)} | "
                  f"{ms([r['ensemble_ece'] for r in rs])} | {ms([r['ensemble_nll'] for r in rs], 3)} | "  # noqa: E501
                  f"{ms(avg('weight_norm'))} | "
                  f"{ms([statistics.mean(r['bn']['conv.1']['mismatch_logvar']) for r in rs], 3)} | "  # noqa: E501
                  f"{ms([statistics.mean(r['bn']['conv.5']['mismatch_logvar']) for r in rs], 3)} | "  # noqa: E501
                  f"{ms([r['bn']['conv.5']['across_clients_sd_var'] for r in rs], 3)} |")
        for line in identity_lines(args.states, bdir.name[1:], sides) if args.states else []:
            print(line)


def compare_states(mine: list[dict[str, torch.Tensor]], theirs: list[dict[str, torch.Tensor]]
                   ) -> tuple[list[bool], list[float]]:
    """Per client: whether every tensor is equal (``torch.equal``), and the largest |Δ|."""
    equal = [all(torch.equal(a[k], b[k]) for k in a) for a, b in zip(mine, theirs, strict=True)]
    diff = [max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
            for a, b in zip(mine, theirs, strict=True)]
    return equal, diff


def identity_lines(states: Path, beta: str, sides: list[str]) -> list[str]:
    """Each ofl side's saved clients against the public code's of the same seed."""
    out = []
    for pub in sorted(states.glob(f"b{beta}_public_s*.pt")):
        seed = pub.stem.rsplit("_s", 1)[1]
        theirs = torch.load(pub, weights_only=True)
        for side in sides:
            mine = states / f"b{beta}_{side}_s{seed}.pt"
            if side == "public" or not mine.is_file():
                continue
            equal, diff = compare_states(torch.load(mine, weights_only=True), theirs)
            out.append(f"- {side} seed {seed} against public: torch.equal per client {equal}, "
                       f"max |Δ| {[float(f'{v:.2g}') for v in diff]}")
    return out


@torch.no_grad()
def recalibrated(state: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
    """``state`` with its BN running statistics re-estimated from the final weights on the
    client's own images ``x`` (uint8; cumulative average over batches of 128, train-mode
    forwards, no weight change)."""
    model = init_model("cnn_mnist", 10, 1, 28, seed=0)
    model.load_state_dict(state)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    for i in range(0, len(x), 128):
        model(x[i:i + 128].float().div(255.0))
    return {k: v.clone() for k, v in model.state_dict().items()}


def analyse_set(states: list[dict[str, torch.Tensor]], ds: ImageDataset, part: Partition
                ) -> dict[str, Any]:
    """Ensembles of one client set under swaps that need no training: each client's logits
    divided by their mean per-sample std over classes (equal logit scale), and the clients
    with BN statistics re-estimated from their final weights on their own data."""
    y = ds.y_test
    ups = uploads_from_states_ofl(states, part)
    lg = torch.stack([predict_logits(build_from_upload(u), ds.x_test) for u in ups])
    scaled = lg / lg.std(dim=2, keepdim=True).mean(dim=1, keepdim=True)
    rec = [recalibrated(s, ds.x_train[torch.as_tensor(ix, dtype=torch.long)])
           for s, ix in zip(states, part.client_indices, strict=True)]
    rups = uploads_from_states_ofl(rec, part)
    rlg = torch.stack([predict_logits(build_from_upload(u), ds.x_test) for u in rups])
    avg = average_states(rec, [1.0] * len(rec))
    fedavg_rec = pct(predict_logits(build_from_upload(replace(rups[0], state_dict=avg)),
                                    ds.x_test), y)
    return {"D": pct(lg.mean(0), y), "D_equal_scale": pct(scaled.mean(0), y),
            "clients_recal": [pct(z, y) for z in rlg], "D_recal": pct(rlg.mean(0), y),
            "mean_softmax_recal": pct(rlg.softmax(-1).mean(0), y),
            "fedavg_unweighted_recal": fedavg_rec,
            "clients_logit_norm_recal": [float(z.norm(dim=1).mean()) for z in rlg]}


def cmd_analyse(args: argparse.Namespace) -> None:
    """:func:`analyse_set` on every saved client set of ``--beta`` (missing ones only);
    rows in ``OUT/b<β>/analysis.json``; prints mean ± sd per side."""
    ds = load_dataset("fmnist")
    part = make_partition(ds.y_train.numpy(), 5, "dirichlet", alpha=args.beta,
                          seed=args.partition_seed)
    path = args.out / f"b{args.beta}" / "analysis.json"
    done = json.loads(path.read_text()) if path.is_file() else {}
    for f in sorted(args.states.glob(f"b{args.beta}_*_s*.pt")):
        name = f.stem[len(f"b{args.beta}_"):]
        if name not in done:
            done[name] = analyse_set(torch.load(f, weights_only=True), ds, part)
            write_json(path, done)
    print(f"\n### β = {args.beta}: swaps without training (mean ± sd over client seeds)\n")
    print("| side | D | D, equal logit scale | clients, BN re-est. (mean) | D, BN re-estimated "
          "| mean softmax, BN re-est. | FedAvg unweighted, BN re-est. |")
    print("|---|---|---|---|---|---|---|")
    for side in SIDES:
        rs = [v for k, v in done.items() if k.rsplit("_s", 1)[0] == side]
        if rs:
            print(f"| {side} | {ms([r['D'] for r in rs])} | {ms([r['D_equal_scale'] for r in rs])}"
                  f" | {ms([statistics.mean(r['clients_recal']) for r in rs])} | "
                  f"{ms([r['D_recal'] for r in rs])} | {ms([r['mean_softmax_recal'] for r in rs])}"
                  f" | {ms([r['fedavg_unweighted_recal'] for r in rs])} |")


def main() -> None:
    ap, parsers = subcommands(__doc__, ("train", "table", "analyse"),
                              Path("results/dense_public/clients"))
    for name, p in parsers.items():
        p.add_argument("--states", type=Path, required=name != "table",
                       help="where the client state dicts go (outside the repository; "
                            "table: compare them bit for bit when given)")
        if name == "table":
            continue
        p.add_argument("--beta", type=float, required=True)
        p.add_argument("--partition-seed", type=int, default=1)
        if name == "analyse":
            continue
        p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
        p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES[:3]))
        p.add_argument("--public-dir", type=Path, required=True,
                       help="local copy of DENSE's public code: code/ and run_public.py")
        p.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args()
    if args.cmd == "table":
        cmd_table(args)
        return
    torch.set_num_threads(1)
    if args.cmd == "analyse":
        cmd_analyse(args)
        return
    args.public_dir = args.public_dir.resolve()
    cmd_train(args)


if __name__ == "__main__":
    main()
