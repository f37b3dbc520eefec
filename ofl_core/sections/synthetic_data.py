"""DENSE Fig. 6 / FedHydra Fig. 12 (real vs synthetic images) and the nearest-real-neighbour
privacy check, for ``notebooks/synthetic_data``."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import torch

from ..plots import plot_image_rows, save_figure
from ..privacy import distance_summary, nearest_neighbour_distances
from ..tables import Tables

BASELINE = "real test (baseline)"


def client_images(tables: Tables, run: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The union of the clients' training images (uint8) and labels of one experiment."""
    setup = tables.setups[run]
    idx = torch.as_tensor(np.concatenate(setup.partition.client_indices))
    return setup.dataset.x_train[idx], setup.dataset.y_train[idx]


def save_image_grids(tables: Tables, figures_dir: str | os.PathLike, title: str) -> None:
    """One real training image per class (from the clients' data), then each generator
    method's last synthetic batch (DENSE: the epoch's lowest-loss batch that joined its pool;
    FedHydra: the last generator step's batch), one row per class it was asked for (the row
    label: the class and how many of the batch's images it got)."""
    ds = tables.setups[0].dataset
    names = list(ds.classes) or [str(c) for c in range(ds.num_classes)]
    x, y = client_images(tables)
    present = [c for c in range(ds.num_classes) if bool((y == c).any())]
    real = torch.stack([x[y == c][0] for c in present]).float() / 255
    save_figure(plot_image_rows({"one per class": real.numpy()}, len(real),
                                f"real {ds.name} training images",
                                col_labels=[names[c] for c in present]),
                figures_dir, "real_images")
    for (run, name), res in tables.results.items():
        if run == 0 and res.images is not None:
            blocks = class_blocks(res.images, res.extras.get("image_labels"), names)
            print(f"{name}: {len(res.images)} synthetic images; per class: "
                  + ", ".join(blocks))
            ncol = min(16, max(len(b) for b in blocks.values()))
            save_figure(plot_image_rows(blocks, ncol, f"{name} synthetic images ({title}), "
                                        "one row per class the generator was asked for"),
                        figures_dir, f"{name}_synthetic")


def class_blocks(images: torch.Tensor, labels: list[int] | None, names: list[str]
                 ) -> dict[str, np.ndarray]:
    """Synthetic images grouped by the class they were generated for, keyed
    ``"<class> (<count>)"`` (one key ``"all"`` without labels)."""
    if labels is None:
        return {f"all ({len(images)})": images.numpy()}
    y = np.asarray(labels)
    return {f"{n} ({int((y == c).sum())})": images[torch.as_tensor(y == c)].numpy()
            for c, n in enumerate(names)}


def privacy_check(tables: Tables, baseline_test_images: int) -> pd.DataFrame:
    """L2 distance of every synthetic image to its nearest real training image (the clients'
    data), beside the same distance for ``baseline_test_images`` random real test images.
    ``frac_below_baseline_p5`` = the share closer to a training image than 95 % of real test
    images are (≈ 0.05 for the baseline; ≫ 0.05 would mean near-copies). Prints a verdict per
    method; returns the summary table."""
    dists: dict[str, list[torch.Tensor]] = {}
    for i, setup in enumerate(tables.setups):
        train, _ = client_images(tables, i)
        for (run, name), res in tables.results.items():
            if run == i and res.images is not None:
                d, _ = nearest_neighbour_distances(res.images, train, device=setup.device)
                dists.setdefault(f"{name} synthetic", []).append(d)
        g = torch.Generator().manual_seed(setup.cfg.seed)
        ds = setup.dataset
        test = ds.x_test[torch.randperm(len(ds.x_test), generator=g)[:baseline_test_images]]
        d, _ = nearest_neighbour_distances(test, train, device=setup.device)
        dists.setdefault(BASELINE, []).append(d)
    stats = distance_summary({k: torch.cat(v) for k, v in dists.items()}, baseline=BASELINE)
    ds = tables.setups[0].dataset
    print(f"L2 distance to the nearest real training image (pixels in [0, 1], "
          f"{ds.channels}×{ds.image_size}×{ds.image_size}):")
    base_med = stats.loc[BASELINE, "median"]
    for name in (k for k in stats.index if k != BASELINE):
        s = stats.loc[name]
        near = s["frac_below_baseline_p5"]
        verdict = "possible near-copies" if near > 0.05 else "no sign of copied training images"
        print(f"{name.removesuffix(' synthetic')}: closest synthetic image at {s['min']:.2f} "
              f"(baseline median {base_med:.2f}); {100 * near:.1f}% of its images are closer "
              f"than 95% of real test images -> {verdict}")
    return stats.round(3)


__all__ = ["class_blocks", "client_images", "privacy_check", "save_image_grids"]
