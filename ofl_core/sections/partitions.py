"""Class-count tables of the papers' partition schemes, for ``notebooks/partitions`` (DENSE
Figs. 4–5, FedHydra Figs. 3 and 6a, FedCVAE Figs. 3 and 9)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..data.partition import Partition


def counts_text(partitions: Mapping[str, Partition], counts: bool = True) -> str:
    """Each partition's client sizes and (with ``counts``) its client × class count table."""
    lines = []
    for name, p in partitions.items():
        lines.append(f"{name}: client sizes {p.sizes.tolist()}")
        if counts:
            index = [f"c{k}" for k in range(p.num_clients)]
            lines.append(pd.DataFrame(p.counts, index=index).to_string())
    return "\n".join(lines)


__all__ = ["counts_text"]
