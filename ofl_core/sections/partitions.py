"""Class-count tables of the papers' partition schemes, for ``notebooks/partitions`` (DENSE
Figs. 4–5, FedHydra Figs. 3 and 6a, FedCVAE Figs. 3 and 9), and the two Dirichlet schemes
side by side (DENSE's per-class split, Co-Boosting's per-client prior)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..data.partition import Partition, make_partition

#: scheme → its name in the side-by-side maps (DENSE's split is also FedHydra's)
DIRICHLET_NAMES = {"dirichlet": "DENSE", "dirichlet_client": "Co-Boosting"}


def counts_text(partitions: Mapping[str, Partition], counts: bool = True) -> str:
    """Each partition's client sizes and (with ``counts``) its client × class count table."""
    lines = []
    for name, p in partitions.items():
        lines.append(f"{name}: client sizes {p.sizes.tolist()}")
        if counts:
            index = [f"c{k}" for k in range(p.num_clients)]
            lines.append(pd.DataFrame(p.counts, index=index).to_string())
    return "\n".join(lines)


def dirichlet_schemes(labels: np.ndarray, num_clients: int, alphas: Sequence[float],
                      seed: int) -> dict[str, Partition]:
    """For each α, DENSE's Dirichlet (``dirichlet``: each class split over the clients by
    Dir(α·1_m), every client ≥ 10 samples, sizes unequal) beside Co-Boosting's
    (``dirichlet_client``: each client's class prior Dir(α·1_C), equal sizes), same seed;
    keyed ``"DENSE α=…"`` / ``"Co-Boosting α=…"`` in that order."""
    return {f"{name} α={a}": make_partition(labels, num_clients, scheme, alpha=a, seed=seed)
            for a in alphas for scheme, name in DIRICHLET_NAMES.items()}


def side_by_side_counts(partitions: Mapping[str, Partition], per_row: int = 2) -> str:
    """Client × class count maps, ``per_row`` partitions side by side (e.g. the two schemes at
    one α), each with a ``total`` column (the client's size) and a ``total`` row."""
    blocks = []
    items = list(partitions.items())
    for i in range(0, len(items), per_row):
        frames = {}
        for name, p in items[i : i + per_row]:
            df = pd.DataFrame(p.counts, index=[f"c{k}" for k in range(p.num_clients)])
            df["total"] = p.sizes
            df.loc["total"] = df.sum()
            frames[name] = df
        blocks.append(pd.concat(frames, axis=1).to_string())
    return "\n\n".join(blocks)


__all__ = ["DIRICHLET_NAMES", "counts_text", "dirichlet_schemes", "side_by_side_counts"]
