"""FedLPA's server (Liu et al., NeurIPS 2024; public code ``lebronlambert/FedLPA_NeurIPS2024``,
``experiments_our.py``): per Linear/Conv2d layer, the global weights M that match the clients'
Kronecker-factored posteriors, in closed form and then refined by gradient descent.

No text of the paper is in this repository: every formula and constant here is read from the
public code (commit 08dd729), and both presets are that code's scripts' settings; where the
code's own defaults differ, the field says so (⚑).

With w_k = n_k / n, each client's layer matrix M_k (:func:`~.factors.layer_matrix`) and its
damped factors (A_k, G_k):

    Ā = Σ w_k A_k,   Ḡ = Σ w_k G_k,   Z = Σ w_k G_k M_k A_k
    closed form ("biased", :func:`closed_form`):   M = Ḡ⁻¹ Z Ā⁻¹
    refinement ("newton", :func:`refine`):  from the closed form, ``newton_steps`` plain
        gradient steps of size ``newton_lr`` on mean((Σ w_k G_k M A_k − Z)²)

Every other parameter and buffer (BatchNorm) is the w_k-weighted average. The code evaluates
both models on the test set and reports the better; here the refined model is the method's
result (``solution="newton"``), the closed form is ``solution="biased"``, and the code's
max-of-two is ``solution="max_on_test"``, a selection on the test set that its records name
(``fedlpa-max-on-test``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from ..data.datasets import ImageDataset
from ..data.partition import Partition
from ..presets import check_preset
from ..server import SHARED_INIT, MethodKind, MethodSpec, ServerContext, ServerResult
from ..server.averaging import average_states
from ..server.context import check_homogeneous
from ..uploads import ClientUpload, UploadError, build_from_upload, validate_upload
from ..validation import COUNT, NONNEG, POSITIVE, check_config, within
from .factors import factor_layers, kfac_factors, layer_matrix, validate_factors

Solution = Literal["newton", "biased", "max_on_test"]


@dataclass(frozen=True)
class FedLPAConfig:
    """FedLPA's server and its clients' curvature pass.

    ``coor``: the factors' damping is √(1 − coor)·I; 0.999 in every script of the code
    (``scripts/*.sh``), ⚑ while its argparse default is 1e-4 (damping ≈ 1). ``newton_steps`` =
    10,000 and ``newton_lr`` = 1.0: the code's ``newton_solve_auto_gradient``.
    ``factor_batch_size`` = 64, the code's batch size (the factors do not depend on it).
    ``solution``: which model is the result (module docstring). ``weighted``: w_k = n_k/n
    (the code) or uniform. ``dtype``: the arithmetic of the inverses and the refinement
    (float32, as the code; float64 where the factors are ill-conditioned).
    """

    coor: float = 0.999
    newton_steps: int = 10_000
    newton_lr: float = 1.0
    factor_batch_size: int = 64
    solution: Solution = "newton"
    weighted: bool = True
    dtype: Literal["float32", "float64"] = "float32"
    preset: str = "paper"

    HASH_IF_SET: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        # coor < 1 keeps the damping √(1 − coor) > 0, so Ā and Ḡ stay invertible
        check_config(self, {"coor": within(0.0, 1.0, high_open=True), "newton_steps": NONNEG,
                            "newton_lr": POSITIVE, "factor_batch_size": COUNT})

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: Any) -> FedLPAConfig:
        """Both presets are the code's scripts' settings (only the label differs)."""
        check_preset(preset)
        return cls(preset=preset, **overrides)

    @property
    def method_name(self) -> str:
        return {"newton": "fedlpa", "biased": "fedlpa-biased",
                "max_on_test": "fedlpa-max-on-test"}[self.solution]


def attach_factors(uploads: list[ClientUpload], dataset: ImageDataset, partition: Partition,
                   cfg: FedLPAConfig, device: str | torch.device) -> list[ClientUpload]:
    """The clients' side of FedLPA: each client computes its factors on its own local data
    (:func:`~.factors.kfac_factors`) and adds them to its upload."""
    out = []
    for u in uploads:
        idx = torch.as_tensor(partition.client_indices[u.client_id])
        model = build_from_upload(u, device)
        factors = kfac_factors(model, dataset.x_train[idx], dataset.y_train[idx],
                               coor=cfg.coor, batch_size=cfg.factor_batch_size, device=device)
        out.append(dataclasses.replace(u, curvature=factors))
    return out


def fit(weights: list[float], factors: list[tuple], m: torch.Tensor) -> torch.Tensor:
    """Σ_k w_k G_k M A_k: what the clients' posteriors make of one layer matrix M."""
    return sum(w * g @ m @ a for w, (a, g) in zip(weights, factors, strict=True))


def closed_form(weights: list[float], mats: list[torch.Tensor], factors: list[tuple]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(Ḡ⁻¹ Z Ā⁻¹, Z) for one layer: the clients' matrices M_k, their (A_k, G_k), weights w_k."""
    a_bar = sum(w * a for w, (a, _) in zip(weights, factors, strict=True))
    g_bar = sum(w * g for w, (_, g) in zip(weights, factors, strict=True))
    z = sum(w * g @ m @ a for w, m, (a, g) in zip(weights, mats, factors, strict=True))
    return torch.linalg.inv(g_bar) @ z @ torch.linalg.inv(a_bar), z


def refine(m0: torch.Tensor, z: torch.Tensor, weights: list[float], factors: list[tuple],
           steps: int, lr: float) -> torch.Tensor:
    """``steps`` gradient steps of size ``lr`` on L(M) = mean((Σ w_k G_k M A_k − Z)²), from
    ``m0`` (the code's "newton" solve; its gradient, written out: (2/|Z|) Σ w_k G_k R A_k with
    R the residual, A_k and G_k symmetric)."""
    m = m0.clone()
    a = torch.stack([f[0] for f in factors])  # (K, d, d)
    g = torch.stack([f[1] for f in factors])  # (K, out, out)
    wg = torch.as_tensor(weights, dtype=g.dtype, device=g.device)[:, None, None] * g
    step = lr * 2.0 / z.numel()
    for _ in range(steps):  # batched over the clients: two batched products a step
        r = (wg @ m @ a).sum(0) - z
        m -= step * (wg @ r @ a).sum(0)
    return m


def client_weights(uploads: list[ClientUpload], weighted: bool = True) -> list[float]:
    """The clients' weights w_k: n_k / n (``weighted``, the code) or uniform."""
    n = [float(u.num_samples) for u in uploads]
    return [x / sum(n) for x in n] if weighted else [1.0 / len(n)] * len(n)


def aggregate(uploads: list[ClientUpload], cfg: FedLPAConfig, device: str | torch.device
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict]:
    """The two global state dicts (refined, closed form) and per-layer diagnostics."""
    weights = client_weights(uploads, cfg.weighted)
    states = [u.state_dict for u in uploads]
    avg = average_states(states, weights)
    refined, biased = dict(avg), dict(avg)
    template = validate_upload(uploads[0])
    diag: dict = {}
    dt = torch.float64 if cfg.dtype == "float64" else torch.float32
    for name, mod in factor_layers(template):
        wkey, bkey = f"{name}.weight", f"{name}.bias" if mod.bias is not None else None
        mats = [layer_matrix(s[wkey], s[bkey] if bkey else None).to(device, dt)
                for s in states]
        facs = [tuple(t.to(device, dt) for t in u.curvature[name]) for u in uploads]
        try:
            m_biased, z = closed_form(weights, mats, facs)
        except torch.linalg.LinAlgError:
            raise ValueError(f"FedLPA: layer {name!r}: the clients' averaged K-FAC factor Ā or "
                             "Ḡ is singular, so the closed form has no solution; check the "
                             "uploads' factors (their damping keeps them invertible)") from None
        if not torch.isfinite(m_biased).all():
            raise ValueError(f"FedLPA: layer {name!r}: the closed form gave non-finite weights "
                             "(factors too large or too ill-conditioned for "
                             f"dtype={cfg.dtype!r}); check the uploads' factors or use "
                             "FedLPAConfig(dtype='float64')")
        m_refined = refine(m_biased, z, weights, facs, cfg.newton_steps, cfg.newton_lr)
        if not torch.isfinite(m_refined).all():
            raise ValueError(f"FedLPA: layer {name!r}: the gradient refinement diverged "
                             f"(newton_lr={cfg.newton_lr}, {cfg.newton_steps} steps); lower "
                             "newton_lr, or use solution='biased'")

        diag[name] = {f"residual_{key}": float((fit(weights, facs, m) - z).pow(2).mean())
                      for key, m in (("biased", m_biased), ("newton", m_refined))}
        for target, m in ((biased, m_biased), (refined, m_refined)):
            m = m.float().cpu()
            w_shape = states[0][wkey].shape
            if bkey:
                target[wkey], target[bkey] = m[:, :-1].reshape(w_shape), m[:, -1].clone()
            else:
                target[wkey] = m.reshape(w_shape)
    return refined, biased, diag


def run(uploads: list[ClientUpload], cfg: FedLPAConfig, ctx: ServerContext) -> ServerResult:
    """Validate the uploads and their factors, aggregate, evaluate both solutions."""
    if cfg.solution == "max_on_test" and ctx.evaluate is None:
        raise ValueError("FedLPA: solution='max_on_test' picks a solution on the test set: "
                         "give ServerContext(evaluate=...) or choose 'newton' or 'biased'")
    check_homogeneous(uploads, "FedLPA")
    for u in uploads:
        validate_factors(u.curvature, validate_upload(u), f"client {u.client_id}")
    refined, biased, diag = aggregate(uploads, cfg, ctx.device)
    models = {key: global_model(uploads[0], state, key, ctx.device)
              for key, state in (("newton", refined), ("biased", biased))}
    chosen = cfg.solution
    if ctx.evaluate is None:
        return ServerResult(method=cfg.method_name, preset=cfg.preset, model=models[chosen],
                            extras={"chosen": chosen, "layers": diag})
    accs = {key: ctx.evaluate(model) for key, model in models.items()}
    if chosen == "max_on_test":  # the code's report: the better of the two on the test set
        chosen = "newton" if accs["newton"] >= accs["biased"] else "biased"
    return ServerResult(method=cfg.method_name, preset=cfg.preset, model=models[chosen],
                        last_acc=accs[chosen], best_acc=accs[chosen],
                        extras={"acc_newton": accs["newton"], "acc_biased": accs["biased"],
                                "chosen": chosen, "layers": diag})


def global_model(template: ClientUpload, state: dict[str, torch.Tensor], solution: str,
                 device: str | torch.device) -> torch.nn.Module:
    """The global model of one solution, checked as any model is (finite, within a trained
    model's size); a failure names the solution, not a client."""
    try:
        return build_from_upload(dataclasses.replace(template, state_dict=state, client_id=-1,
                                                     curvature=None), device)
    except UploadError as e:
        raise UploadError(f"FedLPA: the {solution!r} global model is not a usable model "
                          f"({str(e).removeprefix('client -1: ')}): check the uploads' factors"
                          + (" or lower newton_lr" if solution == "newton" else "")) from None


SPEC = MethodSpec(
    "fedlpa", FedLPAConfig, run,
    MethodKind(
        "Liu et al. 2024 (FedLPA)", True, 1,
        "1: per layer, the weights matching the clients' K-FAC posteriors (closed form, then "
        "gradient refinement)",
        "model + per-layer K-FAC factors (A, G) + n_k", SHARED_INIT, "one model",
    ),
    homogeneous=True,
    client_step=attach_factors,
    recorded=("acc_newton", "acc_biased", "chosen"),
)

__all__ = ["SPEC", "FedLPAConfig", "aggregate", "attach_factors", "client_weights", "closed_form",
           "fit", "refine", "run"]
