"""FedHydra's stratified aggregation SA (Bai et al., Eqs. 8–12, Alg. 3; SPEC §4 "FedHydra"):
the clients' logits combined with the stratified weights Ū_r, Ū_c of
:mod:`ofl_core.distill.stratification`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..combine import Ensemble
from ..devices import to_device

SA_SPACES = ("logits", "probs")  # what the SA weights multiply: Eq. 8 logits, or softmax


def check_sa_weights(client_logits: torch.Tensor, U_r: torch.Tensor, U_c: torch.Tensor
                      ) -> tuple[int, int, int]:
    """(m, B, C) of ``client_logits`` after checking that U_r and U_c are (C, m)."""
    if client_logits.dim() != 3:
        raise ValueError(f"client_logits must be (m, B, C) (got shape "
                         f"{tuple(client_logits.shape)})")
    m, b, c = client_logits.shape
    for name, w in (("U_r", U_r), ("U_c", U_c)):
        if tuple(w.shape) != (c, m):
            raise ValueError(f"{name} must be (C, m) = ({c}, {m}) — rows classes, columns "
                             f"clients (got {tuple(w.shape)})")
    return m, b, c


def sa_logits(
    client_logits: torch.Tensor,
    y: torch.Tensor | None,
    U_r: torch.Tensor,
    U_c: torch.Tensor,
    rescale: bool = False,
    space: str = "logits",
) -> torch.Tensor:
    """Stratified aggregation P = SA(x̂, y), FedHydra Eqs. 8–12 (Alg. 3).

    ``client_logits``: (m, B, C), the clients' logits P_k. ``U_r``, ``U_c``: (C, m) (rows =
    classes, columns = clients; :mod:`ofl_core.distill.stratification`). With target labels
    ``y`` (B,):
    P̂_k = P_k ⊙ Ū_c(:, k) (Eq. 8: column j of P_k scaled by client k's class-j weight), then
    P[i, :] = Σ_k Ū_r(y_i, k)·P̂_k[i, :] (Eqs. 9–11: the clients combined with the weights of the
    sample's target class).

    ``y=None`` gives the label-free form for real data, where no target label exists (the paper
    is silent; docs/decisions/fedhydra.md): P[i, j] = Σ_k Ū_r(j, k)·Ū_c(j, k)·P_k[i, j] — each
    class's logit is combined with that class's client weights.

    Scale: Ū_c's columns sum to 1 over classes, so P is about 1/C of the mean of logits (exactly
    mean/C with uniform weights), i.e. a softmax temperature of C in every CE/KL on P.
    ``rescale=True`` multiplies P by C (SPEC §4); argmax is unchanged.

    ``space="probs"`` (not the paper; docs/decisions/fedhydra.md): the same weights applied to each
    client's softmax probabilities instead of its logits, returned as log-probabilities
    log(P) (so CE/KL on the result read P as a distribution). With logits, a weight ≈ 0 turns a
    client's strongly negative logit for a class it never saw into ≈ 0, which then outranks
    the owner's own logits; with probabilities a weight ≈ 0 only removes a vote.
    """
    _, _, c = check_sa_weights(client_logits, U_r, U_c)
    if space not in SA_SPACES:
        raise ValueError(f"space must be one of {SA_SPACES} ('logits' = Eq. 8; got {space!r})")
    if space == "probs":
        out = sa_logits(client_logits.float().softmax(-1), y, U_r, U_c, False, "logits")
        return out.clamp_min(1e-30).log()
    wr = to_device(U_r, client_logits.device).to(client_logits.dtype)
    wc = to_device(U_c, client_logits.device).to(client_logits.dtype)
    if y is None:
        out = torch.einsum("kbc,ck->bc", client_logits, wr * wc)
    else:
        if y.shape != client_logits.shape[1:2]:
            raise ValueError(f"y must have shape ({client_logits.shape[1]},) (got "
                             f"{tuple(y.shape)})")
        v = wr[to_device(y, client_logits.device)]  # (B, m), Eq. 10
        out = torch.einsum("kbc,ck,bk->bc", client_logits, wc, v)
    return out * c if rescale else out


class SAEnsemble(Ensemble):
    """Frozen client models combined by label-free stratified aggregation (FedHydra Fig. 8's
    "SA" ensemble evaluated on real test data; :func:`sa_logits` with ``y=None``).

    ``U_r``, ``U_c``: (C, m) stratified weights
    (:class:`ofl_core.distill.stratification.Stratification`).
    ``forward(x)`` returns SA logits (B, C); ``forward(x, y)`` the label-conditioned SA
    (Eqs. 8–11). Members and ``member_logits`` as :class:`~ofl_core.combine.Ensemble`.
    """

    def __init__(self, models: Sequence[nn.Module], U_r: torch.Tensor, U_c: torch.Tensor,
                 rescale: bool = False, space: str = "logits") -> None:
        super().__init__(models)
        m = len(models)
        if U_r.dim() != 2 or U_r.shape[1] != m or U_c.shape != U_r.shape:
            raise ValueError(f"U_r and U_c must both be (C, {m}) (got {tuple(U_r.shape)} and "
                             f"{tuple(U_c.shape)})")
        self.register_buffer("U_r", U_r.detach().float().clone())
        self.register_buffer("U_c", U_c.detach().float().clone())
        self.rescale, self.space = rescale, space

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return sa_logits(self.member_logits(x), y, self.U_r, self.U_c, self.rescale, self.space)


__all__ = ["SA_SPACES", "SAEnsemble", "check_sa_weights", "sa_logits"]
