"""FedHydra diagnostics: what model stratification (Alg. 2) measured, and how good
each teacher (:mod:`ofl_core.distill.combiners`) is on real test images — as tidy frames.

- :func:`loss_curves_frame`: the loss curves L_kj (Eq. 1), one row per (client, class, step).
- :func:`stratification_frame`: per (client, class): min/max of L_kj, u (Eq. 2 and the opt-in
  log ratio), Ū_r, Ū_c (Eqs. 4–7) and Ū_c relative to the client's largest entry.
- :func:`own_class_ratios`: per client, how unequal Ū_c is between the classes it owns.
- :func:`teacher_panel`: per teacher, its label-free test accuracy, its accuracy when fed the
  true test labels (*leaky*: a server never has them) and its random-label echo rate.

The owners of a class come from the partition's label counts — diagnostics only (the server
never sees them).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from ..distill.combiners import (
    DIAGNOSTIC,
    TEACHERS,
    WEIGHTED,
    TeacherWeights,
    combine_teachers,
    oracle_weights,
)
from ..distill.stratification import Stratification, guidance_capability


def owners(counts: Sequence[Sequence[int]] | torch.Tensor | None, m: int, c: int
           ) -> torch.Tensor:
    """(m, C) boolean: client k holds samples of class j (all False without counts)."""
    if counts is None:
        return torch.zeros(m, c, dtype=torch.bool)
    own = torch.as_tensor(counts) > 0
    if tuple(own.shape) != (m, c):
        raise ValueError(f"counts must be (m, C) = ({m}, {c}) (got {tuple(own.shape)})")
    return own


def loss_curves_frame(strat: Stratification,
                      counts: Sequence[Sequence[int]] | torch.Tensor | None = None
                      ) -> pd.DataFrame:
    """The stratification's loss curves L_kj = [ℓ^1 … ℓ^T_G] (FedHydra Eq. 1, Alg. 2 lines
    9–13) in long form: columns ``client``, ``class``, ``step`` (1-based), ``loss``,
    ``owned`` (client k holds class j, from ``counts`` (m, C); False without)."""
    L = strat.losses
    m, c, t = L.shape
    own = owners(counts, m, c)
    k, j, s = torch.meshgrid(torch.arange(m), torch.arange(c), torch.arange(t), indexing="ij")
    return pd.DataFrame({"client": k.flatten().numpy(), "class": j.flatten().numpy(),
                         "step": s.flatten().numpy() + 1, "loss": L.flatten().numpy(),
                         "owned": own[k.flatten(), j.flatten()].numpy()})


def stratification_frame(strat: Stratification,
                         counts: Sequence[Sequence[int]] | torch.Tensor | None = None
                         ) -> pd.DataFrame:
    """One row per (client k, class j): ``owned`` and ``count`` (from ``counts``, diagnostics
    only), ``L_first``, ``L_min``, ``L_max`` of the loss curve (Eq. 1), ``u`` (Eq. 2),
    ``u_log_ratio`` (log(max L / min L), the opt-in robust u), ``U_r`` and ``U_c`` (Eqs. 4–7,
    from ``strat``), and ``U_c_rel`` = Ū_c[j, k] / max_j' Ū_c[j', k] (1 for the client's
    favourite class)."""
    L = strat.losses
    m, c, _ = L.shape
    own = owners(counts, m, c)
    n = (torch.as_tensor(counts) if counts is not None else torch.zeros(m, c)).long()
    U_c = strat.U_c.T  # (m, C)
    rel = U_c / U_c.amax(1, keepdim=True).clamp_min(1e-300)
    k, j = torch.meshgrid(torch.arange(m), torch.arange(c), indexing="ij")
    cols = {"client": k, "class": j, "owned": own, "count": n, "L_first": L[..., 0],
            "L_min": L.amin(-1), "L_max": L.amax(-1), "u": guidance_capability(L),
            "u_log_ratio": guidance_capability(L, rule="log_ratio"), "U_r": strat.U_r.T,
            "U_c": U_c, "U_c_rel": rel}
    return pd.DataFrame({name: v.flatten().numpy() for name, v in cols.items()})


def own_class_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Per client (from :func:`stratification_frame` with counts): its owned classes, their
    Ū_c, the ratio max/min of Ū_c (and of u) between them — 1 = the client's classes count
    equally; ≫ 1 = Eq. 8 keeps one of them and silences the others — and the share of the
    client's Ū_c column on its own classes."""
    rows = []
    for k, g in frame.groupby("client"):
        own = g[g.owned]
        if own.empty:
            continue
        rows.append({"client": k, "classes": own["class"].tolist(),
                     "U_c_own": own.U_c.round(4).tolist(),
                     "U_c_ratio": own.U_c.max() / max(own.U_c.min(), 1e-300),
                     "u_ratio": own.u.max() / max(own.u.min(), 1e-300),
                     "U_c_on_own": own.U_c.sum()})
    return pd.DataFrame(rows)


