"""Frozen client models combined into one scorer: the teacher ensemble D(x) = (1/m) Σ_k f_k(x)
(DENSE Eq. 1) and FedOneShot's and FedCVAE's combiners. FedHydra's stratified aggregation is
:mod:`ofl_core.distill.stratified_aggregation`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


class Ensemble(nn.Module):
    """Frozen client models combined into one scorer.

    ``combine``:
    - ``"mean_logits"``: D(x), the mean of logits (DENSE Eq. 1; the distillation teacher).
    - ``"mean_softmax"``: mean of softmax probabilities (FedOneShot, paper preset).
    - ``"vote"``: one-hot hard majority vote, ties → lowest class (⚑ FedCVAE's code).
    The output's argmax is the ensemble's prediction in every case.

    ``normalize_logits`` (off by default): each member's logits are standardised per sample
    (zero mean, unit standard deviation over the classes) before they are combined, so that a
    member scaling its head cannot outvote the others by the size of its logits.
    """

    def __init__(
        self, models: Sequence[nn.Module],
        combine: Literal["mean_logits", "mean_softmax", "vote"] = "mean_logits",
        normalize_logits: bool = False,
    ) -> None:
        super().__init__()
        if len(models) == 0:
            raise ValueError("an ensemble needs at least one model")
        if combine not in ("mean_logits", "mean_softmax", "vote"):
            raise ValueError(
                f"combine must be 'mean_logits', 'mean_softmax' or 'vote' (got {combine!r})"
            )
        self.members = nn.ModuleList(models)
        self.combine = combine
        self.normalize_logits = bool(normalize_logits)
        for mdl in self.members:
            mdl.eval().requires_grad_(False)

    def train(self, mode: bool = True) -> Ensemble:  # members stay frozen in eval mode
        super().train(mode)
        for mdl in self.members:
            mdl.eval()
        return self

    def member_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Stacked logits (m, B, C) of every member (standardised per sample when
        ``normalize_logits``)."""
        logits = torch.stack([mdl(x) for mdl in self.members])
        if self.normalize_logits:
            logits = (logits - logits.mean(-1, keepdim=True)) / (
                logits.std(-1, keepdim=True, unbiased=False) + 1e-6)
        return logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.member_logits(x)
        if self.combine == "mean_logits":
            return logits.mean(0)
        if self.combine == "mean_softmax":
            return F.softmax(logits, dim=-1).mean(0)
        votes = F.one_hot(logits.argmax(-1), logits.shape[-1]).sum(0).float()
        # argmax returns the first maximum, i.e. ties go to the lowest class index
        return F.one_hot(votes.argmax(-1), logits.shape[-1]).float()


__all__ = ["Ensemble"]
