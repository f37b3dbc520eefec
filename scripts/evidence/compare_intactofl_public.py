"""IntactOFL's server against its public code on identical experts, partition and budget.

The public code (``zenghui9977/IntactOFL``, commit e8f86ef500396f68dbe33663ccad9049f6404a3a,
read in docs/decisions/intactofl.md) ships one config, for CIFAR-10 with resnet18
(``yaml_config/oneshot/cifar10_clients5_dir0.1.yaml``). Here it runs that config with the
dataset switched to FashionMNIST (its ``NORMALIZE_DICT`` entry: mean 0.2860, std 0.3530, 28 px)
and the model to its ``lenet`` (the one model of its zoo that takes 1×28×28 images; no
BatchNorm, so the generator's L_BN is 0 on both sides), every other constant as shipped (5
clients, Dir(0.1), T_G = 30, batches 128, gate SGD 0.01, ODS step 8, …) except the number of
server epochs. The public code trains the clients once (its overlapping Dirichlet shards, its
local training); both servers then use those same experts — the public
``intactofl_server_process`` and ofl's ``intactofl`` (``authors_code``; ``ofl_paper``: the
``paper`` preset at the same sizes) on the experts mapped onto ofl's ``simplecnn_mnist`` (the
same LeNet) — and their per-epoch test accuracies (the mixture, i.e. the deployed MoE, and the
uniform ensemble) are printed side by side. Subcommands:

``setup``
    export the public code's ``source/`` folder from a local git copy (``--mirror``: a bare
    git directory, or the ``.git`` of a clone) into ``PUBLIC/code`` with text replacements:
    data loaders without worker processes or pinned memory; ``algo_main.py`` reads its config
    from ``$IOFL_CONFIG`` and its seed from ``$IOFL_CLIENT_SEED`` instead of the hard-coded
    YAML and 1; ``oneshot_intactofl.py`` calls a hook module (``ofl_hook``, made by the
    launcher) before the server (keep the clients and stop, or load the kept clients and seed
    the server), when the gate's epochs start, before each gate step (record its loss) and
    after each epoch (record the code's own mixture accuracy, the uniform ensemble's — under
    ``fork_rng``, so that the code's random stream is not moved — and the seconds). Writes
    ``PUBLIC/run_public.py``, the launcher (the shipped YAML with this comparison's changes,
    ``visdom`` stubbed, one torch thread, the device ``cpu``). ``PUBLIC`` must lie outside
    this repository; nothing of the public code is committed.
``clients``
    train the clients with the public code (``--local-epochs``; its partition with
    ``--num-users``/``--alpha``/``--seed``); keep their state dicts (``OUT/clients.pt``) and
    the partition's index lists (``OUT/partition.json``); check the mapping onto ofl
    (identical logits ≤ 1e-4 on 256 test images under each side's input normalisation, the
    same uniform-ensemble test accuracy).
``run``
    the servers, one (side, seed) at a time; a finished one is skipped. ``public``: the
    public code's server on the kept clients (its partition drawn again and checked against
    the kept one), seeded with ``setup_seed(S)`` just before ``intactofl_server_process``;
    ``ofl`` / ``ofl_paper``: ofl's ``intactofl`` on the same clients (the checks above
    repeated; the run stops if they fail), server seed S, one thread, float32. Writes
    ``OUT/<side>_s<seed>.json``: per epoch the mixture's and the ensemble's test accuracy (%),
    the gate loss (mean over the pool's batches) and the wall seconds (each side's own test
    evaluation of the mixture included, the ensemble's not).
``coupled``
    both servers' epochs in this process, fed the same random draws: the code's
    ``IntactOFLSynthesizer.synthesize`` and ``intactofl_moe_train`` (imported from
    ``PUBLIC/code``) beside ofl's ``synthesis_stage`` and ``gate_stage``, with the same
    generator weights, z and y (replayed from torch's RNG in the code's order), gate weights,
    ODS draws and pool order, both gate passes on the code's PNG pool; prints per epoch the
    synthetic batches' difference, the gate weights' difference and both mixtures' test
    accuracy, and at the first epoch the code against itself with one gate weight one ulp
    apart (how far rounding alone moves the synthesis).
``table``
    every (side, seed)'s curve, every ``--every`` epochs and at the last; per side the last
    epoch (mean over seeds), the best, the seconds per epoch, the ensemble's accuracy; the
    gate-loss curves.

The code's FashionMNIST normalisation is ofl's ``input_norm="fmnist"`` (mean 0.2860, std 0.3530;
the script checks the library's entry, and registers it for its own process on a library that
predates it), so ofl's experts, gate and ODS step see what the code's do (``authors_code``: the
gate in the code's normalisation of the dataset, the ODS step 8 converted to [0, 1] pixels with
that std, the 8-bit pool floored as the code's ``astype('uint8')``).

Commands (one thread each, one heavy process at a time; PUBLIC and OUT outside the checkout):

    PYTHONPATH=. python scripts/evidence/compare_intactofl_public.py setup \\
        --mirror IntactOFL.git --public-dir PUBLIC
    PYTHONPATH=. python scripts/evidence/compare_intactofl_public.py clients \\
        --public-dir PUBLIC --out OUT [--local-epochs 5 --alpha 0.1 --num-users 5 --seed 1]
    PYTHONPATH=. python scripts/evidence/compare_intactofl_public.py run --public-dir PUBLIC \\
        --out OUT --sides public ofl --seeds 1 2 --epochs 5
    PYTHONPATH=. python scripts/evidence/compare_intactofl_public.py coupled \\
        --public-dir PUBLIC --out OUT --epochs 5
    PYTHONPATH=. python scripts/evidence/compare_intactofl_public.py table --out OUT

A copy of the public code: the mirror above, or ``git clone
https://github.com/zenghui9977/IntactOFL`` and ``--mirror IntactOFL/.git`` (``setup`` exports
commit e8f86ef, whatever is checked out).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import sys
import time
import types
from pathlib import Path
from typing import Any

import _public_code as shared
import numpy as np
import torch
from torch import nn

import ofl_core
from ofl_core.data.datasets import ImageDataset, default_data_root, load_dataset
from ofl_core.distill.teachers import TeacherBank
from ofl_core.evaluate import accuracy, client_accuracies
from ofl_core.intactofl.server import IntactOFLConfig
from ofl_core.models.base import INPUT_NORMS
from ofl_core.registry import run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload, build_from_upload

REPO = Path(ofl_core.__file__).resolve().parents[1]
COMMIT = "e8f86ef"
SIDES = ("public", "ofl", "ofl_paper")
#: the code's FashionMNIST normalisation (dataset_helper.py:11), under this name in ofl
NORM, CODE_NORM = "fmnist", (0.2860, 0.3530)
#: text replacements in the exported code, per file name ("*" = every .py file)
STAND_INS: dict[str, list[tuple[str, str]]] = {
    "*": [("num_workers=4", "num_workers=0"), ("pin_memory=True", "pin_memory=False")],
    "algo_main.py": [
        ("setup_seed(1)", "setup_seed(int(os.environ['IOFL_CLIENT_SEED']))"),
        ("'./yaml_config/oneshot/cifar10_clients5_dir0.1.yaml'", "os.environ['IOFL_CONFIG']")],
    "oneshot_intactofl.py": [
        ("from commona_libs import *\n", "from commona_libs import *\nimport ofl_hook\n"),
        ("    best_acc = -1\n", "    best_acc = -1\n    ofl_hook.start()\n"),
        ("        loss.backward()\n",
         "        ofl_hook.gate_loss(loss)\n        loss.backward()\n"),
        ("            scheduler.step()\n",
         "            ofl_hook.epoch(e, acc, student_model, test_loader)\n"
         "            scheduler.step()\n"),
        ("    global_model, best_acc = intactofl_server_process(",
         "    local_models = ofl_hook.before_server(local_models, client_idx_map)\n"
         "    global_model, best_acc = intactofl_server_process(")],
}
LAUNCHER = '''"""Run IntactOFL's public code (patched copy in code/) on a CPU; written by
scripts/evidence/compare_intactofl_public.py of the ofl repository.

    python run_public.py --root DIR --threads N --overrides F.json --mode clients|server
        --client-seed S0 --clients F.pt --partition F.json [--seed S --record F.json]

