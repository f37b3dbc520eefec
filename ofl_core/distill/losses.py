"""The distillation methods' losses, each citing its paper equation: L_BN (DENSE Eq. 3),
the boundary-support loss (DENSE Eq. 4), the distillation KL (DENSE Eq. 6), the DAFL losses
(Chen et al. 2019, Eqs. 3–5) and the DeepInversion priors (Yin et al. 2020, Eqs. 3–8)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F


class ShiftedMoments(torch.autograd.Function):
    """(μ(x) − μ_run, σ²(x)) per channel from moments of x − μ_run, with a one-pass backward
    (∂/∂x = g_μ/n + 2·g_σ²·(x − μ_run − (μ − μ_run))/n as one ``addcmul``), instead of
    autograd's four passes through the subtraction, square and sums."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, running_mean: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.numel() // x.shape[1]
        xs = x - running_mean.view(1, -1, 1, 1)
        m1 = xs.sum((0, 2, 3)) / n
        var = ((xs * xs).sum((0, 2, 3)) / n - m1 * m1).clamp_min(0.0)
        return m1, var

    @staticmethod
    def setup_context(ctx, inputs: tuple, output: tuple) -> None:
        x, running_mean = inputs
        m1, var = output
        ctx.save_for_backward(x, running_mean, m1, var)

    @staticmethod
    def backward(ctx, g_m1: torch.Tensor, g_var: torch.Tensor) -> tuple[torch.Tensor, None]:
        x, running_mean, m1, var = ctx.saved_tensors
        n = x.numel() // x.shape[1]
        c1 = (2.0 / n) * g_var * (var > 0)
        c0 = g_m1 / n - c1 * (running_mean + m1)
        return torch.addcmul(c0.view(1, -1, 1, 1), x, c1.view(1, -1, 1, 1)), None


def bn_statistics_term(
    x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor
) -> torch.Tensor:
    """One BN layer's term of L_BN (DENSE Eq. 3; DeepInversion's feature-statistics prior):
    ‖μ(x) − μ_run‖₂ + ‖σ²(x) − σ²_run‖₂, with μ, σ² the per-channel batch mean and biased
    variance of the layer's input ``x`` (B, C, H, W) over (B, H, W).

    Moments of the input shifted by the running mean, in float32: μ(x) − μ_run = E[x − μ_run],
    σ²(x) = E[(x − μ_run)²] − (E[x − μ_run])². Exact in real arithmetic; the shift keeps the
    raw-moment formula free of cancellation near the statistics the loss drives x towards, and
    it is about 3× faster on the CPU than float64 accumulation (a float64 sum
    copies the whole activation first). The gradient to ``x`` is one fused pass
    (:class:`ShiftedMoments`).
    """
    m1, var = ShiftedMoments.apply(x.float(), running_mean.float())
    return torch.linalg.vector_norm(m1) + torch.linalg.vector_norm(var - running_var.float())


def kl_per_sample(p_logits: torch.Tensor, q_logits: torch.Tensor, t: float = 1.0) -> torch.Tensor:
    """KL(σ(p/t) ‖ σ(q/t)) for each row (B,), computed in float32: the per-sample KL of DENSE
    Eqs. 4 and 6 and FedHydra Eqs. 15 and 17."""
    log_p = F.log_softmax(p_logits.float() / t, dim=1)
    log_q = F.log_softmax(q_logits.float() / t, dim=1)
    return (log_p.exp() * (log_p - log_q)).sum(1)


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
            temperature: float = 1.0) -> torch.Tensor:
    """Distillation loss L_dis = KL(σ(D/T) ‖ σ(S/T))·T², batch mean (DENSE Eq. 6; the T² factor
    and batch-mean reduction as in DENSE's code ``KLDiv``)."""
    t = float(temperature)
    return kl_per_sample(teacher_logits, student_logits, t).mean() * (t * t)


def boundary_support_loss(teacher_logits: torch.Tensor,
                          student_logits: torch.Tensor) -> torch.Tensor:
    """Boundary-support loss, DENSE Eq. 4:
    L_div = −(1/b) Σ_i ω_i KL(σ(D(x̂_i)) ‖ σ(S(x̂_i))), ω_i = 1[argmax D(x̂_i) ≠ argmax S(x̂_i)].

    Zero when ensemble and student agree on every sample; minimising it pushes the generator
    towards samples between the two decision boundaries."""
    mask = (teacher_logits.argmax(1) != student_logits.argmax(1)).float()
    return -(kl_per_sample(teacher_logits, student_logits) * mask).mean()


