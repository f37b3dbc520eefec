"""The teacher: how the m clients' outputs P_k = f_k(x̂) (m, B, C) become the one prediction the
generator is trained against and the student distils — the ``teacher`` field shared by DENSE
and FedHydra (:class:`~ofl_core.distill.config.TeacherConfig`).

Every teacher returns logits (B, C) for softmax / CE / KL (log-probabilities where it averages
probabilities). ``y`` is the target label of each synthetic sample when one exists (generator
training, distillation of labelled batches); ``y=None`` is the label-free form (real test
images, DENSE's unlabelled pool). Weights W are (C, m) (rows classes j, columns clients k).

- ``"mean_logits"``: D = (1/m) Σ_k P_k, DENSE Eq. 1 (DENSE's default).
- ``"mean_softmax"``: log((1/m) Σ_k σ(P_k)) (FedOneShot's combiner; not in either paper).
- ``"sa"``: FedHydra's stratified aggregation as written, Eqs. 8–11 on logits with Ū_c and Ū_r
  (:func:`~ofl_core.distill.stratified_aggregation.sa_logits`; FedHydra's default). Labelled: the
  sample's row Ū_r(y_i, ·) (Eq. 10); label-free: P_ij = Σ_k Ū_r(j,k)·Ū_c(j,k)·P_k[i,j].
- ``"sa_probs"``: the same weights on softmax probabilities (not the paper;
  docs/decisions/fedhydra.md).
- ``"sa_no_uc"``: SA without the Ū_c factor (Eq. 8 dropped), label-free always:
  P_ij = Σ_k Ū_r(j,k)·P_k[i,j] — each class's logit from the clients that guide that class.
- ``"sa_no_uc_labelled"``: SA without Ū_c with Eq. 10's row: P[i,:] = Σ_k Ū_r(y_i,k)·P_k[i,:]
  (label-free form = ``"sa_no_uc"``).
- ``"oracle"`` — **a diagnostic, never a method**: ``"sa_no_uc"`` with Ū_r replaced by the true
  class owners from the clients' label counts (:func:`oracle_weights`), which a data-free
  server does not have. It is an upper reference for what a perfect stratification could give.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from ..combine import Ensemble
from ..seeds import derive_seed
from ..server import ServerContext
from .loop import DistillRun
from .stratification import Stratification, stratify
from .stratified_aggregation import sa_logits

Teacher = Literal["mean_logits", "mean_softmax", "sa", "sa_probs", "sa_no_uc",
                  "sa_no_uc_labelled", "oracle"]
TEACHERS: tuple[str, ...] = ("mean_logits", "mean_softmax", "sa", "sa_probs", "sa_no_uc",
                             "sa_no_uc_labelled", "oracle")
#: teachers that need (C, m) weights (from model stratification, or label counts for the oracle)
WEIGHTED = frozenset({"sa", "sa_probs", "sa_no_uc", "sa_no_uc_labelled", "oracle"})
#: diagnostics that use information a data-free server does not have
DIAGNOSTIC = frozenset({"oracle"})


@dataclass(frozen=True, eq=False)
class TeacherWeights:
    """(C, m) weights of the weighted teachers: ``U_r`` (each class row sums to 1 over the
    clients, FedHydra Eqs. 4–5) and ``U_c`` (each client column sums to 1 over the classes,
    Eqs. 6–7). ``source``: ``"stratification"`` (Alg. 2) or ``"label counts (oracle)"``."""

    U_r: torch.Tensor
    U_c: torch.Tensor
    source: str = "stratification"

    def to(self, device: torch.device | str) -> TeacherWeights:
        return TeacherWeights(self.U_r.to(device, torch.float32),
                              self.U_c.to(device, torch.float32), self.source)


def oracle_weights(counts: Sequence[Sequence[int]] | torch.Tensor) -> TeacherWeights:
    """DIAGNOSTIC ONLY (uses the clients' true label counts, which the server never sees):
    U_r[j, k] = n_kj / Σ_k' n_k'j, each class shared among the clients that hold it in
    proportion to their samples (2c/c: 1 on the class's owner); U_c = U_r column-normalised.
    ``counts``: the partition's (m, C) client × class sample counts."""
    n = torch.as_tensor(counts, dtype=torch.float64).T  # (C, m)
    if n.dim() != 2 or bool((n < 0).any()):
        raise ValueError("counts must be an (m, C) matrix of non-negative sample counts")
    rows, cols = n.sum(1, keepdim=True), n.sum(0, keepdim=True)
    m, c = n.shape[1], n.shape[0]
    U_r = torch.where(rows > 0, n / rows.clamp_min(1), torch.full_like(n, 1.0 / m))
    U_c = torch.where(cols > 0, n / cols.clamp_min(1), torch.full_like(n, 1.0 / c))
    return TeacherWeights(U_r, U_c, "label counts (oracle)")


def check_teacher(name: str, weights: TeacherWeights | None) -> None:
    """Raise ``ValueError`` for an unknown teacher or a weighted one without weights."""
    if name not in TEACHERS:
        raise ValueError(f"teacher must be one of {TEACHERS} (got {name!r})")
    if name in WEIGHTED and weights is None:
        raise ValueError(f"teacher {name!r} needs (C, m) weights "
                         + ("from the clients' label counts (oracle_weights): a diagnostic, "
                            "never a method" if name in DIAGNOSTIC else "(model stratification)"))


def combine_teachers(name: str, logits: torch.Tensor, y: torch.Tensor | None = None,
                     weights: TeacherWeights | None = None, rescale: bool = False
                     ) -> torch.Tensor:
    """The teacher ``name`` (module docstring) from the clients' logits (m, B, C): logits (B, C).

    ``y``: target labels (B,) or None (label-free). ``rescale``: FedHydra's ``sa_rescale``
    (P × C), used by ``"sa"`` only — the other teachers are weighted means (rows of U_r sum
    to 1) and keep the logits' scale."""
    check_teacher(name, weights)
    if name == "mean_logits":
        return logits.mean(0)
    if name == "mean_softmax":
        return logits.float().softmax(-1).mean(0).clamp_min(1e-30).log()
    assert weights is not None
    U_r, U_c = weights.U_r, weights.U_c
    if name in ("sa", "sa_probs"):
        space = "probs" if name == "sa_probs" else "logits"
        return sa_logits(logits, y, U_r, U_c, rescale and name == "sa", space)
    ones = torch.ones_like(U_r)
    label = y if name == "sa_no_uc_labelled" else None
    return sa_logits(logits, label, U_r, ones)


def stratification_stage(run_: DistillRun, cfg: Any, ctx: ServerContext, m: int,
                         given: Stratification | None) -> Stratification:
    """Alg. 1 line 9: model stratification (Alg. 2, Eqs. 1–7), or check a given one. The seed
    is ``derive_seed(ctx.seed, "fedhydra-stratify")`` for every server (DENSE with a weighted
    teacher gets the same Ū_r, Ū_c as FedHydra on the same clients). A resumed run takes it
    from its checkpoint (:meth:`~ofl_core.distill.loop.DistillRun.stage`)."""
    C = ctx.num_classes
    if given is None:
        def compute() -> Stratification:
            return stratify(
                run_.bank.models, C, ctx.in_channels, ctx.image_size, steps=cfg.strat_steps,
                batch_size=cfg.strat_batch_size, nz=cfg.nz, ngf=cfg.ngf, lr=cfg.strat_lr,
                betas=cfg.g_betas, seed=derive_seed(ctx.seed, "fedhydra-stratify"),
                device=run_.device, group=cfg.strat_group, fast_generator=cfg.fast_generator,
                channels_last=run_.bank.channels_last, min_loss_floor=cfg.min_loss_floor,
                rule=cfg.strat_u, progress=ctx.progress)

        return run_.stage("stratification", compute, dataclasses.asdict,
                          lambda d: Stratification(**d))
    if tuple(given.U.shape) != (C, m):
        raise ValueError(f"{run_.name}: the given stratification is {tuple(given.U.shape)}"
                         f", expected (C, m) = ({C}, {m})")
    return given


def require_given_weights(name: str, given: TeacherWeights | None, method: str) -> None:
    """Refuse the diagnostic teacher ``name`` without explicit weights; the servers call this
    before their stratification, so the refusal costs nothing."""
    if name in DIAGNOSTIC and given is None:
        raise ValueError(f"{method}: teacher {name!r} is a diagnostic that uses the clients' "
                         "true label counts, never a method; pass its weights explicitly "
                         "(teacher_weights=oracle_weights(counts))")


def resolve_teacher_weights(name: str, strat: Stratification | None,
                            given: TeacherWeights | None, shape: tuple[int, int],
                            method: str) -> TeacherWeights | None:
    """The weights of the teacher ``name``: ``given`` (required for the diagnostic oracle:
    :func:`~ofl_core.distill.combiners.oracle_weights`), else the stratification's Ū_r, Ū_c
    (None for the unweighted teachers)."""
    if given is not None:
        if tuple(given.U_r.shape) != shape or tuple(given.U_c.shape) != shape:
            raise ValueError(f"{method}: teacher weights must be (C, m) = {shape}")
        return given
    require_given_weights(name, given, method)
    if name not in WEIGHTED:
        return None
    assert strat is not None
    return TeacherWeights(strat.U_r, strat.U_c)


class TeacherEnsemble(Ensemble):
    """Frozen client models combined by the teacher ``name`` (:func:`combine_teachers`);
    ``forward(x)`` is the label-free teacher, ``forward(x, y)`` the labelled one."""

    def __init__(self, models: Sequence[nn.Module], name: str,
                 weights: TeacherWeights | None = None, rescale: bool = False) -> None:
        super().__init__(models)
        check_teacher(name, weights)
        self.name, self.weights, self.rescale = name, weights, rescale

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.member_logits(x)
        w = self.weights.to(logits.device) if self.weights is not None else None
        return combine_teachers(self.name, logits, y, w, self.rescale)


__all__ = ["DIAGNOSTIC", "TEACHERS", "WEIGHTED", "Teacher", "TeacherEnsemble",
           "TeacherWeights", "check_teacher", "combine_teachers", "oracle_weights",
           "require_given_weights", "resolve_teacher_weights", "stratification_stage"]
