"""IntactOFL's server (Zeng et al., ACM MM 2024; public code ``zenghui9977/IntactOFL``, commit
e8f86ef, read in docs/decisions/intactofl.md): the m client models stay whole as frozen
experts; a gate w(x) ∈ R^m weights their logits, the mixture

    M(x) = (1/m) Σ_k w_k(x)·f_k(x)        (raw gate outputs, top-k kept, no softmax: the code)

and the server trains only the gate. Each epoch (DENSE's synthesizer with the teacher swapped):

1. a fresh generator G and latents z, Adam on both for T_G steps on
   L_G = L_BN + CE(M(x̂), y) + L_adv, L_adv = −mean_i 1[argmax M ≠ argmax E]·KL(σ(M/3) ‖ σ(E/3))·9
   with E the uniform ensemble (mean logits) — samples where the mixture and the ensemble
   disagree; G's gradient clipped to norm 10; the lowest-loss batch joins the pool (8-bit);
2. one pass of the gate over the pool, each batch moved by Co-Boosting's ODS step (from E):
   L_gate = CE(M(x), y) + α·std(w(x)) + β·KL(σ(E/4) ‖ σ(M/4))·16, SGD with cosine schedule,
   the gate's gradient clipped to norm 10.

The deployed model is the experts plus the gate (:class:`GatedMixture`); the result reports its
parameters and inference FLOPs beside one expert's. No student is distilled.

Presets: ``paper`` = the repository's appendix where it differs from the code (T_G = 20 generator
steps, 40 gate epochs, the ODS step 8/255 as Co-Boosting's code divides it); ⚑
``authors_code`` = the code (30 steps, 200 epochs, ODS step 8 in normalised units). The
appendix's own generator loss (a variance-weighted CE, its Eq. 1) and its gate loss without
the KD term (Eq. 2) are not implemented: both presets use the code's losses (``kd_weight`` = 0
drops the KD term).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..checkpoint import Attrs, server_checkpoint
from ..distill.config import SynthesisConfig, check_distill_config
from ..distill.generator import build_generator, generator_forward, reinit_generator, sample_latents
from ..distill.kernels import autocast_context
from ..distill.loop import DistillRun, EvalCurve
from ..distill.losses import diversify, kd_loss, kl_per_sample
from ..distill.pool import ImagePool, keep_lowest
from ..distill.teachers import TeacherBank
from ..models.base import INPUT_NORMS, check_input_norm, normalize_input
from ..presets import check_preset
from ..seeds import derive_seed
from ..server import GENERATOR_BN, MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload, build_from_upload

#: ``IntactOFLConfig.input_norm``'s value for the code's convention of the context's dataset
BY_DATASET = "by_dataset"

#: The code's input normalisation per dataset (``dataset_helper.NORMALIZE_DICT``) as names of
#: :data:`~ofl_core.models.base.INPUT_NORMS`; CIFAR-100's per-channel statistics are not held.
CODE_INPUT_NORMS: dict[str, str] = {"mnist": "mnist", "fmnist": "fmnist",
                                    "fmnist_embedded": "fmnist", "cifar10": "half",
                                    "svhn": "half", "tinyimagenet": "half"}


def gate_input_norm(cfg_norm: str | None, experts_norm: str, dataset: str) -> str:
    """The normalisation the gate reads in: the config's name, the experts' own (None), or
    the code's for ``dataset`` (``"by_dataset"``; a resized ``"fmnist@32"`` is FMNIST's)."""
    if cfg_norm is None:
        return experts_norm
    if cfg_norm != BY_DATASET:
        return cfg_norm
    base = dataset.split("@")[0]
    if base not in CODE_INPUT_NORMS:
        known = ", ".join(sorted(CODE_INPUT_NORMS))
        raise ValueError(
            f"IntactOFL: input_norm={BY_DATASET!r} takes the code's normalisation of the "
            f"context's dataset, but ServerContext.dataset is {dataset!r} (known: {known}); "
            "set ServerContext(dataset=...) or name the normalisation "
            "(IntactOFLConfig(input_norm='none' | 'half' | 'mnist' | 'fmnist'))")
    return CODE_INPUT_NORMS[base]


@dataclass(frozen=True)
class IntactOFLConfig(SynthesisConfig):
    """IntactOFL's server. Shared fields as every generator method (``epochs`` = the gate's
    epochs, ``steps_per_epoch`` = T_G, ``batch_size`` = the synthetic batch, ``kd_batch_size``
    = the gate's pool batch, ``kd_lr``/``kd_momentum`` = the gate's SGD, ``nz``/``ngf``/
    ``g_lr``/``g_betas``); the loss weights: ``bn_weight`` = ``ce_weight`` = ``adv_weight`` = 1,
    ``adv_temperature`` = 3; the gate: ``std_weight`` α = 0.01, ``kd_weight`` β = 1,
    ``kd_temperature`` = 4, ``kd_weight_decay`` = 1e-4, ``grad_clip`` = 10 (max-norm of the
    generator's and the gate's gradients, None = off: Co-Boosting's field),
    ``topk`` (fraction of experts kept per sample; 1.0 in the code), ``gate_softmax`` (False:
    the code's raw weights; True normalises them, a reading of the paper's figure);
    ``ods_eps`` (in the experts' normalised units, as the code; ×the normalisation's std in
    [0, 1] pixels), ``ods_temperature`` = 4; ``sorted_labels`` (the code sorts y);
    ``pool_rounding`` (how the 8-bit pool stores a pixel, the name and values of DENSE's and
    Co-Boosting's field: ``"round"``, or ⚑ ``"floor"`` as the code's
    ``(x·255).astype('uint8')`` before it writes the pool's PNGs); ``input_norm``, the
    normalisation the gate reads its input in and the unit of ``ods_eps``: None = the
    experts' own (what they were trained on), a name of
    :data:`~ofl_core.models.base.INPUT_NORMS`, or ⚑ ``"by_dataset"``: the code's convention
    for the context's dataset (:data:`CODE_INPUT_NORMS`; FashionMNIST mean 0.2860, std 0.3530)."""

    epochs: int = 40
    steps_per_epoch: int = 20
    bn_weight: float = 1.0
    ce_weight: float = 1.0
    adv_weight: float = 1.0
    adv_temperature: float = 3.0
    std_weight: float = 0.01
    kd_weight: float = 1.0
    kd_temperature: float = 4.0
    kd_weight_decay: float = 1e-4
    grad_clip: float | None = 10.0
    topk: float = 1.0
    gate_softmax: bool = False
    ods_eps: float = 8.0 / 255.0
    ods_temperature: float = 4.0
    sorted_labels: bool = True
    pool_uint8: bool = True
    pool_rounding: Literal["round", "floor"] = "round"
    input_norm: str | None = None

    def __post_init__(self) -> None:
        check_distill_config(
            self, counts=("kd_batch_size", "nz", "ngf"), positive=("g_lr", "kd_temperature",
                                                                  "adv_temperature",
                                                                  "ods_temperature",
                                                                  "grad_clip"),
            nonnegative=("ce_weight", "bn_weight", "adv_weight", "std_weight", "kd_weight",
                         "kd_weight_decay", "ods_eps"))
        if not 0.0 < self.topk <= 1.0:
            raise ValueError(f"IntactOFLConfig.topk must be in (0, 1], got {self.topk}")
        if self.pool_rounding not in ("round", "floor"):
            raise ValueError("IntactOFLConfig.pool_rounding must be 'round' or 'floor' "
                             f"(got {self.pool_rounding!r})")
        if self.input_norm is not None and self.input_norm != BY_DATASET:
            check_input_norm(self.input_norm,
                             f"IntactOFLConfig.input_norm (or None, or {BY_DATASET!r})")
        if self.student_arch is not None:
            raise ValueError("IntactOFLConfig.student_arch must stay None: IntactOFL distils no "
                             "student (the deployed model is the client models plus the gate)")
        if self.channels_last is True:
            raise ValueError("IntactOFLConfig.channels_last must be False or 'auto' (the same "
                             "here): the experts run in the default memory format")

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: Any) -> IntactOFLConfig:
        """``paper``: the appendix's T_G = 20, 40 epochs, ODS 8/255; ⚑ ``authors_code``: the
        code's 30 steps, 200 epochs, ODS 8, the pool floored to 8 bits, the gate and the ODS
        step in the code's normalisation of the dataset."""
        check_preset(preset)
        code = (dict(epochs=200, steps_per_epoch=30, ods_eps=8.0, pool_rounding="floor",
                     input_norm=BY_DATASET) if preset == "authors_code" else {})
        return cls(preset=preset, **{**code, **overrides})


class LinearGate(nn.Module):
    """w(x) = Linear(C·H·W → m) on the experts' normalised input; the ``k`` largest kept per
    sample and the rest set to 0 (the code's top-k, zeros rather than −inf), no softmax unless
    ``softmax`` (then over the kept ones)."""

    def __init__(self, in_features: int, m: int, k: int, softmax: bool, input_norm: str) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, m)
        self.k, self.softmax, self.input_norm = k, softmax, input_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear(normalize_input(x, self.input_norm).flatten(1))
        if self.k < w.shape[1] or self.softmax:
            vals, idx = w.topk(self.k, dim=1)
            if self.softmax:
                return torch.zeros_like(w).scatter(1, idx, F.softmax(vals, dim=1))
            w = torch.zeros_like(w).scatter(1, idx, vals)
        return w


