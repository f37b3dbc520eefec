"""The paper presets' results on one tiny setting, saved for a ``torch.equal`` comparison
between two checkouts (is a change bit-neutral for them?).

Three ``cnn_mnist`` clients (embedded FMNIST, 20 % subset, Dirichlet α = 1, one local epoch),
then Co-Boosting and DENSE (``paper``, 3 server epochs × 3 steps, batch 32) and FedAvg, one
thread. ``save`` writes the clients' and the server models' state dicts and test curves;
``compare`` says, per part, whether two such files are equal to the bit
(docs/decisions/coboosting.md#coboosting-the-input-normalisation-what-the).

    PYTHONPATH=<checkout A> python scripts/evidence/paper_preset_states.py save A.pt
    PYTHONPATH=<checkout B> python scripts/evidence/paper_preset_states.py save B.pt
    python scripts/evidence/paper_preset_states.py compare A.pt B.pt
"""

from __future__ import annotations

import argparse
import sys

import torch

METHODS = ("coboosting", "dense", "fedavg")


def save(path: str) -> None:
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.datasets import ImageDataset, load_dataset
    from ofl_core.data.partition import make_partition
    from ofl_core.evaluate import accuracy
    from ofl_core.registry import method_config, run_method
    from ofl_core.server import ServerContext

    torch.set_num_threads(1)
    full = load_dataset("fmnist_embedded")
    ds = ImageDataset("fmnist_embedded", full.x_train, full.y_train, full.x_test[:500],
                      full.y_test[:500], num_classes=10)
    part = make_partition(ds.y_train.numpy(), 3, "dirichlet", alpha=1.0, seed=1, subset=0.2)
    ups = train_clients(ds, part, LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=32),
                        seed=1, workers=1, progress=False)
    ctx = ServerContext(num_classes=10, in_channels=1, image_size=28, seed=2, progress=False,
                        evaluate=lambda m: accuracy(m, ds.x_test, ds.y_test))
    tiny = dict(epochs=3, steps_per_epoch=3, batch_size=32, kd_batch_size=32, nz=32, ngf=16)
    out: dict = {"clients": [u.state_dict for u in ups]}
    for name in METHODS:
        cfg = method_config(name, "paper", **({} if name == "fedavg" else tiny))
        r = run_method(name, ups, cfg, ctx)
        out[name] = {"state": r.model.state_dict(), "curve": r.curve}
        print(f"{name}: curve {[round(a, 2) for a in r.curve]}")
    torch.save(out, path)


def compare(a_path: str, b_path: str) -> int:
    a, b = torch.load(a_path, weights_only=True), torch.load(b_path, weights_only=True)
    same = {"clients": all(torch.equal(x[k], y[k]) for x, y in
                           zip(a["clients"], b["clients"], strict=True) for k in x)}
    for m in METHODS:
        same[m] = (a[m]["curve"] == b[m]["curve"] and all(
            torch.equal(v, b[m]["state"][k]) for k, v in a[m]["state"].items()))
    for k, v in same.items():
        print(f"{k}: {'equal' if v else 'DIFFERENT'}")
    return 0 if all(same.values()) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("save").add_argument("path")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "save":
        save(args.path)
    else:
        sys.exit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