clients: train the clients, write their state dicts and the partition, stop before the server.
server: draw the partition again (it must equal F.json), load the clients from F.pt, seed the
server with setup_seed(S), run it; F.json gets each epoch's accuracies and seconds.
"""
import argparse
import json
import os
import runpy
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ap = argparse.ArgumentParser()
ap.add_argument("--root", required=True)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--overrides", required=True)
ap.add_argument("--mode", choices=("clients", "server"), required=True)
ap.add_argument("--client-seed", type=int, default=1)
ap.add_argument("--clients", required=True)
ap.add_argument("--partition", required=True)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--record")
a = ap.parse_args()
root = Path(a.root).resolve()
root.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
sys.path.insert(0, str(HERE / "code"))
import torch  # noqa: E402
import yaml  # noqa: E402

torch.set_num_threads(a.threads)
visdom = types.ModuleType("visdom")  # imported by commona_libs, never used
visdom.Visdom = object
sys.modules.setdefault("visdom", visdom)


def merge(base, over):
    for k, v in over.items():
        if isinstance(v, dict):
            merge(base.setdefault(k, {}), v)
        else:
            base[k] = v
    return base


shipped = HERE / "code" / "yaml_config" / "oneshot" / "cifar10_clients5_dir0.1.yaml"
config = merge(yaml.safe_load(shipped.read_text()), json.loads(Path(a.overrides).read_text()))
(root / "config.yaml").write_text(yaml.safe_dump(config))
os.environ["IOFL_CONFIG"] = str(root / "config.yaml")
os.environ["IOFL_CLIENT_SEED"] = str(a.client_seed)

hook = types.ModuleType("ofl_hook")
record = {"acc": [], "ensemble": [], "epoch_seconds": [], "gate_loss": []}
mark = [time.perf_counter()]
losses = []


def before_server(local_models, client_idx_map):
    lists = {str(k): [int(i) for i in v] for k, v in sorted(client_idx_map.items())}
    if a.mode == "clients":
        torch.save([m.state_dict() for m in local_models], a.clients)
        Path(a.partition).write_text(json.dumps(lists))
        sys.exit(0)
    if json.loads(Path(a.partition).read_text()) != lists:
        sys.exit("the partition drawn now differs from the kept one")
    for m, s in zip(local_models, torch.load(a.clients, weights_only=True), strict=True):
        m.load_state_dict(s)
    from commona_libs import setup_seed

    setup_seed(a.seed)
    return local_models


def start():
    mark[0] = time.perf_counter()


def gate_loss(loss):
    losses.append(float(loss))


def epoch(e, acc, ensemble, test_loader):
    from oneshot_algorithms.utils import test_acc

    record["epoch_seconds"].append(time.perf_counter() - mark[0])
    record["acc"].append(100.0 * acc)
    record["gate_loss"].append(sum(losses) / len(losses))
    losses.clear()
    with torch.random.fork_rng(devices=[]):  # the shuffled test loader draws from torch's RNG
        record["ensemble"].append(100.0 * test_acc(ensemble, test_loader, "cpu"))
    Path(a.record).write_text(json.dumps(record))
    mark[0] = time.perf_counter()


hook.before_server, hook.start, hook.epoch = before_server, start, epoch
hook.gate_loss = gate_loss
sys.modules["ofl_hook"] = hook
os.chdir(root)
script = str(HERE / "code" / "algo_main.py")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
'''


def setup(args: argparse.Namespace) -> None:
    """Export the public code into PUBLIC/code with the stand-ins; write the launcher."""
    pub = Path(args.public_dir).resolve()
    if pub.is_relative_to(REPO):
        sys.exit(f"{pub} is inside the repository; the public code must stay outside it")
    changed = shared.export_public_code(args.mirror, args.commit, pub / "code", STAND_INS, "source")
    (pub / "run_public.py").write_text(LAUNCHER)
    print(f"public code {args.commit} in {pub / 'code'}; stand-ins in {', '.join(changed)}")


def public_config(meta: dict, local_epochs: int, epochs: int) -> dict:
    """This comparison's changes to the shipped YAML: FashionMNIST from ofl's data root, the
    code's lenet, m clients and α, the CPU, no resume, E gate epochs."""
    return {"exp_name": "intactofl_cmp", "device": "cpu", "resume": False,
            "dataset": {"data_name": "FMNIST", "root_path": str(default_data_root()),
                        "channels": 1, "image_size": 28, "num_classes": 10},
            "distribution": {"type": "dirichlet", "alpha": meta["alpha"]},
            "client": {"num_clients": meta["num_clients"]},
            "server": {"model_name": "lenet", "local_epochs": local_epochs},
            "intactofl": {"epochs": epochs}}


