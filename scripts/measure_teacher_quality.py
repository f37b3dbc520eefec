"""How good is DENSE's teacher D (mean of client logits) at α = 0.1, m = 5 on FMNIST?

For each seed: the clients' test accuracies, D's accuracy (DENSE Eq. 1) and the mean of the
clients' softmax probabilities (FedOneShot's combiner) — docs/decisions.md, "Why DENSE cannot
beat the best single client". Clients are trained (or loaded from the cache) exactly as the
notebooks do, one thread.

    python scripts/measure_teacher_quality.py [--dataset fmnist_embedded|fmnist]
        [--epochs 10] [--seeds 1,2,3] [--bn-eval-after-first-epoch] [--weight-decay 0]
"""

import argparse

import torch

from ofl_core.clients import LocalTrainConfig, build_from_upload
from ofl_core.evaluate import predict_logits
from ofl_core.experiment import ExperimentConfig, setup_experiment


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="fmnist_embedded")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--bn-eval-after-first-epoch", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    local = LocalTrainConfig(epochs=args.epochs, weight_decay=args.weight_decay,
                             bn_eval_after_first_epoch=args.bn_eval_after_first_epoch)
    for seed in (int(s) for s in args.seeds.split(",")):
        setup = setup_experiment(ExperimentConfig(
            dataset=args.dataset, alpha=args.alpha, num_clients=args.clients, seed=seed,
            local=local, progress=False))
        ds = setup.dataset
        logits = torch.stack([predict_logits(build_from_upload(u), ds.x_test)
                              for u in setup.uploads])  # (m, N, C)

        def acc(z: torch.Tensor, y: torch.Tensor = ds.y_test) -> float:
            return (z.argmax(1) == y).float().mean().item() * 100

        print(f"{args.dataset} E={args.epochs} seed={seed}: clients "
              f"{[round(a, 1) for a in setup.client_accs]}, D (mean logits) "
              f"{acc(logits.mean(0)):.1f}, mean softmax {acc(logits.softmax(-1).mean(0)):.1f}",
              flush=True)


if __name__ == "__main__":
    main()
