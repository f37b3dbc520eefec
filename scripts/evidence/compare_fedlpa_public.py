"""FedLPA's public code against ofl's FedLPA on identical clients: the factors and the server.

The public code (``lebronlambert/FedLPA_NeurIPS2024``, commit 08dd729) computes each client's
K-FAC factors inside ``experiments_our.train_net_blockoffline`` (after local training) and
aggregates in the ``__main__`` block of ``experiments_our.py`` (the closed form
``inverse(Ḡ) @ Z @ inverse(Ā)`` and ``newton_solve_auto_gradient``). This script trains
clients with ofl (``simplecnn_mnist``, one shared initialisation, the scripts' local training),
then on those same trained clients and the same local data runs

- the public factor pass: its ``train_net_blockoffline`` with ``epochs=0`` (so only the
  factor loop and the damping run), with its ``KFACOptimizer`` hooks, on a DataLoader of the
  client's data (batch 64, the client's order) — the function's source taken verbatim from
  ``experiments_our.py`` and executed in a namespace that provides what it imports;
- the public server: its closed form (the one line, transcribed) and its
  ``newton_solve_auto_gradient`` (verbatim), per layer, with its n_k/n weights;
- ofl's ``kfac_factors`` and ``fedlpa`` server;

and prints the largest relative difference of each factor, each layer's aggregated weights and
the test accuracies of both solutions. Nothing of the public code is committed: ``--mirror``
is a bare git copy of the repository
(``git clone --bare https://github.com/lebronlambert/FedLPA_NeurIPS2024 FedLPA_NeurIPS2024.git``).

    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/evidence/compare_fedlpa_public.py \\
        --mirror FedLPA_NeurIPS2024.git \\
        [--dataset fmnist] [--beta 0.5] [--clients 10] [--local-epochs 10] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import json
import logging
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn, optim

from ofl_core.clients import LocalTrainConfig
from ofl_core.evaluate import accuracy
from ofl_core.experiment import ExperimentConfig, setup_experiment
from ofl_core.fedlpa.factors import factor_layers, layer_matrix
from ofl_core.fedlpa.server import FedLPAConfig, aggregate, attach_factors
from ofl_core.server import average_states
from ofl_core.uploads import build_from_upload


def public_functions(mirror: str, commit: str, where: Path) -> dict:
    """kfac.py and kfac_utils.py exported from the mirror and imported; the two functions of
    experiments_our.py this comparison calls, compiled from their source text."""
    for f in ("kfac.py", "kfac_utils.py", "experiments_our.py"):
        text = subprocess.run(["git", "-C", mirror, "show", f"{commit}:{f}"], check=True,
                              capture_output=True, text=True).stdout
        (where / f).write_text(text)
    sys.path.insert(0, str(where))
    from kfac import KFACOptimizer  # the public code's

    src = (where / "experiments_our.py").read_text()
    wanted = {"train_net_blockoffline", "newton_solve_auto_gradient"}
    tree = ast.parse(src)
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {n.name for n in nodes} == wanted, "the public functions moved"

    def compute_accuracy(model, loader, get_confusion_matrix=False, device="cpu"):
        return (0.0, None) if get_confusion_matrix else 0.0  # only logged by the public code

    ns = {"torch": torch, "nn": nn, "optim": optim, "copy": copy, "sqrt": math.sqrt,
          "KFACOptimizer": KFACOptimizer, "logger": logging.getLogger("fedlpa-public"),
          "compute_accuracy": compute_accuracy, "param_shapes": {}}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "experiments_our.py", "exec"), ns)
    return ns


def public_factors(ns: dict, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                   coor: float) -> dict:
    """The public factor pass (``train_net_blockoffline`` with 0 epochs) on (x, y)."""
    net = copy.deepcopy(model).train().requires_grad_(True)
    names = [n for n, _ in factor_layers(net)]
    f_local = {n: {} for n in names}
    data = torch.utils.data.TensorDataset(x.float() / 255.0, y)
    loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=False)
    args = argparse.Namespace(optimizer="sgd", reg=1e-5, rho=0.9, eta=0.0, momentum=0.0,
                              stat_decay=0.95, damping=0.001, kl_clip=0.001, weight_decay=0,
                              TCov=10, TInv=100)
    ns["train_net_blockoffline"](0, net, f_local, {}, {n: {} for n in names}, len(y), loader,
                                 loader, 0, 0.01, coor, args, device="cpu")
    return {n: (f_local[n][0], f_local[n][1]) for n in names}


def public_server(ns: dict, uploads: list, factors: list[dict]) -> tuple[dict, dict]:
    """The public server's two solutions per layer (experiments_our.py l. 590–666)."""
    n = [u.num_samples for u in uploads]
    freqs = [k / sum(n) for k in n]
    template = build_from_upload(uploads[0])
    biased, newton = {}, {}
    for name, mod in factor_layers(template):
        bkey = f"{name}.bias" if mod.bias is not None else None
        mats = [layer_matrix(u.state_dict[f"{name}.weight"],
                             u.state_dict[bkey] if bkey else None) for u in uploads]
        a_k = [f[name][0] for f in factors]
        g_k = [f[name][1] for f in factors]
        z = sum(w * g @ m @ a for w, m, a, g in zip(freqs, mats, a_k, g_k, strict=True))
        a_bar = sum(w * a for w, a in zip(freqs, a_k, strict=True))
        g_bar = sum(w * g for w, g in zip(freqs, g_k, strict=True))
        biased[name] = torch.inverse(g_bar) @ z @ torch.inverse(a_bar)
        newton[name] = ns["newton_solve_auto_gradient"](freqs, a_k, g_k, z, "cpu").detach()
    return biased, newton


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def as_state(uploads: list, mats: dict) -> dict:
    """FedAvg for the other tensors, the layer matrices put back (the public code's layout)."""
    state = average_states([u.state_dict for u in uploads], [u.num_samples for u in uploads])
    template = build_from_upload(uploads[0])
    for name, mod in factor_layers(template):
        m, shape = mats[name], state[f"{name}.weight"].shape
        if mod.bias is not None:
            state[f"{name}.weight"], state[f"{name}.bias"] = m[:, :-1].reshape(shape), m[:, -1]
        else:
            state[f"{name}.weight"] = m.reshape(shape)
    return state