#: batches of expert logits :class:`GatedMixture` keeps for evaluation (the test set's)
EXPERT_CACHE_BATCHES = 1024


class GatedMixture(nn.Module):
    """The deployed model: frozen experts (a :class:`TeacherBank`, not sub-modules: the state
    dict is the gate's) and the gate; ``forward`` gives the mixture's logits.

    In eval mode without gradients on the CPU, ``forward`` keeps the experts' logits of each
    input batch it has seen (keyed on the batch's bytes): the experts are frozen, so evaluating
    the mixture after every epoch on one test set runs them once, and each later evaluation
    only the gate. The logits are the same tensors a fresh call computes, so the outputs are
    bit-identical."""

    def __init__(self, bank: TeacherBank, gate: LinearGate) -> None:
        super().__init__()
        self.gate = gate
        self._experts = [bank]  # a list: the experts stay out of state_dict() and .train()
        self._expert_logits: dict[tuple, torch.Tensor] = {}

    @property
    def bank(self) -> TeacherBank:
        return self._experts[0]

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
               ) -> GatedMixture:
        """``.to()``, ``.double()``, ``.cuda()``…: allowed only where they change nothing, as
        the frozen experts (outside the module tree) would not follow the gate."""
        p = next(self.gate.parameters())
        probe = fn(torch.empty(0, dtype=p.dtype, device=p.device))
        if probe.device != p.device or probe.dtype != p.dtype:
            raise ValueError(f"GatedMixture: the experts live on {p.device} in {p.dtype} and "
                             f"cannot be moved to {probe.device} / {probe.dtype}; run IntactOFL "
                             "on the device you need (ServerContext.device)")
        return super()._apply(fn, recurse)

    def mixture(self, x: torch.Tensor, bn: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(M(x), w(x), the uniform ensemble E(x), L_BN or None)."""
        out = self.bank.forward(x, bn=bn)
        logits = out.logits.float()  # (m, B, C)
        w = self.gate(x).float()  # (B, m)
        return self._mix(logits, w), w, logits.mean(0), out.bn_loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training or torch.is_grad_enabled() or x.device.type != "cpu":
            return self.mixture(x)[0]
        return self._mix(self._cached_logits(x), self.gate(x).float())

    @staticmethod
    def _mix(logits: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """M(x) from the experts' logits (m, B, C) and the gate's weights (B, m)."""
        return (logits * w.T.unsqueeze(-1)).mean(0)

    def _cached_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The experts' float logits on ``x``, computed once per distinct batch."""
        xc = x.detach().contiguous()
        key = (tuple(xc.shape), str(xc.dtype),
               hashlib.blake2b(xc.numpy().tobytes(), digest_size=16).hexdigest())
        logits = self._expert_logits.get(key)
        if logits is None:
            if len(self._expert_logits) >= EXPERT_CACHE_BATCHES:
                self._expert_logits.clear()
            logits = self._expert_logits[key] = self.bank.forward(x).logits.float()
        return logits


def generator_loss(mix: torch.Tensor, ens: torch.Tensor, y: torch.Tensor,
                   bn_loss: torch.Tensor | None, cfg: IntactOFLConfig) -> torch.Tensor:
    """L_G = w_bn·L_BN + w_ce·CE(M, y) + w_adv·L_adv (module docstring; the code's
    ``IntactOFLSynthesizer.synthesize``)."""
    t = cfg.adv_temperature
    mask = (mix.argmax(1) != ens.argmax(1)).float()
    adv = -(kl_per_sample(mix, ens, t) * (t * t) * mask).mean()
    loss = cfg.ce_weight * F.cross_entropy(mix, y) + cfg.adv_weight * adv
    return loss + cfg.bn_weight * bn_loss if bn_loss is not None else loss


def gate_loss(mix: torch.Tensor, w: torch.Tensor, ens: torch.Tensor, y: torch.Tensor,
              cfg: IntactOFLConfig) -> torch.Tensor:
    """L_gate = CE(M, y) + α·std(w) (over all B·m entries) + β·KL(σ(E/T) ‖ σ(M/T))·T²."""
    return (F.cross_entropy(mix, y) + cfg.std_weight * w.std()
            + cfg.kd_weight * kd_loss(mix, ens.detach(), cfg.kd_temperature))


def deployed_cost(moe: GatedMixture, x: torch.Tensor) -> dict:
    """Parameters and inference FLOPs per image of the mixture (experts + gate) beside the
    largest single expert's: what deploying IntactOFL costs against a one-model method."""
    experts = moe.bank.models
    with torch.no_grad():
        def flops(fn) -> int:
            with FlopCounterMode(display=False) as fc:
                fn(x[:1])
            return int(fc.get_total_flops())

        one = max(experts, key=lambda m: sum(p.numel() for p in m.parameters()))
        return {"params": sum(p.numel() for m in experts for p in m.parameters())
                + sum(p.numel() for p in moe.gate.parameters()),
                "params_one_expert": sum(p.numel() for p in one.parameters()),
                "flops_per_image": flops(lambda v: moe.mixture(v)[0]),  # never the cache
                "flops_one_expert": flops(one)}


def run(uploads: list[ClientUpload], cfg: IntactOFLConfig, ctx: ServerContext) -> ServerResult:
    """Synthesize against the gated mixture and train the gate, ``epochs`` times."""
    if len(uploads) < 2:
        raise ValueError(f"IntactOFL: a gate over the clients' models needs at least two "
                         f"uploads, got {len(uploads)}")
    dev = torch.device(ctx.device)
    bank = TeacherBank([build_from_upload(u, dev) for u in uploads],
                       batched=cfg.batched_teachers, channels_last=False)
    norms = {getattr(m, "input_norm", "none") for m in bank.models}
    if len(norms) > 1:
        raise ValueError(f"IntactOFL: the gate reads the experts' normalised input, but the "
                         f"uploads name different input normalisations {sorted(norms)}")
    experts_norm = norms.pop()
    norm = gate_input_norm(cfg.input_norm, experts_norm, ctx.dataset)
    m = len(uploads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(ctx.seed, "intactofl-gate"))
        gate = LinearGate(ctx.in_channels * ctx.image_size ** 2, m,
                          max(1, int(cfg.topk * m)), cfg.gate_softmax, norm).to(dev)
    moe = GatedMixture(bank, gate)
    rng = torch.Generator().manual_seed(derive_seed(ctx.seed, "intactofl"))
    run_ = DistillRun(name="IntactOFL", bank=bank, student=moe, student_arch="gated mixture",
                      rng=rng, device=dev, amp=autocast_context(dev, cfg.amp),
                      tracker=EvalCurve(ctx.evaluate, cfg.epochs, cfg.eval_every),
                      epochs_total=cfg.epochs, progress=ctx.progress, unfuse=lambda: None,
                      checkpoint=server_checkpoint(ctx, "intactofl", uploads, cfg, cfg.epochs,
                                                  gate_norm=norm))
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, rng, dev).train()
    opt_gate = torch.optim.SGD(gate.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum,
                               weight_decay=cfg.kd_weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt_gate, T_max=max(cfg.epochs, 1))
    pool = ImagePool(uint8=cfg.pool_uint8, device=dev, rounding=cfg.pool_rounding)
    std = (INPUT_NORMS[norm] or (0.0, 1.0))[1]
    log = _Log()
    state = {"generator": gen, "opt_gate": opt_gate, "sched": sched, "pool": pool,
             "log": Attrs(log, ("g_losses", "gate_losses", "last_x", "last_y"), dev)}
    for _epoch in run_.epochs(state):
        x, y = synthesis_stage(moe, gen, cfg, ctx.num_classes, rng, dev, log, run_.amp)
        pool.add(x, y)
        log.last_x, log.last_y = x, y
        gate_stage(moe, pool, opt_gate, cfg, cfg.ods_eps * std, rng, log, run_.amp)
        sched.step()
    extras = {"pool_size": len(pool), "input_norm": {"experts": experts_norm, "gate": norm},
              "generator_loss": torch.stack(log.g_losses).tolist() if log.g_losses else [],
              "gate_loss": torch.stack(log.gate_losses).tolist() if log.gate_losses else [],
              **deployed_cost(moe, torch.zeros(1, ctx.in_channels, ctx.image_size,
                                               ctx.image_size, device=dev))}
    return run_.result("intactofl", cfg.preset, extras, samples=(log.last_x, log.last_y))


