"""What FedCVAE Table 6's averaged decoder draws: the client decoders' spread and its samples.

FedCVAE's Table 6 "param-avg" averages the ten client decoders' parameters (weighted by n_k) and
trains the server classifier on the averaged decoder's samples. This probe loads the decoders
the ablations notebook trained (the same client configuration and partition, so they come
from the client cache when a grid task trained them), averages them as the server does, and
measures:

- each client decoder's distance to the weighted mean, relative to the mean's norm;
- the averaged decoder's samples, 200 per class from the truncated prior: the mean distance
  between class-mean images ("between") and the mean per-pixel std within a class
  ("within");
- an oracle's reading of those samples: a small CNN trained on the real FashionMNIST training
  set (2 epochs, Adam 1e-3; its test accuracy is printed) labels them; its accuracy against
  the conditioning label and the histogram of its predictions. The same for every client
  decoder, whose samples of classes it never saw are expected to be wrong.

One JSON line per (α, seed) on stdout and appended to ``$OFL_MEASURE_OUT``
(default ``fedcvae_param_avg_probe.jsonl``)::

    python scripts/evidence/probe_fedcvae_param_avg.py 3 4 5 --alpha 0.01 --shared-init

Needs the full FashionMNIST (README "Data"); decoders not in the cache are trained (about
6 minutes per seed at one thread).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from torch import nn

from ofl_core.data.datasets import load_dataset
from ofl_core.experiment import ExperimentConfig, configure_methods, setup_experiment
from ofl_core.fedcvae.sampling import decode
from ofl_core.models.cvae import build_decoder, truncated_normal
from ofl_core.sections.fedcvae_runs import client_config, fedcvae_data_settings
from ofl_core.server.averaging import average_states

PER_CLASS = 200


def train_oracle(ds, seed: int = 0) -> tuple[nn.Module, float]:
    """A small CNN on the real training set (2 epochs), and its test accuracy."""
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * (ds.image_size // 4) ** 2, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    x, y = ds.x_train.float() / 255, ds.y_train.long()
    for _ in range(2):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            idx = perm[i:i + 128]
            loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        acc = (net(ds.x_test.float() / 255).argmax(1) == ds.y_test).float().mean().item()
    return net, round(100 * acc, 2)


def sample_stats(decoder: nn.Module, oracle: nn.Module, latent_dim: int, width: float
                 ) -> dict:
    gen = torch.Generator().manual_seed(1)
    y = torch.arange(10).repeat_interleave(PER_CLASS)
    z = truncated_normal((len(y), latent_dim), width, gen)
    with torch.no_grad():
        x = decode(decoder, z, y)
        pred = oracle(x).argmax(1)
    means = torch.stack([x[y == c].mean(0).flatten() for c in range(10)])
    return {
        "between": round(float(torch.cdist(means, means).sum() / 90), 3),
        "within": round(float(torch.stack([x[y == c].std(0).mean() for c in range(10)]).mean()),
                        4),
        "oracle_acc": round(100 * float((pred == y).float().mean()), 2),
        "oracle_hist": torch.bincount(pred, minlength=10).tolist(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seeds", type=int, nargs="+", help="model seeds (the grid's seeds 1-5)")
    p.add_argument("--alpha", type=float, required=True)
    p.add_argument("--shared-init", action="store_true",
                   help="clients from one initialisation (the notebook's shared_init=true)")
    p.add_argument("--partition-seed", type=int, default=1693)
    args = p.parse_args()
    torch.set_num_threads(1)
    fed = fedcvae_data_settings("fmnist")
    ds = load_dataset("fmnist").resized(fed["resize"])
    oracle, oracle_acc = train_oracle(ds)
    cvae = {"shared_init": True} if args.shared_init else {}
    ccfg = client_config("param-avg", "fmnist", "paper", cvae)
    server = configure_methods(["param-avg"], ["paper"], common={"dataset": "fmnist"})[0][1]
    server = server.resolved()  # the classifier's samples: z within ± trunc_width std
    out = open(os.environ.get("OFL_MEASURE_OUT", "fedcvae_param_avg_probe.jsonl"), "a")
    for seed in args.seeds:
        cfg = ExperimentConfig(dataset="fmnist", partition="dirichlet_fedcvae", alpha=args.alpha,
                               num_clients=10, seed=seed, subset=fed["subset"],
                               resize=fed["resize"], device="cpu", experiment="ablations",
                               progress=False)
        ups = setup_experiment(cfg, ccfg, partition_seed=args.partition_seed, dataset=ds).uploads
        weights = [float(sum(u.label_counts)) for u in ups]
        states = [u.state_dict for u in ups]
        avg = average_states(states, weights)
        keys = [k for k, v in avg.items() if v.is_floating_point()]
        mean = torch.cat([avg[k].flatten() for k in keys])
        rel = [round(float((torch.cat([s[k].float().flatten() for k in keys]) - mean).norm()
                           / mean.norm()), 3) for s in states]
        d = int(ups[0].model_kwargs["latent_dim"])
        dec = build_decoder(ups[0].arch, 10, 1, fed["resize"], d)
        dec.load_state_dict(avg)
        dec.eval()
        width = server.trunc_width
        row = {"alpha": args.alpha, "seed": seed, "shared_init": args.shared_init,
               "oracle_test_acc": oracle_acc, "client_rel_dist_to_mean": rel,
               "averaged": sample_stats(dec, oracle, d, width)}
        clients = []
        for s in states:
            dec.load_state_dict(s)
            dec.eval()
            clients.append(sample_stats(dec, oracle, d, width))
        row["clients_oracle_acc"] = [c["oracle_acc"] for c in clients]
        row["clients_between"] = [c["between"] for c in clients]
        line = json.dumps(row)
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()


if __name__ == "__main__":
    main()
