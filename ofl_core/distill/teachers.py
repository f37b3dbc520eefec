"""The frozen client models f_1..f_m as one teacher bank.

:class:`TeacherBank`: ``bank.forward(x)`` returns every teacher's logits ``(m, B, C)``,
optionally the BN-statistics loss L_BN (DENSE Eq. 3) and the penultimate features; ``bank(x)``
is the ensemble D(x) = (1/m) Σ_k f_k(x) (DENSE Eq. 1). Teachers of one architecture can run as
one batched call (``torch.func.stack_module_state`` + ``functional_call`` + ``vmap``); the
others run in a loop. Teachers never get weight gradients.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from .kernels import fuse_relu_maxpool, narrow_input_convs
from .losses import bn_statistics_term

Switch = bool | Literal["auto"]


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
        is the swapped-in per-teacher buffer; their terms are returned as a vmap output.
        A lower-precision input is cast to the parameters' dtype first (see below)."""
        kwargs = {"return_features": True} if features else {}
        # vmap's convolution rule runs below autocast, so inside the vmapped call a bfloat16
        # input (a generator's output under autocast) would meet float32 weights; the
        # teachers' convolutions there compute in float32 (their linear layers still autocast)
        dtype = next(iter(g.params.values())).dtype
        if x.is_floating_point() and x.dtype != dtype:
            x = x.to(dtype)

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

    def to_input(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` in the teachers' memory format (channels-last when the bank is)."""
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Stacked teacher logits (m, B, C)."""
        return self.forward(x).logits

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """D(x) = (1/m) Σ_k f_k(x), DENSE Eq. 1."""
        return self.forward(x).mean_logits


__all__ = ["Switch", "TeacherBank", "TeacherOutput"]
