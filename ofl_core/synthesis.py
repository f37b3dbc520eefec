"""Shared machinery of the generator-based server methods (DENSE, Fed-DAFL, Fed-ADI, FedHydra).

- :class:`TeacherBank`: the frozen client models f_k. ``bank.forward(x)`` returns every
  teacher's logits ``(m, B, C)``, optionally the BN-statistics loss L_BN and the penultimate
  features; ``bank(x)`` is the ensemble D(x) = (1/m) Σ_k f_k(x) (DENSE Eq. 1). Teachers of one
  architecture can run as one batched call (``torch.func.stack_module_state`` +
  ``functional_call`` + ``vmap``); the others run in a loop. Teachers never get weight gradients.
- Losses: cross-entropy on D (DENSE Eq. 2), L_BN (Eq. 3, via :class:`TeacherBank`), the
  boundary-support loss L_div (Eq. 4), the distillation loss L_dis (Eq. 6), the DAFL losses
  (one-hot, activation, information entropy) and the DeepInversion priors (total variation,
  jitter/flip, the adaptive competition term).
- :class:`ImagePool`: the growing in-memory pool of synthetic batches (optionally 8-bit).
- :func:`generator_forward`: an exact, faster evaluation of :class:`~ofl_core.models.Generator`.
- :func:`augment_batch`: batched crop/flip (``ofl_core.augment.random_crop_flip``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .augment import random_crop_flip
from .models.generator import Generator

Switch = bool | Literal["auto"]


# --------------------------------------------------------------------------------------------
# Teachers
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class TeacherOutput:
    """What :meth:`TeacherBank.forward` returns.

    ``logits``: (m, B, C), teacher order as given. ``bn_loss``: scalar L_BN (DENSE Eq. 3, SPEC
    §4: Σ_l ‖μ_l − μ_{k,l}‖₂ + ‖σ²_l − σ²_{k,l}‖₂ per teacher, averaged over all m teachers;
    0 for BN-free teachers), or None when not requested. ``features``: per-teacher penultimate
    activations (B, F_k) (dims may differ between architectures), or None.
    """

    logits: torch.Tensor
    bn_loss: torch.Tensor | None = None
    features: list[torch.Tensor] | None = None

    @property
    def mean_logits(self) -> torch.Tensor:
        """D(x) = (1/m) Σ_k f_k(x) (DENSE Eq. 1)."""
        return self.logits.mean(0)


class _ShiftedMoments(torch.autograd.Function):
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
    (:class:`_ShiftedMoments`).
    """
    m1, var = _ShiftedMoments.apply(x.float(), running_mean.float())
    return torch.linalg.vector_norm(m1) + torch.linalg.vector_norm(var - running_var.float())


class MaxPoolReLU(nn.Module):
    """``relu(maxpool(x))``, which equals ``maxpool(relu(x))`` (ReLU is monotone) in value and
    in gradient, with the ReLU on the pooled, 4× smaller tensor."""

    def __init__(self, pool: nn.MaxPool2d) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.pool(x))


def fuse_relu_maxpool(model: nn.Module) -> Callable[[], None]:
    """Rewrite every ``ReLU, MaxPool2d`` pair of an ``nn.Sequential`` in ``model`` into
    ``Identity, MaxPoolReLU`` in place (same function and gradients, parameters and state_dict
    untouched). Returns a function that undoes the rewrite."""
    undo = []
    for seq in list(model.modules()):
        if not isinstance(seq, nn.Sequential):
            continue
        names = list(seq._modules)
        for a, b in zip(names, names[1:], strict=False):
            relu, pool = seq._modules[a], seq._modules[b]
            if (type(relu) is nn.ReLU and type(pool) is nn.MaxPool2d
                    and not pool.return_indices):
                seq._modules[a] = nn.Identity()
                seq._modules[b] = MaxPoolReLU(pool)
                undo.append((seq, a, relu, b, pool))

    def restore() -> None:
        for seq, a, relu, b, pool in undo:
            seq._modules[a], seq._modules[b] = relu, pool

    return restore


