"""Make the embedded FashionMNIST subset shipped in ofl_core/data/embedded/.

A stratified, seeded sample of the original FashionMNIST files: ``--train-per-class`` training
and ``--test-per-class`` test images of each class, in original file order within the sample.

    python scripts/make_embedded_fmnist.py            # needs the full FMNIST files (SPEC §1)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ofl_core.data.datasets import load_dataset

OUT = Path(__file__).resolve().parents[1] / "ofl_core" / "data" / "embedded" / "fmnist_subset.npz"


def stratified(labels: np.ndarray, per_class: int, rng: np.random.RandomState) -> np.ndarray:
    picks = [np.sort(rng.choice(np.flatnonzero(labels == c), per_class, replace=False))
             for c in range(int(labels.max()) + 1)]
    return np.sort(np.concatenate(picks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--train-per-class", type=int, default=1000)
    ap.add_argument("--test-per-class", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-root", default=None)
    args = ap.parse_args()
    ds = load_dataset("fmnist", args.data_root)
    rng = np.random.RandomState(args.seed)
    tr = stratified(ds.y_train.numpy(), args.train_per_class, rng)
    te = stratified(ds.y_test.numpy(), args.test_per_class, rng)
    np.savez_compressed(
        OUT,
        x_train=ds.x_train[tr, 0].numpy(), y_train=ds.y_train[tr].numpy().astype(np.uint8),
        x_test=ds.x_test[te, 0].numpy(), y_test=ds.y_test[te].numpy().astype(np.uint8),
        train_index=tr.astype(np.int32), test_index=te.astype(np.int32),
    )
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.1f} MB): {len(tr)} train, {len(te)} test")


if __name__ == "__main__":
    main()
