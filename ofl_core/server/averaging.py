"""Parameter averaging of state dicts (FedSyn Eq. 2), shared by FedAvg and every method that
averages client weights (FedCVAE's decoder averaging, FedHydra's and OT fusion's averages)."""

from __future__ import annotations

import torch


def average_states(
    states: list[dict[str, torch.Tensor]], weights: list[float]
) -> dict[str, torch.Tensor]:
    """Weighted average of state_dicts (weights normalised to sum to 1)."""
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("FedAvg weights must sum to a positive number")
    w = [float(x) / total for x in weights]
    out = {}
    for k, v0 in states[0].items():
        if v0.is_floating_point():
            acc = torch.zeros_like(v0, dtype=torch.float64)
            for wi, sd in zip(w, states, strict=True):
                acc += wi * sd[k].double()
            out[k] = acc.to(v0.dtype)
        else:
            out[k] = v0.clone()
    return out