def narrow_input_conv_grad(grad_out: torch.Tensor, weight: torch.Tensor,
                           input_size: Sequence[int], padding: Sequence[int]) -> torch.Tensor:
    """∂L/∂x of a stride-1, zero-padded ``conv2d(x, weight)`` from ∂L/∂y, exactly: one 1×1
    convolution of ``grad_out`` to the C_in·k_h·k_w tap maps, then ``F.fold`` (col2im) adds
    each tap map at its shift. For few input channels this reads the large ``grad_out`` once
    through a dense GEMM, where oneDNN's backward-data kernel for a 1- or 3-channel output is
    slow (``benchmarks/bench_teacher_kernels.py``)."""
    c_out, c_in, kh, kw = weight.shape
    taps_w = weight.reshape(c_out, c_in * kh * kw).t().reshape(c_in * kh * kw, c_out, 1, 1)
    taps = F.conv2d(grad_out, taps_w).contiguous()
    n, k, ho, wo = taps.shape
    return F.fold(taps.view(n, k, ho * wo), tuple(input_size), (kh, kw),
                  padding=tuple(padding))


class _NarrowInputConvFn(torch.autograd.Function):
    """``F.conv2d(x, w, b, padding)`` whose input gradient is :func:`narrow_input_conv_grad`;
    weight and bias gradients (when needed) come from ATen's own backward."""

    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                padding: tuple[int, int]) -> torch.Tensor:
        return F.conv2d(x, weight, bias, padding=padding)

    @staticmethod
    def setup_context(ctx, inputs: tuple, output: torch.Tensor) -> None:
        x, weight, bias, padding = inputs
        ctx.padding, ctx.has_bias = padding, bias is not None
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, weight = ctx.saved_tensors
        dt = grad_out.dtype  # the forward's compute dtype (bfloat16 under autocast)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = narrow_input_conv_grad(grad_out, weight.to(dt), x.shape[-2:],
                                        ctx.padding).to(x.dtype)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            _, gw, gb = torch.ops.aten.convolution_backward(
                grad_out, x.to(dt), weight.to(dt), [weight.shape[0]] if ctx.has_bias else None,
                [1, 1], list(ctx.padding), [1, 1], False, [0, 0], 1,
                [False, ctx.needs_input_grad[1], ctx.needs_input_grad[2]])
            gw = gw.to(weight.dtype) if gw is not None else None
            gb = gb.to(weight.dtype) if gb is not None else None
        return gx, gw, gb, None


class NarrowInputConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` (same parameters, same state_dict) whose input gradient is computed
    by :func:`narrow_input_conv_grad`; made by :func:`narrow_input_convs`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _NarrowInputConvFn.apply(x, self.weight, self.bias, self.padding)


def _narrow_input_pays(conv: nn.Conv2d) -> bool:
    """Where the tap-map input gradient measured faster than oneDNN's on the CPU
    (``benchmarks/bench_teacher_kernels.py``): one input channel, or at least twice as many
    output channels as tap maps (3→64 and 3→128 3×3 yes; 3→32 3×3 and 3→16 5×5 no)."""
    c_out, c_in, kh, kw = conv.weight.shape
    return (type(conv) is nn.Conv2d and conv.stride == (1, 1) and conv.dilation == (1, 1)
            and conv.groups == 1 and conv.padding_mode == "zeros"
            and not isinstance(conv.padding, str)
            and (c_in == 1 or c_out >= 2 * c_in * kh * kw))


def narrow_input_convs(model: nn.Module) -> Callable[[], None]:
    """Give every convolution of ``model`` whose input gradient is faster as tap maps + fold
    (:func:`_narrow_input_pays`; in practice the first convolution of image classifiers) that
    input gradient, in place (exact up to float rounding; parameters shared, state_dict
    unchanged). For the CPU. Returns a function that undoes the rewrite."""
    undo = []
    for parent in list(model.modules()):
        for name, mod in list(parent._modules.items()):
            if isinstance(mod, nn.Conv2d) and _narrow_input_pays(mod):
                new = NarrowInputConv2d.__new__(NarrowInputConv2d)
                new.__dict__ = mod.__dict__.copy()  # the same Parameter objects
                parent._modules[name] = new
                undo.append((parent, name, mod))

    def restore() -> None:
        for parent, name, mod in undo:
            parent._modules[name] = mod

    return restore


def _signature(model: nn.Module) -> tuple:
    """Models with equal signatures compute the same function of (parameters, input)."""
    shapes = tuple((k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items())
    return (type(model), repr(model), shapes)


@dataclass(eq=False)
class _Group:
    indices: list[int]
    models: list[nn.Module]
    batched: bool
    base: nn.Module | None = None
    params: dict | None = None
    buffers: dict | None = None


class TeacherBank:
    """Frozen teachers f_1..f_m (eval mode, ``requires_grad_(False)``) with batched execution.

    Args:
        models: the client models (this bank takes them over: it freezes them and registers
            forward hooks on their BatchNorm2d layers; call :meth:`close` to remove the hooks).
        batched: run each group of ≥ 2 teachers of one architecture as one ``vmap`` call over
            their stacked parameters and buffers. ``"auto"``: on CUDA (one launch instead of m);
            on the CPU the loop is used, because ``vmap``'s grouped convolutions measured slower
            there (``benchmarks/bench_dense.py`` prints both).
        channels_last: store conv weights channels-last and feed channels-last inputs (loop
            path). ``"auto"``: on the CPU, where oneDNN's convolutions and max-pooling are faster
            in that layout.
        fuse: apply :func:`fuse_relu_maxpool` to the teachers (exact; ReLU after pooling) and,
            on the CPU, :func:`narrow_input_convs` (exact up to rounding; faster input
            gradients of the first convolution).
    """

    def __init__(
        self, models: Sequence[nn.Module], batched: Switch = "auto",
        channels_last: Switch = "auto", fuse: bool = True,
    ) -> None:
        if len(models) == 0:
            raise ValueError("TeacherBank needs at least one teacher")
        self.models = list(models)
        self.m = len(self.models)
        dev = next(iter(self.models[0].parameters())).device
        self.device = dev
        if batched == "auto":
            batched = dev.type == "cuda"
        if channels_last == "auto":
            channels_last = dev.type == "cpu"
        self.channels_last = bool(channels_last)
        self._sink: list[torch.Tensor] | None = None
        self._hooks = []
        groups: dict[tuple, _Group] = {}
        for i, mdl in enumerate(self.models):
            mdl.eval().requires_grad_(False)
            sig = _signature(mdl)
            if fuse:
                fuse_relu_maxpool(mdl)
                if dev.type == "cpu" and not batched:  # vmap needs stock modules
                    narrow_input_convs(mdl)
            if sig not in groups:
                groups[sig] = _Group(indices=[], models=[], batched=False)
            groups[sig].indices.append(i)
            groups[sig].models.append(mdl)
        self.groups = list(groups.values())
        for g in self.groups:
            g.batched = bool(batched) and len(g.models) > 1
            if g.batched:
                g.params, g.buffers = torch.func.stack_module_state(g.models)
                g.base = copy.deepcopy(g.models[0]).to("meta")
                self._register_bn_hooks(g.base)
            else:
                for mdl in g.models:
                    if self.channels_last:
                        mdl.to(memory_format=torch.channels_last)
                    self._register_bn_hooks(mdl)
        self.has_bn = any(isinstance(mod, nn.BatchNorm2d)
                          for mdl in self.models for mod in mdl.modules())
        self._identity_order = len(self.groups) == 1

    @property
    def batched(self) -> bool:
        """Whether any group runs as one vmapped call."""
        return any(g.batched for g in self.groups)

    def _register_bn_hooks(self, model: nn.Module) -> None:
        for mod in model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                self._hooks.append(mod.register_forward_hook(self._bn_hook))

    def _bn_hook(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if self._sink is not None:
            self._sink.append(bn_statistics_term(inputs[0], module.running_mean,
                                                 module.running_var))

    def close(self) -> None:
        """Remove the BN hooks from the teachers."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def _call_one(self, model: nn.Module, x: torch.Tensor, bn: bool, features: bool):
        sink: list[torch.Tensor] = []
        self._sink = sink if bn else None
        try:
            out = model(x, return_features=True) if features else model(x)
        finally:
            self._sink = None
        bn_sum = torch.stack(sink).sum() if sink else None
        return out, bn_sum

    def _call_group(self, g: _Group, x: torch.Tensor, bn: bool, features: bool):
        """One vmapped call over the group's stacked parameters and buffers. The BN hooks of
        the (meta) base module run inside the vmapped function, where ``module.running_mean``
        is the swapped-in per-teacher buffer; their terms are returned as a vmap output."""
        kwargs = {"return_features": True} if features else {}

        def fn(params: dict, buffers: dict, xx: torch.Tensor):
            sink: list[torch.Tensor] = []
            self._sink = sink if bn else None
            try:
                out = torch.func.functional_call(g.base, (params, buffers), (xx,), kwargs)
            finally:
                self._sink = None
            bn_sum = torch.stack(sink).sum() if sink else xx.new_zeros((), dtype=torch.float32)
            return out, bn_sum

        return torch.vmap(fn, in_dims=(0, 0, None))(g.params, g.buffers, x)

    def forward(self, x: torch.Tensor, bn: bool = False, features: bool = False) -> TeacherOutput:
        """All teachers on ``x``: logits (m, B, C) [+ L_BN] [+ features].

        Gradients flow to ``x`` (and whatever produced it), never to the teachers' weights.
        Features require classifiers of the zoo (``model(x, return_features=True)``).
        """
        logits: list[torch.Tensor | None] = [None] * self.m
        feats: list[torch.Tensor | None] = [None] * self.m
        bn_terms: list[torch.Tensor] = []
        x_cl = None
        for g in self.groups:
            if g.batched:
                out, bn_sum = self._call_group(g, x, bn, features)
                lg, ft = (out if features else (out, None))
                if self._identity_order and not features:
                    return TeacherOutput(lg, bn_sum.sum() / self.m if bn else None, None)
                for j, idx in enumerate(g.indices):
                    logits[idx] = lg[j]
                    if features:
                        feats[idx] = ft[j]
                if bn:
                    bn_terms.append(bn_sum.sum())
            else:
                if x_cl is None:
                    x_cl = (x.contiguous(memory_format=torch.channels_last)
                            if self.channels_last and x.dim() == 4 else x)
                for idx, mdl in zip(g.indices, g.models, strict=True):
                    out, bn_sum = self._call_one(mdl, x_cl, bn, features)
                    if features:
                        logits[idx], feats[idx] = out
                    else:
                        logits[idx] = out
                    if bn and bn_sum is not None:
                        bn_terms.append(bn_sum)
        bn_loss = None
        if bn:
            bn_loss = (torch.stack(bn_terms).sum() / self.m if bn_terms
                       else x.new_zeros((), dtype=torch.float32))
        return TeacherOutput(torch.stack(logits), bn_loss,  # type: ignore[arg-type]
                             feats if features else None)  # type: ignore[arg-type]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Stacked teacher logits (m, B, C)."""
        return self.forward(x).logits

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """D(x) = (1/m) Σ_k f_k(x), DENSE Eq. 1."""
        return self.forward(x).mean_logits


# --------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------


def kl_per_sample(p_logits: torch.Tensor, q_logits: torch.Tensor, t: float = 1.0) -> torch.Tensor:
    """KL(σ(p/t) ‖ σ(q/t)) for each row (B,), computed in float32."""
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
    """Anisotropic total-variation prior, L1 (DeepInversion, Yin et al. 2020, R_prior): the sum
    of the mean absolute differences along the four pixel-neighbour directions."""
    d1 = x[:, :, :, :-1] - x[:, :, :, 1:]
    d2 = x[:, :, :-1, :] - x[:, :, 1:, :]
    d3 = x[:, :, 1:, :-1] - x[:, :, :-1, 1:]
    d4 = x[:, :, :-1, :-1] - x[:, :, 1:, 1:]
    return d1.abs().mean() + d2.abs().mean() + d3.abs().mean() + d4.abs().mean()


def jitter_flip(x: torch.Tensor, lim: int = 2, flip: bool = True,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """DeepInversion's augmentation: roll the whole batch by a random offset in [−lim, lim]
    along H and W, then flip it horizontally with probability 1/2 (one draw per batch)."""
    if lim > 0:
        dx, dy = torch.randint(-lim, lim + 1, (2,), generator=generator).tolist()
        x = torch.roll(x, shifts=(dx, dy), dims=(2, 3))
    if flip and bool(torch.rand((), generator=generator) < 0.5):
        x = x.flip(3)
    return x


def js_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor,
                  temperature: float = 1.0) -> torch.Tensor:
    """Jensen–Shannon divergence of σ(p/T) and σ(q/T), batch mean (natural log, ≤ log 2)."""
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


# --------------------------------------------------------------------------------------------
# Image pool and augmentation
# --------------------------------------------------------------------------------------------


class ImagePool:
    """Growing in-memory pool of synthetic images in [0, 1] (DENSE's code keeps the best batch of
    every epoch; it writes them as 8-bit PNGs).

    ``uint8=True`` stores round(255·x) (exact to within 0.5/255), 4× less memory than float.
    Storage is one buffer that doubles when full, so :meth:`all` is a view, not a copy.
    """

    def __init__(self, uint8: bool = True, device: str | torch.device | None = None) -> None:
        self.uint8 = uint8
        self.device = torch.device(device) if device is not None else None
        self._buf: torch.Tensor | None = None
        self._n = 0
        self.num_batches = 0

    def __len__(self) -> int:
        return self._n

    def add(self, batch: torch.Tensor) -> None:
        """Append a batch (B, C, H, W) of images in [0, 1] (detached, copied)."""
        b = batch.detach()
        if self.device is not None:
            b = b.to(self.device)
        b = (b.float().clamp(0, 1).mul(255).round().to(torch.uint8) if self.uint8
             else b.float().clone())
        if self._buf is None:
            self._buf = torch.empty((max(len(b), 1) * 4, *b.shape[1:]), dtype=b.dtype,
                                    device=b.device)
        elif tuple(b.shape[1:]) != tuple(self._buf.shape[1:]):
            raise ValueError(f"ImagePool: batch of shape {tuple(b.shape[1:])} does not match the "
                             f"pool's {tuple(self._buf.shape[1:])}")
        need = self._n + len(b)
        if need > len(self._buf):
            cap = max(need, 2 * len(self._buf))
            new = torch.empty((cap, *self._buf.shape[1:]), dtype=self._buf.dtype,
                              device=self._buf.device)
            new[: self._n] = self._buf[: self._n]
            self._buf = new
        self._buf[self._n : need] = b
        self._n = need
        self.num_batches += 1

    def stored(self) -> torch.Tensor:
        """The stored tensor (uint8 or float), a view of the first ``len(self)`` images."""
        if self._buf is None:
            raise ValueError("ImagePool is empty")
        return self._buf[: self._n]

    def _to_float(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().div_(255.0) if self.uint8 else x.float()

    def all(self) -> torch.Tensor:
        """Every image as a float tensor in [0, 1] (N, C, H, W)."""
        return self._to_float(self.stored())

    def batches(self, batch_size: int, generator: torch.Generator | None = None,
                shuffle: bool = True) -> Iterator[torch.Tensor]:
        """One pass over the pool in (shuffled) float batches of ``batch_size``."""
        data = self.stored()
        n = len(data)
        order = (torch.randperm(n, generator=generator) if shuffle else torch.arange(n))
        order = order.to(data.device)
        for i in range(0, n, batch_size):
            yield self._to_float(data[order[i : i + batch_size]])

    def num_steps(self, batch_size: int) -> int:
        return math.ceil(self._n / batch_size)


def augment_batch(x: torch.Tensor, mode: str, generator: torch.Generator | None = None,
                  pad: int = 4) -> torch.Tensor:
    """Batched augmentation: ``"none"``, ``"flip"`` (horizontal flip, p=1/2 per image) or
    ``"crop_flip"`` (random crop with zero padding ``pad`` + flip; DENSE's code)."""
    if mode == "none":
        return x
    if mode not in ("flip", "crop_flip"):
        raise ValueError(f"augmentation must be 'none', 'flip' or 'crop_flip' (got {mode!r})")
    return random_crop_flip(x, pad=pad, crop=mode == "crop_flip", generator=generator)


# --------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------


# 3 taps of a 3×3 kernel -> 4 taps of the stride-2 transposed convolution (one dimension)
_UPSAMPLE_TAPS = ((0.0, 0.0, 1.0), (0.0, 1.0, 1.0), (1.0, 1.0, 0.0), (1.0, 0.0, 0.0))


def upsample_transposed_kernel(w: torch.Tensor) -> torch.Tensor:
    """The 4×4 kernel (C_in, C_out, 4, 4) of ``conv_transpose2d(stride=2, padding=1)`` that
    equals "nearest ×2 upsample, then 3×3 conv (padding 1)" with kernel ``w`` (C_out, C_in, 3, 3).

    Output row 2i+a reads upsampled rows 2i+a−1..2i+a+1, i.e. input rows (i−1, i) with weights
    (w0, w1+w2) for a = 0 and rows (i, i+1) with (w0+w1, w2) for a = 1. The transposed
    convolution gives output row y the input row i through tap t = y − 2i + 1, so its taps are
    (w2, w1+w2, w0+w1, w0); the same for columns."""
    a = w.new_tensor(_UPSAMPLE_TAPS)
    return torch.einsum("tr,oirq,uq->iotu", a, w, a)


def upsample_conv3x3(x: torch.Tensor, weight: torch.Tensor,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """``conv3x3(upsample_nearest_2x(x), padding=1)`` computed exactly on the low-resolution
    input as one stride-2 transposed convolution with a 4×4 kernel
    (:func:`upsample_transposed_kernel`): 16/36 of the multiply-adds, no upsampled copy. The
    result has ``x``'s memory layout. Gradients reach ``x``, ``weight`` and ``bias`` as through
    the original pair (``benchmarks/bench_generator_kernels.py``)."""
    return F.conv_transpose2d(x, upsample_transposed_kernel(weight), bias, stride=2, padding=1)


def conv3x3_narrow(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """``conv3x3(x, padding=1)`` for very few output channels, exactly: one 1×1 convolution
    to 9·C_out tap maps, then the nine maps summed with their shifts. On the CPU, for the
    generator's 64 → 1 last layer at 28 px, forward + backward, it is 1.8× faster than
    ``F.conv2d`` on the same channels-last input (3.7× than on NCHW); for 64 → 3 at 32 px it is
    slower than the channels-last ``F.conv2d``, so :func:`generator_forward` uses it for one
    output channel only (``benchmarks/bench_generator_kernels.py``)."""
    _, c_in, h, w = x.shape
    c_out = weight.shape[0]
    taps = F.conv2d(x, weight.permute(2, 3, 0, 1).reshape(9 * c_out, c_in, 1, 1))
    taps = F.pad(taps, (1, 1, 1, 1))
    out = None
    for i in range(3):
        for j in range(3):
            t = taps[:, (3 * i + j) * c_out : (3 * i + j + 1) * c_out, i : i + h, j : j + w]
            out = t if out is None else out + t
    if bias is not None:
        out = out + bias.view(1, -1, 1, 1)
    return out.contiguous()


def _is_stock_generator(g: nn.Module) -> bool:
    if type(g) is not Generator or len(g.conv_blocks) != 11:
        return False
    kinds = [type(m) for m in g.conv_blocks]
    return kinds == [nn.BatchNorm2d, nn.Upsample, nn.Conv2d, nn.BatchNorm2d, nn.LeakyReLU,
                     nn.Upsample, nn.Conv2d, nn.BatchNorm2d, nn.LeakyReLU, nn.Conv2d,
                     nn.Sigmoid] and all(
        g.conv_blocks[i].scale_factor in (2, 2.0) and g.conv_blocks[i].mode == "nearest"
        for i in (1, 5)) and all(
        g.conv_blocks[i].kernel_size == (3, 3) and g.conv_blocks[i].padding == (1, 1)
        and g.conv_blocks[i].stride == (1, 1) for i in (2, 6))


def generator_forward(g: nn.Module, z: torch.Tensor, fast: bool = True,
                      cpu_kernels: bool = True) -> torch.Tensor:
    """G(z). For the stock :class:`~ofl_core.models.Generator` and ``fast=True`` each
    "upsample ×2 → conv 3×3" pair is computed by :func:`upsample_conv3x3` (same function, same
    parameters, same BN updates; about half the generator's convolution work) and a
    one-channel last conv by :func:`conv3x3_narrow`; on the CPU the activations are kept
    channels-last (faster oneDNN convolutions). The result is a contiguous (N, C, H, W) tensor
    either way. ``cpu_kernels=False`` skips the two CPU-only steps (needed under
    ``torch.vmap``, which cannot change memory formats). Any other module is simply called."""
    if not (fast and _is_stock_generator(g)):
        return g(z)
    cb = g.conv_blocks
    out = g.l1(z).view(z.shape[0], g.ngf * 2, g.init_size, g.init_size)
    cpu = cpu_kernels and out.device.type == "cpu"
    if cpu:
        out = out.contiguous(memory_format=torch.channels_last)
    out = cb[0](out)
    out = upsample_conv3x3(out, cb[2].weight, cb[2].bias)
    out = F.leaky_relu(cb[3](out), cb[4].negative_slope)
    out = upsample_conv3x3(out, cb[6].weight, cb[6].bias)
    out = F.leaky_relu(cb[7](out), cb[8].negative_slope)
    if cpu and cb[9].out_channels == 1:
        return torch.sigmoid(conv3x3_narrow(out, cb[9].weight, cb[9].bias))
    return torch.sigmoid(cb[9](out)).contiguous()  # NCHW also after channels-last activations


def build_generator(nz: int, ngf: int, img_size: int, channels: int,
                    generator: torch.Generator, device: str | torch.device = "cpu") -> Generator:
    """A :class:`Generator` initialised from ``generator`` only (torch's global RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        g = Generator(nz=nz, ngf=ngf, img_size=img_size, channels=channels)
    g.init_weights(generator)
    return g.to(device)


def reinit_generator(g: Generator, generator: torch.Generator) -> None:
    """Re-initialise ``g`` in place from ``generator`` (works for a module on any device; keeps
    the Parameter objects, so optimisers holding them stay valid)."""
    fresh = build_generator(g.nz, g.ngf, g.img_size, g.channels, generator, "cpu")
    with torch.no_grad():
        for (_, p), (_, q) in zip(g.named_parameters(), fresh.named_parameters(), strict=True):
            p.copy_(q)


def autocast_context(device: str | torch.device, enabled: bool) -> torch.autocast:
    """bfloat16 autocast on ``device`` when ``enabled`` (CPU with AMX/AVX512-BF16, or CUDA)."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                          enabled=enabled)


__all__ = [
    "adi_competition_loss", "augment_batch", "autocast_context", "bn_statistics_term",
    "boundary_support_loss", "build_generator", "conv3x3_narrow", "dafl_activation_loss",
    "dafl_information_entropy_loss", "dafl_onehot_loss", "fuse_relu_maxpool", "generator_forward",
    "ImagePool", "jitter_flip", "js_divergence", "kd_loss", "kl_per_sample", "MaxPoolReLU",
    "narrow_input_conv_grad", "narrow_input_convs", "NarrowInputConv2d", "reinit_generator",
    "TeacherBank", "TeacherOutput", "total_variation_l1", "upsample_conv3x3",
]


# --------------------------------------------------------------------------------------------
# Server-side helpers shared by the distillation methods
# --------------------------------------------------------------------------------------------


def server_student(uploads: Sequence, student_arch: str | None, num_classes: int,
                   in_channels: int, image_size: int, seed: int,
                   device: str | torch.device = "cpu", method: str = "DENSE"
                   ) -> tuple[nn.Module, str]:
    """A fresh server model (the student), initialised from ``seed`` only.

    ``student_arch=None`` takes the clients' architecture (and its model options) and needs
    homogeneous clients; for heterogeneous clients it raises a clear error asking for one
    (the papers' server model there is ``"resnet18"``).
    """
    from .clients import init_model

    archs = sorted({u.arch for u in uploads})
    if student_arch is None:
        if len(archs) != 1:
            raise ValueError(
                f"{method}: the clients use different architectures {archs}, so the server "
                "model's architecture must be given: set student_arch (e.g. 'resnet18', the "
                "server model of DENSE Table 2 and FedHydra Table 3)")
        student_arch = archs[0]
    kwargs = dict(uploads[0].model_kwargs) if archs == [student_arch] else {}
    model = init_model(student_arch, num_classes, in_channels, image_size, seed, **kwargs)
    return model.to(device), student_arch


class EvalCurve:
    """Test accuracy of the student after every ``every``-th epoch and after the last one."""

    def __init__(self, evaluate: Callable[[nn.Module], float] | None, epochs: int,
                 every: int = 1) -> None:
        self.evaluate, self.epochs, self.every = evaluate, epochs, max(1, int(every))
        self.curve: list[float] = []
        self.epochs_done: list[int] = []

    def __call__(self, epoch: int, model: nn.Module) -> float | None:
        """Evaluate after 0-based ``epoch`` when due; returns the accuracy or None."""
        if self.evaluate is None:
            return None
        if (epoch + 1) % self.every and epoch + 1 != self.epochs:
            return None
        acc = float(self.evaluate(model))
        self.curve.append(acc)
        self.epochs_done.append(epoch + 1)
        return acc

    @property
    def last(self) -> float | None:
        return self.curve[-1] if self.curve else None

    @property
    def best(self) -> float | None:
        return max(self.curve) if self.curve else None


def image_grid(x: torch.Tensor, labels: torch.Tensor | None, n: int = 64
               ) -> tuple[torch.Tensor, list[int] | None]:
    """Up to ``n`` images (float CPU, [0, 1]) ordered by label, for display."""
    x = x.detach()
    if labels is not None:
        order = torch.argsort(labels.detach().cpu(), stable=True)[:n]
        return x[order.to(x.device)].float().cpu().clamp(0, 1), labels.cpu()[order].tolist()
    return x[:n].float().cpu().clamp(0, 1), None
