"""OT fusion (Singh & Jaggi, "Model Fusion via Optimal Transport", NeurIPS 2020): the neuron-
matching baseline of FedHydra Table 12 (appendix E; SPEC §4 "OT fusion").

Every client model is aligned to one anchor model layer by layer, then the aligned models are
averaged. For layer l, client B's incoming weights are first permuted along their input
dimension by the alignment of layer l−1 (the "propagated" transport), then each of B's neurons
(a conv output channel or a linear unit: its flattened incoming weights and bias) is matched to
one of the anchor's neurons by optimal transport between the two neuron sets with uniform
weights and a squared-Euclidean ground cost (OTFusion's default). With equally many neurons on
both sides and uniform weights, an optimal transport plan is a permutation (Birkhoff), so the
exact OT is the assignment problem solved by ``scipy.optimize.linear_sum_assignment``.
BatchNorm parameters and running statistics are permuted with their convolution; the output
layer is not permuted (its units are the classes). Homogeneous clients only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import nn

from ..presets import check_preset
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult, check_homogeneous
from ..server.averaging import average_states
from ..uploads import ClientUpload, build_from_upload, validate_upload
from ..validation import NONNEG, check_config

#: plain sequential conv/linear networks whose neurons OT fusion can align
SUPPORTED_ARCHS: tuple[str, ...] = ("cnn_mnist", "cnn_cifar", "cnn_cifar100", "cnn1", "lenet",
                                    "mcmahan_cnn", "simplecnn_mnist")


@dataclass(frozen=True)
class OTFusionConfig:
    """OT fusion. ``anchor``: the model every client is aligned to — ``"largest"`` (default, the
    client with the most samples; ties → lowest id) or a client index. ``weighted``: average
    the aligned models with weights n_k/n (FedAvg's weighting; OTFusion fuses two models with
    equal weights) — False gives the plain mean. ``ground_metric``: ``"sqeuclidean"``
    (OTFusion's default, squared distances) or ``"euclidean"``. No authors' code exists for
    FedHydra's OT baseline, so ``preset="authors_code"`` equals the paper preset."""

    anchor: int | Literal["largest"] = "largest"
    weighted: bool = True
    ground_metric: Literal["sqeuclidean", "euclidean"] = "sqeuclidean"
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_config(self, {"anchor": NONNEG})

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> OTFusionConfig:
        check_preset(preset)
        base = cls(preset=preset)
        return replace(base, **overrides) if overrides else base


@dataclass(frozen=True)
class Layer:
    """One alignable layer: its parameter prefix, kind and the BatchNorm2d that follows it."""

    name: str
    kind: Literal["conv", "linear"]
    out_features: int
    in_features: int
    bn: str | None = None


def layer_sequence(model: nn.Module, arch: str) -> list[Layer]:
    """The conv/linear layers of a supported sequential network in forward order, each with the
    BatchNorm2d that normalises its output."""
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(
            f"OT fusion aligns plain sequential conv/linear networks and supports "
            f"{', '.join(SUPPORTED_ARCHS)}; {arch!r} is not one of them (residual and "
            "multi-branch networks need their skip connections aligned jointly, which is not "
            "implemented)")
    layers: list[Layer] = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Conv2d):
            layers.append(Layer(name, "conv", mod.out_channels, mod.in_channels))
        elif isinstance(mod, nn.Linear):
            layers.append(Layer(name, "linear", mod.out_features, mod.in_features))
        elif isinstance(mod, nn.BatchNorm2d):
            if not layers or layers[-1].kind != "conv" or layers[-1].bn is not None \
                    or layers[-1].out_features != mod.num_features:
                raise ValueError(f"OT fusion: BatchNorm {name!r} does not follow a matching "
                                 "convolution")
            layers[-1] = replace(layers[-1], bn=name)
    if not layers or layers[-1].kind != "linear":
        raise ValueError(f"OT fusion: {arch!r} does not end in a linear layer")
    return layers


def _key(prefix: str, leaf: str) -> str:
    return f"{prefix}.{leaf}" if prefix else leaf


def _permute_inputs(w: torch.Tensor, layer: Layer, prev: Layer, perm: torch.Tensor
                    ) -> torch.Tensor:
    """Permute the input dimension of ``w`` by the previous layer's output permutation."""
    if layer.kind == "conv" or prev.kind == "linear":
        return w[:, perm]
    # linear after conv: inputs are the flattened (channels, H, W) maps, channel-major
    spatial = layer.in_features // prev.out_features
    if spatial * prev.out_features != layer.in_features:
        raise ValueError(f"OT fusion: {layer.name!r} has {layer.in_features} inputs, not a "
                         f"multiple of the {prev.out_features} channels of {prev.name!r}")
    return w.view(w.shape[0], prev.out_features, spatial)[:, perm].reshape(w.shape[0], -1)