def one_seed(args: argparse.Namespace, ns: dict, seed: int) -> dict:
    cfg = ExperimentConfig(dataset=args.dataset, partition="dirichlet", alpha=args.beta,
                           num_clients=args.clients, seed=seed, progress=False,
                           local=LocalTrainConfig(arch="simplecnn_mnist",
                                                  epochs=args.local_epochs, batch_size=64,
                                                  lr=0.01, momentum=0.9, weight_decay=1e-5))
    setup = setup_experiment(cfg)
    ds, part = setup.dataset, setup.partition
    mcfg = FedLPAConfig(coor=args.coor)
    t0 = time.perf_counter()
    ours_up = attach_factors(setup.uploads, ds, part, mcfg, "cpu")
    t_ours_f = time.perf_counter() - t0
    pub_f, t0 = [], time.perf_counter()
    for u in setup.uploads:
        idx = torch.as_tensor(part.client_indices[u.client_id])
        pub_f.append(public_factors(ns, build_from_upload(u), ds.x_train[idx],
                                    ds.y_train[idx], args.coor))
    t_pub_f = time.perf_counter() - t0
    factor_diff = max(rel(o, p) for u, pf in zip(ours_up, pub_f, strict=True)
                      for name in pf for o, p in zip(u.curvature[name], pf[name], strict=True))
    t0 = time.perf_counter()
    refined, biased, _ = aggregate(ours_up, mcfg, "cpu")
    t_ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pb, pn = public_server(ns, setup.uploads, pub_f)
    t_pub_s = time.perf_counter() - t0
    pub_states = {"biased": as_state(setup.uploads, pb), "newton": as_state(setup.uploads, pn)}
    ours_states = {"biased": biased, "newton": refined}
    out = {"seed": seed, "client_accs": setup.client_accs, "ensemble": setup.ensemble_acc,
           "factor_max_rel_diff": factor_diff,
           "seconds": {"factors_ours": t_ours_f, "factors_public": t_pub_f,
                       "server_ours": t_ours_s, "server_public": t_pub_s}}
    for key in ("biased", "newton"):
        accs = {}
        for side, states in (("ours", ours_states), ("public", pub_states)):
            model = build_from_upload(dataclasses.replace(setup.uploads[0],
                                                          state_dict=states[key], client_id=-1))
            accs[side] = accuracy(model, ds.x_test, ds.y_test)
        out[key] = {"acc_ours": accs["ours"], "acc_public": accs["public"],
                    "weights_max_rel_diff": max(rel(ours_states[key][k], pub_states[key][k])
                                                for k in pub_states[key])}
    fedavg = build_from_upload(dataclasses.replace(
        setup.uploads[0], client_id=-1,
        state_dict=average_states([u.state_dict for u in setup.uploads],
                                  [u.num_samples for u in setup.uploads])))
    out["fedavg"] = accuracy(fedavg, ds.x_test, ds.y_test)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", required=True, help="a bare git copy of the public code")
    ap.add_argument("--commit", default="08dd729")
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--beta", type=float, default=0.5)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--local-epochs", type=int, default=10)
    ap.add_argument("--coor", type=float, default=0.999)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", help="append one JSON line per seed here")
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        ns = public_functions(args.mirror, args.commit, Path(tmp))
        for seed in args.seeds:
            row = one_seed(args, ns, seed)
            print(json.dumps(row))
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps({"args": vars(args), **row}) + "\n")


if __name__ == "__main__":
    main()