def panel_weights(strat: Stratification, counts: Sequence[Sequence[int]] | torch.Tensor | None
                  ) -> dict[str, TeacherWeights | None]:
    """The weights each teacher of :func:`teacher_panel` uses: the stratification's, the
    oracle's (label counts), and ``"oracle×Ū_c"`` (the oracle's Ū_r with the stratification's
    Ū_c, read as ``"sa"``: does Ū_c alone explain SA's deficit?)."""
    strat_w = TeacherWeights(strat.U_r.float(), strat.U_c.float())
    out: dict[str, TeacherWeights | None] = {
        t: strat_w if t in WEIGHTED else None for t in TEACHERS if t not in DIAGNOSTIC}
    if counts is not None:
        orc = oracle_weights(counts)
        out["oracle"] = TeacherWeights(orc.U_r.float(), orc.U_c.float(), orc.source)
        out["oracle×Ū_c"] = TeacherWeights(orc.U_r.float(), strat.U_c.float(), "diagnostic")
    return out


def teacher_panel(logits: torch.Tensor, y: torch.Tensor, strat: Stratification,
                  counts: Sequence[Sequence[int]] | torch.Tensor | None = None,
                  rescale: bool = False, seed: int = 0) -> pd.DataFrame:
    """Each teacher on real test images, no distillation. ``logits``: the clients' test
    logits (m, N, C); ``y``: the true labels (N,).

    Columns: ``teacher``; ``label_free`` — accuracy (%) of the label-free teacher (what a server
    could evaluate; FedHydra Fig. 8's SA); ``true_label_leaky`` — accuracy when the teacher is
    fed the true test labels as its target labels (Eq. 10's row Ū_r(y_i, ·)); **leaky**: the
    label enters the prediction, so a high value says the teacher echoes its label, not that
    it classifies; ``echo_rate`` — with labels ỹ drawn uniformly at random, independent of the
    image, the share (%) of images where argmax T(x, ỹ) = ỹ: 100/C for a label-free teacher,
    near 100 for a teacher whose decision is the label it is given (then a generator trained
    on CE(T(x̂, y), y) is satisfied by almost any image); ``diagnostic`` — uses label counts.
    """
    m, _, c = logits.shape
    gen = torch.Generator().manual_seed(seed)
    y_rand = torch.randint(0, c, y.shape, generator=gen)
    rows = []
    for name, w in panel_weights(strat, counts).items():
        rule = "sa" if name == "oracle×Ū_c" else name

        def acc(labels: torch.Tensor | None, target: torch.Tensor,
                r: str = rule, w: TeacherWeights | None = w) -> float:
            out = combine_teachers(r, logits.float(), labels, w, rescale)
            return float((out.argmax(1) == target).float().mean() * 100)

        rows.append({"teacher": name, "label_free": acc(None, y),
                     "true_label_leaky": acc(y, y), "echo_rate": acc(y_rand, y_rand),
                     "diagnostic": name in DIAGNOSTIC or name == "oracle×Ū_c"})
    return pd.DataFrame(rows)


__all__ = ["loss_curves_frame", "own_class_ratios", "owners", "panel_weights",
           "stratification_frame", "teacher_panel"]