def dafl_onehot_loss(logits: torch.Tensor) -> torch.Tensor:
    """DAFL one-hot loss L_oh = CE(y_T, argmax y_T) (Chen et al. 2019, Eq. 3)."""
    return F.cross_entropy(logits.float(), logits.detach().argmax(1))


def dafl_activation_loss(features: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """DAFL activation loss L_a = −mean |f| (Chen et al. 2019, Eq. 4, as in DAFL's code
    ``-features.abs().mean()``). A list (one tensor per teacher, dims may differ) gives the
    average of the per-teacher losses."""
    if isinstance(features, torch.Tensor):
        return -features.float().abs().mean()
    return torch.stack([-f.float().abs().mean() for f in features]).mean()


def dafl_information_entropy_loss(logits: torch.Tensor) -> torch.Tensor:
    """DAFL information-entropy loss L_ie = Σ_c p̄_c log p̄_c, p̄ = batch-mean softmax
    (Chen et al. 2019, Eq. 5): minimal when the batch covers all classes equally."""
    p = F.softmax(logits.float(), dim=1).mean(0)
    return (p * torch.log(p.clamp_min(1e-12))).sum()


def total_variation_l1(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic total-variation prior, L1 (DeepInversion, Yin et al. 2020, R_TV of the image
    prior R_prior, Eq. 3): the sum
    of the mean absolute differences along the four pixel-neighbour directions."""
    d1 = x[:, :, :, :-1] - x[:, :, :, 1:]
    d2 = x[:, :, :-1, :] - x[:, :, 1:, :]
    d3 = x[:, :, 1:, :-1] - x[:, :, :-1, 1:]
    d4 = x[:, :, :-1, :-1] - x[:, :, 1:, 1:]
    return d1.abs().mean() + d2.abs().mean() + d3.abs().mean() + d4.abs().mean()


def js_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor,
                  temperature: float = 1.0) -> torch.Tensor:
    """Jensen–Shannon divergence of σ(p/T) and σ(q/T), batch mean (natural log, ≤ log 2); the
    divergence of Adaptive DeepInversion's competition term (Yin et al. 2020, Eq. 8)."""
    p = F.softmax(p_logits.float() / temperature, dim=1)
    q = F.softmax(q_logits.float() / temperature, dim=1)
    m = 0.5 * (p + q)
    log_m = torch.log(m.clamp_min(1e-12))
    kl_pm = (p * (torch.log(p.clamp_min(1e-12)) - log_m)).sum(1)
    kl_qm = (q * (torch.log(q.clamp_min(1e-12)) - log_m)).sum(1)
    return (0.5 * (kl_pm + kl_qm)).mean()


def adi_competition_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                         temperature: float = 3.0) -> torch.Tensor:
    """Adaptive DeepInversion competition term −JS(σ(S/3), σ(D/3)) (Yin et al. 2020, Eq. 8;
    their code uses 1 − JS, which differs by a constant)."""
    return -js_divergence(student_logits, teacher_logits, temperature)


def diversify(x: torch.Tensor, teacher: Callable[[torch.Tensor], torch.Tensor], eps: float,
              temperature: float = 4.0, generator: torch.Generator | None = None
              ) -> torch.Tensor:
    """Output-diversified perturbation of distillation inputs (ODS, Tashiro et al. 2020;
    Co-Boosting's code's ``cb_kd_train``, and IntactOFL's gate training):
    x' = x + ε·sign(∇_x Σ_{i,c} r_ic·σ(A_w(x_i)/T)_c), r ~ U(−1, 1)^(B×C) drawn afresh for every
    batch, T = 4. Not clipped to [0, 1] (the code does not clip).
    ``teacher`` maps images to A_w's logits with gradients to its input; only x is
    differentiated. ε = 0 returns ``x``."""
    if eps == 0:
        return x
    x = x.detach().requires_grad_(True)
    out = teacher(x).float()
    r = torch.rand(out.shape, generator=generator).to(out.device) * 2.0 - 1.0
    (grad,) = torch.autograd.grad((r * F.softmax(out / temperature, dim=1)).sum(), x)
    return (x + eps * grad.sign()).detach()


__all__ = ["diversify", "ShiftedMoments", "adi_competition_loss", "bn_statistics_term",
           "boundary_support_loss", "dafl_activation_loss", "dafl_information_entropy_loss",
           "dafl_onehot_loss", "js_divergence", "kd_loss", "kl_per_sample", "total_variation_l1"]
