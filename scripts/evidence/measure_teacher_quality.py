"""How good is DENSE's teacher D (mean of client logits) at α = 0.1, m = 5 on FMNIST?

For each seed: the clients' test accuracies, D's accuracy (DENSE Eq. 1), the mean of the
clients' softmax probabilities (FedOneShot's combiner) and FedAvg's parameter average, n_k-
weighted (DENSE Eq. 2) and unweighted (DENSE's code) — docs/decisions/dense.md#dense-best-client
and docs/decisions/paper-gaps.md#dense-t1-a05-clients. Clients are
trained (or loaded from the cache) exactly as the notebooks do, one thread; ``--amp off``
trains them in float32 (the default "auto" is bfloat16 autocast where the CPU has it).

    python scripts/evidence/measure_teacher_quality.py [--dataset fmnist_embedded|fmnist]
        [--alpha 0.1] [--epochs 10] [--seeds 1,2,3] [--amp auto|off]
        [--bn-eval-after-first-epoch] [--weight-decay 0]
"""

import argparse
from dataclasses import replace

import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.evaluate import predict_logits
from ofl_core.experiment import ExperimentConfig, setup_experiment
from ofl_core.server import average_states
from ofl_core.uploads import build_from_upload


def fedavg_model(uploads: list, weights: list[float]) -> torch.nn.Module:
    """FedAvg's global model: the weighted parameter average (DENSE Eq. 2)."""
    avg = average_states([u.state_dict for u in uploads], weights)
    return build_from_upload(replace(uploads[0], state_dict=avg))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="fmnist_embedded")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--bn-eval-after-first-epoch", action="store_true")
    ap.add_argument("--amp", choices=["auto", "off"], default="auto",
                    help="bfloat16 autocast for local training (auto) or float32 (off)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    local = LocalTrainConfig(epochs=args.epochs, weight_decay=args.weight_decay,
                             bn_eval_after_first_epoch=args.bn_eval_after_first_epoch,
                             amp="auto" if args.amp == "auto" else False)
    for seed in (int(s) for s in args.seeds.split(",")):
        setup = setup_experiment(ExperimentConfig(
            dataset=args.dataset, alpha=args.alpha, num_clients=args.clients, seed=seed,
            local=local, progress=False))
        ds = setup.dataset
        logits = torch.stack([predict_logits(build_from_upload(u), ds.x_test)
                              for u in setup.uploads])  # (m, N, C)

        def acc(z: torch.Tensor, y: torch.Tensor = ds.y_test) -> float:
            return (z.argmax(1) == y).float().mean().item() * 100

        fedavg = {name: acc(predict_logits(fedavg_model(setup.uploads, w), ds.x_test))
                  for name, w in (("weighted", [u.num_samples for u in setup.uploads]),
                                  ("unweighted", [1.0] * len(setup.uploads)))}
        print(f"{args.dataset} α={args.alpha} E={args.epochs} amp={args.amp} seed={seed}: "
              f"clients {[round(a, 1) for a in setup.client_accs]}, D (mean logits) "
              f"{acc(logits.mean(0)):.2f}, mean softmax {acc(logits.softmax(-1).mean(0)):.2f}, "
              f"FedAvg weighted {fedavg['weighted']:.2f} / unweighted {fedavg['unweighted']:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
