"""ofl_core.distill.stratified_aggregation: stratified aggregation (Eqs. 8–12) against a
loop-by-loop transcription of Eqs. 8–11 and on hand-made weights; the SA ensemble module."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ofl_core.combine import Ensemble
from ofl_core.distill.stratification import stratified_weights
from ofl_core.distill.stratified_aggregation import SAEnsemble, sa_logits
from ofl_core.fedhydra.server import FedHydraConfig

pytestmark = pytest.mark.usefixtures("one_thread")



def _normalised(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return u / u.sum(1, keepdim=True), u / u.sum(0, keepdim=True)


# ---------------------------------------------------------------- stratified aggregation


def test_stratified_weights_rows_and_columns_sum_to_one() -> None:
    U = torch.tensor([[1.0, 3.0], [2.0, 2.0], [0.0, 5.0]], dtype=torch.float64)  # (C=3, m=2)
    U_r, U_c = stratified_weights(U)
    torch.testing.assert_close(U_r.sum(1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(U_c.sum(0), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(U_r[0], torch.tensor([0.25, 0.75], dtype=torch.float64))  # Eq. 4
    torch.testing.assert_close(U_c[:, 0], torch.tensor([1 / 3, 2 / 3, 0.0],
                                                       dtype=torch.float64))  # Eq. 6
    # guards: an all-zero row/column gets uniform weights; huge u do not overflow
    Z = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    zr, zc = stratified_weights(Z)
    torch.testing.assert_close(zr[0], torch.tensor([0.5, 0.5], dtype=torch.float64))
    torch.testing.assert_close(zc[:, 1], torch.tensor([0.5, 0.5], dtype=torch.float64))
    hr, hc = stratified_weights(torch.tensor([[1e300, 1e300], [1e300, 1.0]],
                                             dtype=torch.float64))
    assert torch.isfinite(hr).all() and torch.isfinite(hc).all()
    torch.testing.assert_close(hr[0], torch.tensor([0.5, 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="non-negative"):
        stratified_weights(-U)


def _sa_by_the_paper(P: torch.Tensor, y: torch.Tensor, U_r: torch.Tensor, U_c: torch.Tensor
                     ) -> torch.Tensor:
    """Eqs. 8–11 transcribed with loops."""
    m, b, c = P.shape
    P_hat = [P[k] * (torch.ones(b, 1) @ U_c[:, k][None, :]) for k in range(m)]  # Eq. 8
    V = torch.stack([U_r[y[i], :] for i in range(b)])  # Eq. 10, (b, m)
    rows = []
    for i in range(b):
        P_i = torch.stack([P_hat[k][i, :] for k in range(m)])  # Eq. 9, (m, c)
        rows.append(V[i, :] @ P_i)  # Eq. 11
    return torch.stack(rows)


def test_sa_logits_follow_eqs_8_to_11_and_the_label_free_form() -> None:
    g = torch.Generator().manual_seed(0)
    m, b, c = 3, 5, 4
    P = torch.randn(m, b, c, generator=g) * 3
    U_r, U_c = _normalised(torch.rand(c, m, generator=g) + 0.1)
    y = torch.randint(0, c, (b,), generator=g)
    torch.testing.assert_close(sa_logits(P, y, U_r, U_c), _sa_by_the_paper(P, y, U_r, U_c))
    torch.testing.assert_close(sa_logits(P, y, U_r, U_c, rescale=True),
                               c * _sa_by_the_paper(P, y, U_r, U_c))
    # label-free: P_ij = Σ_k Ū_r(j,k)·Ū_c(j,k)·P_k[i,j]
    free = torch.zeros(b, c)
    for i in range(b):
        for j in range(c):
            free[i, j] = sum(U_r[j, k] * U_c[j, k] * P[k, i, j] for k in range(m))
    torch.testing.assert_close(sa_logits(P, None, U_r, U_c), free)
    # the label-conditioned form equals the label-free one on each class's own column
    for j in range(c):
        yj = torch.full((b,), j)
        torch.testing.assert_close(sa_logits(P, yj, U_r, U_c)[:, j], free[:, j])
    with pytest.raises(ValueError, match=r"\(C, m\)"):
        sa_logits(P, y, U_r.T, U_c)
    with pytest.raises(ValueError, match="y must have shape"):
        sa_logits(P, y[:2], U_r, U_c)


def test_uniform_weights_give_the_mean_ensemble_over_c() -> None:
    g = torch.Generator().manual_seed(1)
    m, b, c = 4, 6, 5
    P = torch.randn(m, b, c, generator=g) * 4
    U_r, U_c = torch.full((c, m), 1 / m), torch.full((c, m), 1 / c)
    mean = P.mean(0)
    y = torch.randint(0, c, (b,), generator=g)
    for labels in (y, None):
        sa = sa_logits(P, labels, U_r, U_c)
        torch.testing.assert_close(sa, mean / c)
        assert torch.equal(sa.argmax(1), mean.argmax(1))  # same predictions ...
        ent = [-(F.softmax(t, 1) * F.log_softmax(t, 1)).sum(1) for t in (sa, mean)]
        assert bool((ent[0] > ent[1]).all())  # ... but a softer softmax (temperature C)
        torch.testing.assert_close(sa_logits(P, labels, U_r, U_c, rescale=True), mean)


class _Fixed(nn.Module):
    def __init__(self, logits: list[float]) -> None:
        super().__init__()
        self.register_buffer("logits", torch.tensor(logits))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(x.shape[0], -1)


def test_sa_ensemble_module() -> None:
    members = [_Fixed([4.0, 0.0, 1.0]), _Fixed([0.0, 2.0, 3.0])]
    x = torch.zeros(2, 1)
    U_r, U_c = torch.full((3, 2), 0.5), torch.full((3, 2), 1 / 3)
    sa = SAEnsemble(members, U_r, U_c)
    torch.testing.assert_close(sa(x), Ensemble(members)(x) / 3)
    torch.testing.assert_close(SAEnsemble(members, U_r, U_c, rescale=True)(x),
                               Ensemble(members)(x))
    # expert weights: class 0 from member 0, classes 1-2 from member 1
    U_r = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    U_c = torch.tensor([[1.0, 0.0], [0.0, 0.5], [0.0, 0.5]])
    out = SAEnsemble(members, U_r, U_c)(x)
    torch.testing.assert_close(out[0], torch.tensor([4.0, 1.0, 1.5]))
    y = torch.tensor([0, 2])
    torch.testing.assert_close(SAEnsemble(members, U_r, U_c)(x, y),
                               sa_logits(torch.stack([mm(x) for mm in members]), y, U_r, U_c))
    sa.train()
    assert not any(mm.training for mm in sa.members)
    with pytest.raises(ValueError, match=r"\(C, 2\)"):
        SAEnsemble(members, torch.ones(3, 3), torch.ones(3, 3))


def test_sa_probs_space_weights_probabilities_and_a_zero_weight_removes_a_vote() -> None:
    # client 0 saw only class 0, client 1 only class 1; client 0 is very negative on class 1
    logits = torch.tensor([[[4.0, -20.0]], [[-1.0, 2.0]]])  # (m=2, B=1, C=2)
    U = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (C, m): class j owned by client j
    # label-free, weights on probabilities: P[j] = p_j(client j)
    out = sa_logits(logits, None, U, U, space="probs")
    p = logits.softmax(-1)
    torch.testing.assert_close(out.exp(), torch.stack([p[0, :, 0], p[1, :, 1]], -1))
    # the label-free logit form gives each class only its owner's logit too
    torch.testing.assert_close(sa_logits(logits, None, U, U), torch.tensor([[4.0, 2.0]]))
    with pytest.raises(ValueError, match="space"):
        sa_logits(logits, None, U, U, space="soft")
    with pytest.raises(ValueError, match="teacher"):  # sa_probs is FedHydraConfig.teacher
        FedHydraConfig(teacher="soft")
