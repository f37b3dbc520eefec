"""ofl_core.distill.combiners: every teacher on hand-made tensors, the oracle's
weights from label counts, and the checks that keep the oracle a diagnostic."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ofl_core.distill.combiners import (
    TEACHERS,
    WEIGHTED,
    TeacherEnsemble,
    TeacherWeights,
    combine_teachers,
    oracle_weights,
)
from ofl_core.distill.stratified_aggregation import sa_logits

# m = 2 clients, B = 2 samples, C = 3 classes; client 0 owns class 0, client 1 classes 1-2
P = torch.tensor([[[4.0, -1.0, -2.0], [1.0, 0.0, -3.0]],
                  [[-5.0, 2.0, 1.0], [-6.0, 1.0, 3.0]]])
U_r = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.25, 0.75]])  # (C, m), rows sum to 1
U_c = torch.tensor([[0.8, 0.1], [0.1, 0.6], [0.1, 0.3]])  # columns sum to 1
W = TeacherWeights(U_r, U_c)
Y = torch.tensor([2, 0])


def test_mean_teachers() -> None:
    torch.testing.assert_close(combine_teachers("mean_logits", P), P.mean(0))
    torch.testing.assert_close(combine_teachers("mean_logits", P, Y), P.mean(0))  # no labels
    ms = combine_teachers("mean_softmax", P)
    torch.testing.assert_close(ms.exp(), P.softmax(-1).mean(0))
    torch.testing.assert_close(ms.exp().sum(1), torch.ones(2))


def test_sa_teachers_are_eqs_8_to_11() -> None:
    for y in (Y, None):
        torch.testing.assert_close(combine_teachers("sa", P, y, W), sa_logits(P, y, U_r, U_c))
        torch.testing.assert_close(combine_teachers("sa", P, y, W, rescale=True),
                                   3 * sa_logits(P, y, U_r, U_c))
        torch.testing.assert_close(combine_teachers("sa_probs", P, y, W, rescale=True),
                                   sa_logits(P, y, U_r, U_c, space="probs"))
    # hand: sample 0 labelled 2 → row Ū_r(2,·) = (0.25, 0.75); P̂_k = P_k ⊙ Ū_c(:, k)
    p0 = 0.25 * P[0, 0] * U_c[:, 0] + 0.75 * P[1, 0] * U_c[:, 1]
    torch.testing.assert_close(combine_teachers("sa", P, Y, W)[0], p0)


def test_sa_without_uc_label_free_and_labelled() -> None:
    free = torch.zeros(2, 3)
    for i in range(2):
        for j in range(3):
            free[i, j] = U_r[j, 0] * P[0, i, j] + U_r[j, 1] * P[1, i, j]
    torch.testing.assert_close(combine_teachers("sa_no_uc", P, None, W), free)
    torch.testing.assert_close(combine_teachers("sa_no_uc", P, Y, W), free)  # never labelled
    lab = torch.stack([U_r[Y[i], 0] * P[0, i] + U_r[Y[i], 1] * P[1, i] for i in range(2)])
    torch.testing.assert_close(combine_teachers("sa_no_uc_labelled", P, Y, W), lab)
    torch.testing.assert_close(combine_teachers("sa_no_uc_labelled", P, None, W), free)
    # rescale is FedHydra's ×C for the "sa" teacher only
    torch.testing.assert_close(combine_teachers("sa_no_uc", P, None, W, rescale=True), free)


def test_oracle_weights_from_label_counts() -> None:
    counts = [[10, 0, 0], [0, 5, 5]]  # (m, C): 2c/c-like, one owner per class
    w = oracle_weights(counts)
    assert w.source.startswith("label counts")
    torch.testing.assert_close(w.U_r, torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]],
                                                   dtype=torch.float64))
    torch.testing.assert_close(w.U_c.sum(0), torch.ones(2, dtype=torch.float64))
    # each class's logit is its owner's
    out = combine_teachers("oracle", P, Y, w.to("cpu"))
    torch.testing.assert_close(out, torch.stack([P[0, :, 0], P[1, :, 1], P[1, :, 2]], -1))
    # shared classes in proportion to the counts; a class nobody holds: uniform
    w2 = oracle_weights([[3, 1, 0], [1, 1, 0]])
    torch.testing.assert_close(w2.U_r[0], torch.tensor([0.75, 0.25], dtype=torch.float64))
    torch.testing.assert_close(w2.U_r[2], torch.tensor([0.5, 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="non-negative"):
        oracle_weights([[-1, 0, 0], [0, 1, 1]])


def test_teacher_checks_and_sets() -> None:
    assert {"sa", "sa_probs", "sa_no_uc_labelled"} <= set(WEIGHTED) <= set(TEACHERS)
    with pytest.raises(ValueError, match="teacher must be one of"):
        combine_teachers("median", P)
    for name in WEIGHTED:
        with pytest.raises(ValueError, match="needs"):
            combine_teachers(name, P, Y)
    with pytest.raises(ValueError, match="diagnostic"):
        combine_teachers("oracle", P)


class _Fixed(nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("logits", logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[: x.shape[0]]


def test_teacher_ensemble_is_the_label_free_teacher() -> None:
    members = [_Fixed(P[0]), _Fixed(P[1])]
    x = torch.zeros(2, 1)
    for name in TEACHERS:
        w = oracle_weights([[1, 0, 0], [0, 1, 1]]) if name == "oracle" else W
        ens = TeacherEnsemble(members, name, w)
        wf = w.to("cpu")
        torch.testing.assert_close(ens(x), combine_teachers(name, P, None, wf))
        torch.testing.assert_close(ens(x, Y), combine_teachers(name, P, Y, wf))
    with pytest.raises(ValueError, match="needs"):
        TeacherEnsemble(members, "sa")
