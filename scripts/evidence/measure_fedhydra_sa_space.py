"""FedHydra with the SA weights on logits (Eq. 8, default) vs on probabilities
(``teacher="sa_probs"``; this was the field ``sa_space`` before the teacher became one
pluggable field).

Embedded FMNIST, 2 classes per client, m = 5, the two_classes_per_client notebook's quick
server settings, seeds 1–3, one thread; DENSE on the same clients for reference
(docs/decisions/fedhydra.md#fedhydra-distillation).

    python scripts/evidence/measure_fedhydra_sa_space.py [SERVER_EPOCHS]   # default 5
"""

import argparse

import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods, run_methods, setup_experiment


def main() -> None:
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("server_epochs", nargs="?", type=int, default=5,
                    help="server epochs of every run (default 5)")
    epochs = ap.parse_args().server_epochs
    server = {"epochs": epochs, "steps_per_epoch": 5, "batch_size": 32, "kd_batch_size": 32,
              "strat_steps": 3, "strat_batch_size": 8, "ngf": 32}
    for seed in (1, 2, 3):
        setup = setup_experiment(ExperimentConfig(
            partition="classes_per_client", alpha=None, classes_per_client=2, num_clients=5,
            seed=seed, local=LocalTrainConfig(epochs=10), progress=False))
        _, res = run_methods(setup, configure_methods(["dense"], common=server))
        r = res["dense"]
        print(f"epochs={epochs} seed={seed} DENSE: last {r.last_acc:.2f} best {r.best_acc:.2f}",
              flush=True)
        for space in ("logits", "probs"):
            teacher = "sa_probs" if space == "probs" else "sa"
            _, res = run_methods(setup, configure_methods(
                ["fedhydra"], common={**server, "teacher": teacher}))
            r = res["fedhydra"]
            print(f"epochs={epochs} seed={seed} FedHydra sa_space={space}: last "
                  f"{r.last_acc:.2f} best {r.best_acc:.2f}, SA ensemble "
                  f"{r.extras['sa_ensemble_acc']:.2f}, AE {r.extras['mean_ensemble_acc']:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