def ground_cost(a: torch.Tensor, b: torch.Tensor, metric: str = "sqeuclidean") -> torch.Tensor:
    """Cost matrix between the anchor's neurons ``a`` (n, d) and the client's ``b`` (n, d)."""
    d2 = torch.cdist(a, b).square()
    return d2 if metric == "sqeuclidean" else d2.sqrt()


def align_state(
    anchor: dict[str, torch.Tensor], state: dict[str, torch.Tensor], layers: list[Layer],
    metric: str = "sqeuclidean",
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor], float]:
    """Align ``state`` to ``anchor`` (Singh & Jaggi 2020, Alg. 1 with exact OT, uniform
    weights). Returns the permuted state (float tensors in their original dtype), the output
    permutation of each hidden layer (``aligned[i] = original[perm[i]]``) and the total
    matching cost."""
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError as e:  # pragma: no cover - scipy is a declared dependency
        raise ImportError("OT fusion needs scipy (pip install 'scipy>=1.10')") from e
    out = {k: v.clone() for k, v in state.items()}
    perms: list[torch.Tensor] = []
    prev_perm: torch.Tensor | None = None
    total = 0.0
    for i, layer in enumerate(layers):
        wk, bk = _key(layer.name, "weight"), _key(layer.name, "bias")
        w = out[wk].double()
        if prev_perm is not None:
            w = _permute_inputs(w, layer, layers[i - 1], prev_perm)
        if i == len(layers) - 1:  # output layer: the classes stay in place
            out[wk] = w.to(state[wk].dtype)
            break
        a = anchor[wk].double().flatten(1)
        b = w.flatten(1)
        if bk in out:
            a = torch.cat([a, anchor[bk].double()[:, None]], 1)
            b = torch.cat([b, out[bk].double()[:, None]], 1)
        cost = ground_cost(a, b, metric)
        rows, cols = linear_sum_assignment(cost.numpy())
        perm = torch.as_tensor(cols[rows.argsort()], dtype=torch.long)
        total += float(cost[torch.arange(len(perm)), perm].sum())
        out[wk] = w[perm].to(state[wk].dtype)
        if bk in out:
            out[bk] = out[bk][perm]
        if layer.bn is not None:
            for leaf in ("weight", "bias", "running_mean", "running_var"):
                k = _key(layer.bn, leaf)
                if k in out:
                    out[k] = out[k][perm]
        perms.append(perm)
        prev_perm = perm
    return out, perms, total


def resolve_anchor(uploads: list[ClientUpload], anchor: int | str) -> int:
    if anchor == "largest":
        sizes = [u.num_samples for u in uploads]
        return sizes.index(max(sizes))
    if not 0 <= int(anchor) < len(uploads):
        raise ValueError(f"OT fusion: anchor {anchor} is not a client index "
                         f"(0..{len(uploads) - 1})")
    return int(anchor)


def run(uploads: list[ClientUpload], cfg: OTFusionConfig, ctx: ServerContext) -> ServerResult:
    """Align every client to the anchor by OT, then average (homogeneous clients only)."""
    arch = check_homogeneous(uploads, "OT fusion")
    template = validate_upload(uploads[0])
    layers = layer_sequence(template, arch)
    for u in uploads[1:]:
        validate_upload(u)
    a = resolve_anchor(uploads, cfg.anchor)
    anchor_sd = {k: v.detach().cpu() for k, v in uploads[a].state_dict.items()}
    states, costs, moved = [], [], []
    for k, u in enumerate(uploads):
        sd = {key: v.detach().cpu() for key, v in u.state_dict.items()}
        if k == a:
            states.append(sd)
            costs.append(0.0)
            moved.append(0.0)
            continue
        aligned, perms, cost = align_state(anchor_sd, sd, layers, cfg.ground_metric)
        states.append(aligned)
        costs.append(cost)
        moved.append(float(torch.cat([(p != torch.arange(len(p))).float() for p in perms])
                           .mean()) if perms else 0.0)
    weights = [u.num_samples if cfg.weighted else 1.0 for u in uploads]
    state = average_states(states, weights)
    model = build_from_upload(
        ClientUpload(**{**uploads[0].__dict__, "state_dict": state, "client_id": -1}), ctx.device)
    extras = {"anchor": a, "weights": weights, "alignment_cost": costs,
              "fraction_neurons_moved": moved, "layers": [ly.name for ly in layers]}
    return ServerResult(method="ot", preset=cfg.preset, model=model, extras=extras)


SPEC = MethodSpec(
    "ot", OTFusionConfig, run,
    MethodKind(
        "Singh & Jaggi 2020 (FedHydra T12)", True, 1,
        "1: align neurons to an anchor client by optimal transport, then average",
        MODEL + " + sample count", "plain sequential networks", "one model"
    ),
    homogeneous=True,
)


__all__ = ["SPEC", "SUPPORTED_ARCHS", "OTFusionConfig", "align_state", "layer_sequence", "run"]