@dataclass
class _Log:
    """Per-epoch losses (kept on the device) and the last synthetic batch."""

    g_losses: list = field(default_factory=list)
    gate_losses: list = field(default_factory=list)
    last_x: torch.Tensor | None = None
    last_y: torch.Tensor | None = None


def synthesis_stage(moe: GatedMixture, gen: nn.Module, cfg: IntactOFLConfig, num_classes: int,
                    rng: torch.Generator, dev: torch.device, log: _Log,
                    amp: torch.autocast | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A fresh G and z, T_G Adam steps on L_G; the lowest-loss batch (before its step).
    ``amp``: the autocast the forward passes run under (``IntactOFLConfig.amp``)."""
    amp = amp or autocast_context(dev, False)
    reinit_generator(gen, rng)
    z, y = sample_latents(cfg, num_classes, rng, dev)
    z.requires_grad_(True)
    opt = torch.optim.Adam([*gen.parameters(), z], lr=cfg.g_lr, betas=cfg.g_betas)
    moe.gate.requires_grad_(False)
    best_x, best_loss = None, torch.full((), float("inf"), device=dev)
    for _ in range(cfg.steps_per_epoch):
        x = generator_forward(gen, z, cfg.fast_generator)
        with amp:
            mix, _w, ens, bn = moe.mixture(x, bn=cfg.bn_weight > 0)
            loss = generator_loss(mix, ens, y, bn, cfg)
        best_x, best_loss = keep_lowest(best_x, best_loss, x, loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(gen.parameters(), cfg.grad_clip)
        opt.step()
    log.g_losses.append(best_loss)
    moe.gate.requires_grad_(True)
    assert best_x is not None
    return best_x.clamp(0.0, 1.0), y


def gate_stage(moe: GatedMixture, pool: ImagePool, opt: torch.optim.Optimizer,
               cfg: IntactOFLConfig, eps: float, rng: torch.Generator, log: _Log,
               amp: torch.autocast | None = None) -> None:
    """One shuffled pass over the pool: ODS from the uniform ensemble, then a gate step
    (its forward pass under ``amp``)."""
    amp = amp or autocast_context(next(moe.gate.parameters()).device, False)
    total = []
    for xb, yb in pool.labelled_batches(cfg.kd_batch_size, rng):
        xb = diversify(xb, moe.bank, eps, cfg.ods_temperature, rng)
        with amp:
            mix, w, ens, _ = moe.mixture(xb)
            loss = gate_loss(mix, w, ens, yb, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(moe.gate.parameters(), cfg.grad_clip)
        opt.step()
        total.append(loss.detach())
    if total:
        log.gate_losses.append(torch.stack(total).mean())


SPEC = MethodSpec(
    "intactofl", IntactOFLConfig, run,
    MethodKind(
        "Zeng et al. 2024 (IntactOFL)", True, 1,
        "per epoch: generator synthesis against the gated mixture → a gate pass over the pool",
        MODEL, GENERATOR_BN, "m client models + a gate (mixture of experts)",
    ),
    recorded=("params", "params_one_expert", "flops_per_image", "flops_one_expert"),
)

__all__ = ["BY_DATASET", "CODE_INPUT_NORMS", "SPEC", "GatedMixture", "IntactOFLConfig",
           "LinearGate", "deployed_cost", "gate_input_norm", "gate_loss", "generator_loss", "run"]