def launch(args: argparse.Namespace, out: Path, root: Path, meta: dict, mode: str,
           local_epochs: int, extra: list[str], log: Path) -> float:
    """The public code in a fresh process under ``root`` (its working folder: the pool, its
    logs), the class-index cache shared through ``OUT/preprocessed_data``."""
    pub = Path(args.public_dir).resolve()
    load_dataset("fmnist")  # unpacks the files into ofl's data root, where torchvision looks
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(root / "checkpoints", ignore_errors=True)  # the code's pool outlives a run
    cache = out / "preprocessed_data"
    cache.mkdir(exist_ok=True)
    if not (root / "preprocessed_data").exists():
        (root / "preprocessed_data").symlink_to(cache)
    overrides = root / "overrides.json"
    overrides.write_text(json.dumps(public_config(meta, local_epochs, args.epochs)))
    cmd = [sys.executable, str(pub / "run_public.py"), "--root", str(root), "--threads",
           str(args.threads), "--overrides", str(overrides), "--mode", mode, "--client-seed",
           str(meta["client_seed"]), "--clients", str(out / "clients.pt"), "--partition",
           str(out / "partition.json"), *extra]
    return shared.run_logged(cmd, args.threads, log)


#: the public ``LeNet``'s state-dict keys → ofl's ``simplecnn_mnist`` (the same layers)
KEY_MAP = {"conv1.": "conv.0.", "conv2.": "conv.3.", "fc1.": "hidden.0.", "fc2.": "hidden.2.",
           "fc3.": "fc."}


