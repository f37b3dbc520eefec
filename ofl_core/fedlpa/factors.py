"""FedLPA's client-side curvature: per Linear/Conv2d layer the Kronecker factors A (inputs) and
G (output gradients) of the layer's Fisher, K-FAC style, as FedLPA's public code computes them
(``kfac_utils.ComputeCovA``/``ComputeCovG`` with ``batch_averaged=True``, summed over one pass
of the local data with weights |batch|/n, then damped), and their validation on the server.

For a Linear layer with input a (bias column 1 appended) and gradient g̃ of the per-sample
cross-entropy (true labels: the empirical Fisher) with respect to its output,

    A = 1/n Σ_i a_i a_iᵀ,      G = 1/n Σ_i g̃_i g̃_iᵀ;

for a Conv2d layer the input is the unfolded patches a_ip (C·kh·kw, bias column 1), divided
by the number of output positions HW, and g̃_ip the output gradient at position p:

    A = 1/n Σ_i Σ_p (a_ip/HW)(a_ip/HW)ᵀ,      G = HW/n Σ_i Σ_p g̃_ip g̃_ipᵀ.

Both are independent of how the pass is batched (the code's per-batch averages, weighted by
|batch|/n, sum to exactly these). Damping: A + √(1 − coor)·I and G + √(1 − coor)·I.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..uploads import UploadError

Factors = dict[str, tuple[torch.Tensor, torch.Tensor]]

#: relative tolerance of the server's symmetry and positive-semidefiniteness checks
FACTOR_TOL = 1e-4
#: the largest entry an uploaded factor may have: A holds second moments of a layer's inputs
#: (pixels in [0, 1] or [-1, 1], trained activations far below 10⁴), G of its output
#: gradients; one client's factors of 10³⁰ would swamp the average Ā, Ḡ of every client
MAX_FACTOR = 1e8


def factor_layers(model: nn.Module) -> Iterator[tuple[str, nn.Linear | nn.Conv2d]]:
    """The layers FedLPA aggregates through their factors (the code's ``known_modules``):
    every ``nn.Linear`` and ``nn.Conv2d``, by state_dict prefix, in module order."""
    for name, mod in model.named_modules():
        if type(mod) in (nn.Linear, nn.Conv2d):
            yield name, mod


def layer_matrix(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A layer's parameters as one matrix M (out, in·kh·kw [+ 1]): the weight flattened per
    output, the bias as the last column (the factors' layout)."""
    m = weight.reshape(weight.shape[0], -1)
    return torch.cat([m, bias.reshape(-1, 1)], 1) if bias is not None else m


def _layer_input(mod: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The rows a (one per sample, or per sample and output position) whose outer products
    make A, bias column appended, conv patches divided by the number of positions."""
    # one new tensor, filled and divided in place (the values of transpose + cat + divide)
    if isinstance(mod, nn.Conv2d):
        patches = F.unfold(x, mod.kernel_size, mod.dilation, mod.padding, mod.stride)
        batch, k, positions = patches.shape
        src = patches.transpose(1, 2)  # (B, HW, C·kh·kw)
    else:
        src = x.reshape(x.shape[0], 1, -1)
        batch, positions, k = src.shape[0], 1, src.shape[2]
    a = src.new_empty(batch * positions, k + (mod.bias is not None))
    a[:, :k].view(batch, positions, k).copy_(src)  # (B·HW, C·kh·kw)
    if mod.bias is not None:
        a[:, k] = 1.0
    return a.div_(positions) if positions != 1 else a


def _check_inputs(model: nn.Module, x: torch.Tensor, y: torch.Tensor, coor: float,
                  batch_size: int) -> list[tuple[str, nn.Linear | nn.Conv2d]]:
    """:func:`kfac_factors`' arguments checked; the model's factor layers."""
    if not 0.0 <= coor < 1.0:
        raise ValueError(f"coor must be in [0, 1) (damping √(1 − coor) > 0), got {coor}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"kfac_factors: batch_size must be an int ≥ 1, got {batch_size!r}")
    if x.dtype != torch.uint8:
        raise ValueError(f"kfac_factors: x must hold uint8 images (scaled to [0, 1] here, as in "
                         f"training), got {x.dtype}")
    if len(x) != len(y):
        raise ValueError(f"kfac_factors: {len(x)} images but {len(y)} labels")
    if len(y) == 0:
        raise ValueError("kfac_factors: a client without data has no curvature")
    layers = list(factor_layers(model))
    if not layers:
        raise ValueError(f"kfac_factors: {type(model).__name__} has no nn.Linear or nn.Conv2d "
                         "layer, so FedLPA has no factors to aggregate it by")
    return layers


def kfac_factors(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, coor: float,
                 batch_size: int = 64, device: str | torch.device = "cpu") -> Factors:
    """A and G of every Linear/Conv2d layer of ``model`` on the local data (uint8 images ``x``
    scaled to [0, 1] as in training, labels ``y``), damped by √(1 − ``coor``)·I. The model runs
    in eval mode on ``device`` (where it is moved); its mode and its parameters' gradients are
    left as they were. Returns {layer prefix: (A, G)} on the CPU, float32."""
    layers = _check_inputs(model, x, y, coor, batch_size)
    n = len(y)
    was_training = model.training
    model = model.to(device).eval()
    sums: dict[str, list[torch.Tensor]] = {}
    inputs: dict[str, torch.Tensor] = {}
    outputs: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(mod: nn.Module, args: tuple, out: torch.Tensor) -> None:
            if name in inputs:
                raise ValueError(f"kfac_factors: layer {name!r} runs more than once per forward "
                                 "pass; K-FAC factors here need each Linear/Conv2d applied once")
            inputs[name] = args[0].detach()
            outputs[name] = out
        return hook

    handles = [mod.register_forward_hook(keep(name)) for name, mod in layers]
    try:
        for s in range(0, n, batch_size):
            # gradients flow from the input (the weights may be frozen; theirs are not needed)
            xb = x[s : s + batch_size].to(device).float().div_(255.0).requires_grad_(True)
            yb = y[s : s + batch_size].to(device).long()
            inputs.clear()
            with torch.enable_grad():
                logits = model(xb)
                unused = [name for name, _ in layers if name not in inputs]
                if unused:
                    raise ValueError(f"kfac_factors: layers {unused} do not run in the model's "
                                     "forward pass, so they have no K-FAC factors")
                if int(yb.min()) < 0 or int(yb.max()) >= logits.shape[1]:
                    raise ValueError(f"kfac_factors: labels must be in [0, {logits.shape[1]}) "
                                     f"for this model, got {int(yb.min())}..{int(yb.max())}")
                # per-sample gradients g̃ = B · ∂(mean CE)/∂output (no parameter .grad written)
                loss = F.cross_entropy(logits, yb, reduction="sum")
                grads = torch.autograd.grad(loss, [outputs[name] for name, _ in layers],
                                            allow_unused=True)
            for (name, mod), g in zip(layers, grads, strict=True):
                if g is None:
                    raise ValueError(f"kfac_factors: layer {name!r} does not reach the model's "
                                     "output, so it has no output-gradient factor G")
                a = _layer_input(mod, inputs[name])
                if isinstance(mod, nn.Conv2d):
                    hw = g.shape[2] * g.shape[3]
                    g = g.permute(0, 2, 3, 1).reshape(-1, g.shape[1]) * math.sqrt(hw)
                a_sum, g_sum = a.T @ a, g.T @ g
                if name in sums:
                    sums[name][0] += a_sum
                    sums[name][1] += g_sum
                else:
                    sums[name] = [a_sum, g_sum]
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    damp = math.sqrt(1.0 - coor)
    out: Factors = {}
    for name, (a_sum, g_sum) in sums.items():
        eye_a = torch.eye(a_sum.shape[0], device=a_sum.device)
        eye_g = torch.eye(g_sum.shape[0], device=g_sum.device)
        out[name] = ((a_sum / n + damp * eye_a).cpu(), (g_sum / n + damp * eye_g).cpu())
    return out


def validate_factors(factors: Factors | None, model: nn.Module, who: str) -> None:
    """Check an upload's factors against its (built) model before the server trusts them:
    exactly the model's Linear/Conv2d layers, each A (d × d, d = the layer's inputs per output
    [+ 1 for the bias]) and G (out × out) finite, symmetric and positive semidefinite within
    :data:`FACTOR_TOL` of their scale. Raises :class:`~ofl_core.uploads.UploadError`."""
    if not isinstance(factors, dict):
        raise UploadError(f"{who}: FedLPA needs the clients' curvature factors (upload."
                          f"curvature), got {type(factors).__name__}; the experiment computes "
                          f"them with the method's client step (ofl_core.fedlpa.factors)")
    layers = dict(factor_layers(model))
    if not all(isinstance(k, str) for k in factors):
        raise UploadError(f"{who}: curvature factors must be keyed by layer name (str), got keys "
                          f"{sorted(map(repr, factors))}")
    if set(factors) != set(layers):
        raise UploadError(f"{who}: curvature factors for layers {sorted(factors)}, but the model's "
                          f"Linear/Conv2d layers are {sorted(layers)}")
    for name, mod in layers.items():
        pair = factors[name]
        if not (isinstance(pair, tuple | list) and len(pair) == 2
                and all(isinstance(t, torch.Tensor) for t in pair)):
            raise UploadError(f"{who}: curvature[{name!r}] must be a pair of tensors (A, G)")
        d = layer_matrix(mod.weight, mod.bias).shape[1]
        out_dim = mod.weight.shape[0]
        for label, t, size in (("A", pair[0], d), ("G", pair[1], out_dim)):
            what = f"{who}: curvature[{name!r}] {label}"
            if t.layout != torch.strided or t.is_meta:
                raise UploadError(f"{what} must be a dense tensor holding its values, got "
                                  f"layout {t.layout} on device {t.device}")
            if t.shape != (size, size) or not t.is_floating_point():
                raise UploadError(f"{what} must be a float {size}×{size} matrix, got "
                                  f"{tuple(t.shape)} {t.dtype}")
            t = t.double()
            if not torch.isfinite(t).all():
                raise UploadError(f"{what} has non-finite values")
            if float(t.abs().max()) > MAX_FACTOR:
                raise UploadError(f"{what} has entries up to {float(t.abs().max()):.3g}, beyond "
                                  f"any client's K-FAC factor (limit {MAX_FACTOR:.0e}): a scaled "
                                  "or corrupt upload")
            scale = float(t.abs().max()) or 1.0
            if float((t - t.T).abs().max()) > FACTOR_TOL * scale:
                raise UploadError(f"{what} is not symmetric")
            low = float(torch.linalg.eigvalsh((t + t.T) / 2).min())
            if low < -FACTOR_TOL * scale:
                raise UploadError(f"{what} is not positive semidefinite (eigenvalue {low:.3g})")


__all__ = ["FACTOR_TOL", "MAX_FACTOR", "Factors", "factor_layers", "kfac_factors", "layer_matrix",
           "validate_factors"]
