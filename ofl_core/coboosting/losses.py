"""Co-Boosting's own pieces (Dai et al., ICLR 2024; read from its public code
``rong-dai/Co-Boosting``, see docs/decisions/coboosting.md): the weighted ensemble A_w, the
hard-sample loss and the adversarial loss of the generator, the gradient-sign step of the ensemble
weights; the output-diversified perturbation of the distillation inputs (ODS) is shared with
IntactOFL and lives in :func:`ofl_core.distill.losses.diversify`. Each function touches only
what its step optimises: the weights step differentiates w alone, the perturbation x alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..distill.losses import diversify, kl_per_sample

#: the smallest Σ_k w_k the weighted mean divides by (every w_k can reach 0 only in theory:
#: A_w is scale-free in w, so its gradient never points every weight down)
MIN_WEIGHT_SUM = 1e-12


def weighted_logits(logits: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A_w(x) = Σ_k w_k f_k(x) / Σ_k w_k from the teachers' logits (m, B, C) and the ensemble
    weights w (m,) (the code's ``WEnsemble``; uniform w gives DENSE's D(x), Eq. 1)."""
    w = w.to(logits.dtype)
    return torch.einsum("k,kbc->bc", w, logits) / w.sum().clamp_min(MIN_WEIGHT_SUM)


def hard_sample_loss(logits: torch.Tensor, y: torch.Tensor, hardness: float = 1.0
                     ) -> torch.Tensor:
    """L_H = (1/b) Σ_i (1 − p_i)^β · CE(A_w(x̂_i), y_i), p_i = σ(A_w(x̂_i))_{y_i} without a
    gradient (the code's ``loss_oh`` with ``--hs`` β = 1): samples the ensemble already labels
    confidently weigh little, so the generator is pushed towards hard ones. β = 0 is plain CE.
    """
    ce = F.cross_entropy(logits.float(), y, reduction="none")
    p_y = torch.exp(-ce.detach())  # σ(logits)_y = exp(−CE)
    return ((1.0 - p_y).pow(hardness) * ce).mean()


def adversarial_loss(teacher_logits: torch.Tensor, student_logits: torch.Tensor,
                     temperature: float = 3.0) -> torch.Tensor:
    """L_A = −(1/b) Σ_i KL(σ(A_w(x̂_i)/T) ‖ σ(S(x̂_i)/T))·T², T = 3, no disagreement mask (the
    code's ``-dense_kldiv(s_out, t_out, T=3).sum(1).mean()``): minimising it makes samples on
    which the server model disagrees with the ensemble."""
    t = float(temperature)
    return -(kl_per_sample(teacher_logits, student_logits, t) * (t * t)).mean()


def ensemble_weight_step(w: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, lr: float
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """One gradient-sign step of the ensemble weights on CE(A_w(x̂), y) over a batch of
    synthetic samples (teachers' logits (m, B, C), computed without gradients), then clipped to
    [0, 1]: w ← clip(w − μ_e·sign(∇_w CE), 0, 1) (the code's ``mix_weight`` update; its second
    clip to ±1 around the epoch's starting weights never binds inside [0, 1]). Returns the new
    weights (no gradient) and the batch's CE before the step. Only w is differentiated."""
    w = w.detach().requires_grad_(True)
    loss = F.cross_entropy(weighted_logits(logits.detach().float(), w), y)
    (grad,) = torch.autograd.grad(loss, w)
    return (w - lr * grad.sign()).clamp(0.0, 1.0).detach(), loss.detach()


class WeightedEnsemble(nn.Module):
    """The frozen client models combined with fixed weights w: A_w(x) (for evaluating the
    boosted ensemble on the test set)."""

    def __init__(self, models: Sequence[nn.Module], weights: torch.Tensor) -> None:
        super().__init__()
        if len(models) != len(weights):
            raise ValueError(f"{len(weights)} weights for {len(models)} models")
        self.members = nn.ModuleList(models)
        self.register_buffer("weights", weights.detach().float().clone())
        for mdl in self.members:
            mdl.eval().requires_grad_(False)

    def train(self, mode: bool = True) -> WeightedEnsemble:  # members stay in eval mode
        super().train(mode)
        for mdl in self.members:
            mdl.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.stack([mdl(x).float() for mdl in self.members])
        return weighted_logits(logits, self.weights.to(logits.device))


__all__ = ["MIN_WEIGHT_SUM", "WeightedEnsemble", "adversarial_loss", "diversify",
           "ensemble_weight_step", "hard_sample_loss", "weighted_logits"]
