"""Privacy check of synthetic images: how close is each one to a real training image?

For every synthetic image (DENSE's or FedHydra's generator) we take the L2 distance, in pixel
space with values in [0, 1], to its nearest neighbour among the clients' real training images.
A generator that memorised training data would produce near-copies (distance ≈ 0). The
reference is the same distance for *real test images*: a test image is a new sample of the
same distribution, so its nearest-training-image distance is what "similar but not copied"
looks like. :func:`nearest_neighbour_distances` computes the distances (batched
``torch.cdist`` in chunks, so memory stays bounded), :func:`distance_summary` tabulates them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch


def as_unit_float(x: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Images as a float32 tensor in [0, 1]: uint8 is divided by 255, floats are kept."""
    t = torch.as_tensor(x)
    if t.dtype == torch.uint8:
        return t.float().div_(255.0)
    if not t.is_floating_point():
        raise ValueError(f"images must be uint8 or floating point in [0, 1] (got {t.dtype})")
    return t.float()


def nearest_neighbour_distances(
    queries: torch.Tensor | np.ndarray,
    references: torch.Tensor | np.ndarray,
    chunk_size: int = 1024,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """L2 distance from each query image to its nearest reference image, and that image's index.

    ``queries`` (N, ...) and ``references`` (M, ...) are images of the same shape, uint8
    (converted to [0, 1]) or float in [0, 1]; each image is flattened. Distances are computed
    with ``torch.cdist`` on chunks of ``chunk_size`` queries × ``chunk_size`` references (a
    running minimum over reference chunks), so memory is O(chunk_size²) whatever N and M.
    Returns (distances (N,) float32, indices (N,) int64) on the CPU.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be ≥ 1 (got {chunk_size})")
    q = torch.as_tensor(queries)
    r = torch.as_tensor(references)
    if len(r) == 0:
        raise ValueError("no reference images to compare with")
    if tuple(q.shape[1:]) != tuple(r.shape[1:]):
        raise ValueError(f"query images have shape {tuple(q.shape[1:])} but reference images "
                         f"{tuple(r.shape[1:])}")
    dev = torch.device(device)
    dists = torch.empty(len(q), dtype=torch.float32)
    idx = torch.empty(len(q), dtype=torch.int64)
    for i in range(0, len(q), chunk_size):
        qc = as_unit_float(q[i : i + chunk_size]).flatten(1).to(dev, torch.float64)
        best = torch.full((len(qc),), float("inf"), dtype=torch.float64, device=dev)
        arg = torch.zeros(len(qc), dtype=torch.int64, device=dev)
        for j in range(0, len(r), chunk_size):
            rc = as_unit_float(r[j : j + chunk_size]).flatten(1).to(dev, torch.float64)
            d = torch.cdist(qc, rc)  # float64: exact zeros for identical images
            m, a = d.min(1)
            better = m < best
            best = torch.where(better, m, best)
            arg = torch.where(better, a + j, arg)
        dists[i : i + len(qc)] = best.float().cpu()
        idx[i : i + len(qc)] = arg.cpu()
    return dists, idx


def distance_summary(distances: Mapping[str, torch.Tensor | np.ndarray],
                     baseline: str | None = None) -> pd.DataFrame:
    """Statistics of nearest-neighbour distances, one row per named set.

    Columns: n, min, p5, median, mean, max and — when ``baseline`` names one of the sets (e.g.
    the real test images) — ``frac_below_baseline_p5``: the share of a set's images closer to a
    training image than the baseline's 5th percentile (a near-copy indicator; about 0.05 for
    the baseline itself).
    """
    arrays = {k: np.asarray(torch.as_tensor(v).float().cpu()).ravel() for k, v in
              distances.items()}
    if baseline is not None and baseline not in arrays:
        raise ValueError(f"baseline {baseline!r} is not one of {list(arrays)}")
    ref_p5 = float(np.percentile(arrays[baseline], 5)) if baseline is not None else None
    rows = []
    for name, a in arrays.items():
        row = {"set": name, "n": len(a)}
        if len(a):
            row.update(min=a.min(), p5=np.percentile(a, 5), median=np.median(a), mean=a.mean(),
                       max=a.max())
            if ref_p5 is not None:
                row["frac_below_baseline_p5"] = float((a < ref_p5).mean())
        rows.append(row)
    return pd.DataFrame(rows).set_index("set")


__all__ = ["as_unit_float", "distance_summary", "nearest_neighbour_distances"]