def register_norm() -> None:
    """Check that ofl's ``"fmnist"`` normalisation is the code's (library entry since
    ``INPUT_NORMS`` holds it; registered here in this process on an older library)."""
    if INPUT_NORMS.setdefault(NORM, CODE_NORM) != CODE_NORM:
        sys.exit(f"ofl defines input_norm {NORM!r} as {INPUT_NORMS[NORM]}, not {CODE_NORM}")


def ofl_uploads(out: Path) -> list[ClientUpload]:
    register_norm()
    states = torch.load(out / "clients.pt", weights_only=True)
    lists = json.loads((out / "partition.json").read_text())
    return [ClientUpload(client_id=k, arch="simplecnn_mnist", num_classes=10, in_channels=1,
                         image_size=28, num_samples=len(lists[str(k)]),
                         state_dict={KEY_MAP[p] + n[len(p):]: v for n, v in s.items()
                                     for p in KEY_MAP if n.startswith(p)},
                         model_kwargs={"input_norm": NORM})
            for k, s in enumerate(states)]


def public_nets(pub: Path, states: list[dict]) -> list[nn.Module]:
    """The clients as the public code's own ``LeNet`` (its models.py, for the checks only)."""
    spec = importlib.util.spec_from_file_location("intactofl_public_models",
                                                  pub / "code" / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    nets = []
    for s in states:
        net = module.LeNet(num_classes=10, channels=1).eval()
        net.load_state_dict(s)
        nets.append(net)
    return nets


def check_experts(pub: Path, out: Path, ds: ImageDataset) -> dict:
    """The public nets on the code's normalised test images (ToTensor, then Normalize) and
    ofl's experts on [0, 1] images: the largest logit difference on 256 test images, each
    side's uniform-ensemble test accuracy and ofl's per-client accuracies."""
    uploads = ofl_uploads(out)
    nets = public_nets(pub, torch.load(out / "clients.pt", weights_only=True))
    mean, std = CODE_NORM
    with torch.no_grad():
        xn = (ds.x_test.float().div(255) - mean) / std
        pub_logits = torch.stack([net(xn) for net in nets])
    x = ds.x_test[:256].float() / 255
    with torch.no_grad():
        diff = max(float((net(xn[:256]) - build_from_upload(u)(x)).abs().max())
                   for net, u in zip(nets, uploads, strict=True))
    ens_public = float((pub_logits.mean(0).argmax(1) == ds.y_test).float().mean() * 100.0)
    client_accs, ens_ofl = client_accuracies(uploads, ds)
    return {"logit_max_diff": diff, "ensemble_public_nets": ens_public,
            "ensemble_ofl": ens_ofl, "client_accs": client_accs}


def checked_experts(pub: Path, out: Path, ds: ImageDataset) -> dict:
    check = check_experts(pub, out, ds)
    print(f"experts: logits differ by at most {check['logit_max_diff']:.2g}; uniform "
          f"ensemble {check['ensemble_public_nets']:.2f} (public nets) / "
          f"{check['ensemble_ofl']:.2f} (ofl); clients "
          f"{[round(a, 1) for a in check['client_accs']]}")
    if check["logit_max_diff"] > 1e-4:
        sys.exit("the mapped experts' logits differ from the public nets' by more than 1e-4")
    if check["ensemble_public_nets"] != check["ensemble_ofl"]:
        sys.exit("the uniform ensemble's test accuracy differs between the two sides")
    return check


def clients(args: argparse.Namespace) -> None:
    """Train the clients with the public code; keep them and the partition; check them."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    meta = {"num_clients": args.num_users, "alpha": args.alpha,
            "local_epochs": args.local_epochs, "client_seed": args.seed}
    args.epochs = 1  # the server is never reached
    secs = launch(args, out, out / "public_clients", meta, "clients", args.local_epochs, [],
                  out / "clients.log")
    lists = json.loads((out / "partition.json").read_text())
    sizes = [len(v) for v in lists.values()]
    unique = len({i for v in lists.values() for i in v})
    check = checked_experts(Path(args.public_dir).resolve(), out, load_dataset("fmnist"))
    meta.update(train_seconds=round(secs, 1), sizes=sizes, assignments=sum(sizes),
                unique_images=unique, **check)
    (out / "clients.json").write_text(json.dumps(meta, indent=1))
    print(f"clients trained in {secs:.0f} s; shard sizes {sizes} ({sum(sizes)} assignments "
          f"of {unique} distinct images)")


class MeanLogits(nn.Module):
    """The uniform ensemble (mean of the experts' logits) of a bank that stays outside the
    module's parameters, for ``accuracy``."""

    def __init__(self, bank: TeacherBank) -> None:
        super().__init__()
        self._bank = [bank]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._bank[0](x)


def run_ofl(args: argparse.Namespace, out: Path, seed: int, preset: str) -> dict:
    ds = load_dataset("fmnist")
    check = checked_experts(Path(args.public_dir).resolve(), out, ds)
    uploads = ofl_uploads(out)
    # the shipped YAML's sizes (intactofl section), spelt out; T_G and the ODS step are the
    # preset's (authors_code: the code's 30 and 8; paper: 20 and 8/255)
    cfg = IntactOFLConfig.for_preset(preset, epochs=args.epochs, batch_size=128,
                                     kd_batch_size=128, kd_lr=0.01, kd_momentum=0.9,
                                     kd_weight_decay=1e-4, nz=256, ngf=64, g_lr=1e-3,
                                     amp=False)
    rec: dict[str, list[float]] = {"ensemble": [], "epoch_seconds": []}
    mark = [time.perf_counter()]

    def evaluate(moe: nn.Module) -> float:
        acc = accuracy(moe, ds.x_test, ds.y_test)
        rec["epoch_seconds"].append(time.perf_counter() - mark[0])
        rec["ensemble"].append(accuracy(MeanLogits(moe.bank), ds.x_test, ds.y_test))
        mark[0] = time.perf_counter()
        return acc

    ctx = ServerContext(num_classes=10, in_channels=1, image_size=28, seed=seed,
                        evaluate=evaluate, progress=False, dataset="fmnist")
    t0 = time.perf_counter()
    res = run_method("intactofl", uploads, cfg, ctx)
    keep = ("pool_size", "input_norm", "gate_loss", "generator_loss", "params",
            "params_one_expert", "flops_per_image", "flops_one_expert")
    return {"curve": res.curve, **rec, "seconds": round(sum(rec["epoch_seconds"]), 1),
            "wall_seconds": round(time.perf_counter() - t0, 1), "preset": preset,
            "steps_per_epoch": cfg.steps_per_epoch, "ods_eps": cfg.ods_eps,
            "checks": check, **{k: res.extras.get(k) for k in keep}}


def run_public(args: argparse.Namespace, out: Path, seed: int) -> dict:
    meta = json.loads((out / "clients.json").read_text())
    root = out / f"public_s{seed}"
    record = root / "record.json"
    record.unlink(missing_ok=True)
    secs = launch(args, out, root, meta, "server", 0,
                  ["--seed", str(seed), "--record", str(record)], out / f"public_s{seed}.log")
    r = json.loads(record.read_text())
    pool = len(list((root / "checkpoints").rglob("*.png")))
    return {"curve": r["acc"], "ensemble": r["ensemble"], "epoch_seconds": r["epoch_seconds"],
            "gate_loss": r["gate_loss"], "seconds": round(sum(r["epoch_seconds"]), 1),
            "wall_seconds": round(secs, 1), "pool_size": pool}


def run(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()
    shared.run_sides(
        args, lambda side, seed: run_public(args, out, seed) if side == "public" else
        run_ofl(args, out, seed, "paper" if side == "ofl_paper" else "authors_code"),
        lambda row: f"last {row['curve'][-1]:.2f}, best {max(row['curve']):.2f}, ensemble "
                    f"{row['ensemble'][-1]:.2f}, {row['seconds'] / len(row['curve']):.0f} s "
                    "per epoch")


class _Batches:
    """A fixed list of (images, labels) batches, in place of a shuffled pool (ofl's
    ``ImagePool.labelled_batches``) or of the code's PNG loader (``get_data``)."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.batches = batches

    def labelled_batches(self, batch_size: int, generator: torch.Generator
                         ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.batches

    def get_data(self, labeled: bool = True) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.batches


def public_modules(pub: Path, work: Path) -> tuple[Any, Any]:
    """The public ``synthesizer_utils`` and ``oneshot_intactofl`` imported in this process
    (its logger writes under ``work``)."""
    visdom = types.ModuleType("visdom")
    visdom.Visdom = object
    sys.modules.setdefault("visdom", visdom)
    hook = types.ModuleType("ofl_hook")  # the launcher's hook; here only the gate loss is seen
    hook.gate_loss = lambda loss: None
    sys.modules.setdefault("ofl_hook", hook)
    sys.path.insert(0, str(pub / "code"))
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    return (importlib.import_module("oneshot_algorithms.synthesizer_utils"),
            importlib.import_module("oneshot_algorithms.oneshot_intactofl"))


def coupled(args: argparse.Namespace) -> None:
    """Both servers' epochs fed the same random draws: the code's ``synthesize`` and
    ``intactofl_moe_train`` beside ofl's ``synthesis_stage`` and ``gate_stage`` (same
    generator weights, z, y, gate weights, ODS draws, pool order), for ``--epochs`` epochs.
    Both gate passes read the code's pool (its PNGs). At the first epoch the code's
    synthesis also runs a second time with one gate weight moved by one ulp: how far float
    rounding alone moves its synthetic batch."""
    from PIL import Image
    from torchvision import transforms as T

    from ofl_core.intactofl import server

    pub, out = Path(args.public_dir).resolve(), Path(args.out).resolve()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    ds = load_dataset("fmnist")
    uploads = ofl_uploads(out)
    nets = public_nets(pub, torch.load(out / "clients.pt", weights_only=True))
    su, io = public_modules(pub, out / "coupled")
    for d in ("pool", "pool_ulp"):
        shutil.rmtree(out / "coupled" / d, ignore_errors=True)
    m, dev, (mean, std) = len(nets), torch.device("cpu"), CODE_NORM
    cfg = IntactOFLConfig.for_preset("authors_code", epochs=args.epochs, amp=False,
                                     fast_generator=False)
    # the public side, built as intactofl_server_process builds it (I:53-99, 101-103)
    moe_p = su.MoEEnsemble(nets, "linear", m, 1, 28)
    ens_p = io.Ensemble(nets)
    gen_p = su.Generator(nz=256, ngf=64, img_size=28, nc=1)
    to_code = T.Compose([T.ToTensor(), T.Normalize((mean,), (std,))])

    def synthesizer(moe_: nn.Module, gen_: nn.Module, pool: str) -> Any:
        return su.IntactOFLSynthesizer(
            teacher=moe_, mdl_list=nets, student=ens_p, generator=gen_, nz=256,
            num_classes=10, img_size=(1, 28, 28), save_dir=str(out / "coupled" / pool),
            iterations=30, lr_g=1e-3, synthesis_batch_size=128, sample_batch_size=128,
            adv=1.0, bn=1.0, oh=1.0, criterion=su.KLDiv(T=1), transform=to_code,
            normalizer=su.Normalizer((mean,), (std,)), his=True, batchonly=False,
            batchused=False, device="cpu")

    synth = synthesizer(moe_p, gen_p, "pool")
    moe_u = su.MoEEnsemble(nets, "linear", m, 1, 28)
    moe_u.gating_network.load_state_dict(moe_p.gating_network.state_dict())
    with torch.no_grad():
        w00 = moe_u.gating_network.linear.weight[0, 0]
        w00.copy_(torch.nextafter(w00, torch.tensor(1.0)))
    synth_u = synthesizer(moe_u, su.Generator(nz=256, ngf=64, img_size=28, nc=1), "pool_ulp")
    opt_p = torch.optim.SGD(moe_p.gating_network.parameters(), 0.01, weight_decay=1e-4,
                            momentum=0.9)
    sched_p = torch.optim.lr_scheduler.CosineAnnealingLR(opt_p, T_max=args.epochs)
    # ofl's side, with the code's gate weights
    bank = TeacherBank([build_from_upload(u) for u in uploads], channels_last=False)
    gate = server.LinearGate(28 * 28, m, m, False, NORM)
    gate.linear.load_state_dict(moe_p.gating_network.linear.state_dict())
    moe = server.GatedMixture(bank, gate)
    gen = server.build_generator(256, 64, 28, 1, torch.Generator(), dev).train()
    opt = torch.optim.SGD(gate.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum,
                          weight_decay=cfg.kd_weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    rng, log = torch.Generator(), server._Log()
    for e in range(args.epochs):
        # synthesize() draws z, then y, then re-initialises G (S:690-695): replay the draws
        g0 = su.Generator(nz=256, ngf=64, img_size=28, nc=1)
        state = torch.get_rng_state()
        z, y = torch.randn(128, 256), torch.randint(0, 10, (128,)).sort()[0]
        su.reset_model(g0)
        torch.set_rng_state(state)
        if e == 0:
            x_u = synth_u.synthesize(cur_ep=e)["synthetic"].clamp(0, 1)
            torch.set_rng_state(state)
        x_p = synth.synthesize(cur_ep=e)["synthetic"].clamp(0, 1)
        if e == 0:
            print(f"the code against itself, one gate weight one ulp apart: synthetic batch "
                  f"max |diff| {float((x_p - x_u).abs().max()):.2g} (mean "
                  f"{float((x_p - x_u).abs().mean()):.2g})")
        weights = {k.replace("l1.0.", "l1."): v for k, v in g0.state_dict().items()}
        server.reinit_generator = lambda g, r, w=weights: g.load_state_dict(w)
        server.sample_latents = lambda c, n, r, d, z=z, y=y: (z.clone(), y.clone())
        x_o, _ = server.synthesis_stage(moe, gen, cfg, 10, rng, dev, log)
        # the pool as the code stores it (8-bit PNGs), for both gate passes
        files = sorted((out / "coupled" / "pool").rglob("*.png"))
        png = torch.stack([torch.from_numpy(np.array(Image.open(f))) for f in files])[:, None]
        labels = torch.tensor([int(f.parent.name) for f in files])
        mine = [f for f in files if f.name.startswith(f"{e}-")]
        floor = torch.stack([torch.from_numpy(np.array(Image.open(f))) for f in mine])
        rounded = (x_p * 255).round().to(torch.uint8)[:, 0]  # ofl's storage of this batch
        order = [int(f.stem.split("-")[1]) for f in mine]
        state = torch.get_rng_state()
        idx = range(0, len(png), 128)
        io.intactofl_moe_train(_Batches([(to_code_u8(png[i:i + 128], mean, std),
                                          labels[i:i + 128]) for i in idx]),
                               moe_p, ens_p, opt_p, su.KLDiv(T=4), 0.01, 1, 8, "cpu")
        rng.set_state(state)
        server.gate_stage(moe, _Batches([(png[i:i + 128].float() / 255, labels[i:i + 128])
                                         for i in idx]),
                          opt, cfg, cfg.ods_eps * std, rng, log)
        sched_p.step()
        sched.step()
        with torch.no_grad():
            gdiff = max(float((a - b).abs().max()) for a, b in
                        zip(moe_p.gating_network.linear.parameters(), gate.linear.parameters(),
                            strict=True))
        acc_p = accuracy(_Call(moe_p), ds.x_test, ds.y_test)
        acc_o = accuracy(moe, ds.x_test, ds.y_test)
        diff = (x_p - x_o).abs()
        print(f"epoch {e + 1}: code vs ofl: synthetic batch max |diff| {float(diff.max()):.2g} "
              f"(mean {float(diff.mean()):.2g}); pool {len(png)} images; the code's batch in "
              f"8 bits as the code stores it (floor) and as ofl does (round): "
              f"{float((floor != rounded[order]).float().mean()) * 100:.1f} % of pixels "
              f"differ; gate weights max |diff| {gdiff:.2g}; mixture test accuracy "
              f"{acc_p:.2f} (code) / {acc_o:.2f} (ofl)")


def to_code_u8(x: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """uint8 images as the code's transform makes them (ToTensor, Normalize)."""
    return (x.float().div(255) - mean) / std


class _Call(nn.Module):
    """The code's MoE on [0, 1] images (it normalises first), for ``accuracy``."""

    def __init__(self, moe: nn.Module) -> None:
        super().__init__()
        self._moe = [moe]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = CODE_NORM
        return self._moe[0]((x - mean) / std)


def table(args: argparse.Namespace) -> None:
    by, seeds, sides = shared.load_runs(Path(args.out), SIDES)
    shared.print_curves(by, seeds, sides, args.every)
    for s in sides:
        ens = sorted({round(a, 2) for (side, _), r in by.items() if side == s
                      for a in r["ensemble"]})
        print(f"{s:6s}: uniform ensemble {' / '.join(f'{a:.2f}' for a in ens)} (every "
              f"epoch and seed)")
    same = len({round(a, 2) for r in by.values() for a in r["ensemble"]}) == 1
    print("the uniform ensemble's accuracy is " + ("the same on every side, seed and epoch"
                                                  if same else "NOT the same everywhere"))
    print("gate loss (mean over each epoch's pool batches):")
    for (side, seed), r in sorted(by.items(), key=lambda kv: (kv[0][1], SIDES.index(kv[0][0]))):
        if r.get("gate_loss"):
            print(f"  {side} s{seed}: " + ", ".join(f"{a:.1f}" for a in r["gate_loss"]))


def main(argv: list[str] | None = None) -> None:
    ap, sub = shared.common_parser(__doc__, "a git directory holding zenghui9977/IntactOFL",
                                   COMMIT, 1, extra=("coupled",))
    c, r, k = sub["clients"], sub["run"], sub["coupled"]
    c.add_argument("--local-epochs", type=int, default=5)
    c.add_argument("--alpha", type=float, default=0.1)
    c.add_argument("--num-users", type=int, default=5)
    c.add_argument("--seed", type=int, default=1, help="the code's setup_seed before clients")
    r.add_argument("--sides", nargs="+", choices=SIDES, default=["public", "ofl"])
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    r.add_argument("--epochs", type=int, default=5)
    k.add_argument("--epochs", type=int, default=2)
    k.add_argument("--seed", type=int, default=1, help="torch's seed for the coupled draws")
    args = ap.parse_args(argv)
    {"setup": setup, "clients": clients, "run": run, "coupled": coupled,
     "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
