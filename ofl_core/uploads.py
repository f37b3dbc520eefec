"""What a client sends and how the server checks it before trusting it: :class:`ClientUpload`
(a model's architecture, state_dict and sample count, or a FedCVAE decoder with its label
counts), the header and size checks that run before anything is built, and the one validator
(:func:`validate_upload`, :func:`build_from_upload`). Uploads are untrusted input (SPEC §3)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .models import INPUT_NORMS, MODEL_NAMES, build_model
from .models.base import VALID_IMAGE_SIZES, VALID_IN_CHANNELS
from .models.cvae import (
    CVAE_VARIANTS,
    MAX_CLASSES,
    MAX_IMAGE_SIZE,
    MAX_LATENT_DIM,
    build_decoder,
)


@dataclass(frozen=True, eq=False)
class ClientUpload:
    """What a client sends to the server: its model (architecture + state_dict) and n_k.

    ``label_counts`` is only filled for methods whose upload includes them (FedCVAE); classifier
    methods send ``None``. ``kind`` is ``"classifier"`` or ``"decoder"``. ``curvature``: per
    Linear/Conv2d layer (its state_dict prefix) the two Kronecker factors (A, G) of the layer's
    Fisher that FedLPA's clients send beside their weights (``ofl_core.fedlpa.factors``, which
    also validates them); None for every other method.
    """

    client_id: int
    arch: str
    state_dict: dict[str, torch.Tensor]
    num_classes: int
    in_channels: int
    image_size: int
    num_samples: int
    model_kwargs: dict = field(default_factory=dict)
    label_counts: tuple[int, ...] | None = None
    kind: str = "classifier"
    curvature: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def __post_init__(self) -> None:
        # counts given as a numpy array or a list are kept as a tuple (a server tests
        # ``label_counts or ()``, which an array cannot answer); validation checks the values
        lc = self.label_counts
        if isinstance(lc, np.ndarray) and lc.ndim == 1:
            object.__setattr__(self, "label_counts", tuple(lc.tolist()))
        elif isinstance(lc, list):
            object.__setattr__(self, "label_counts", tuple(lc))


class UploadError(ValueError):
    """A client upload the server cannot accept (unknown architecture, bad shapes, NaN/inf)."""


#: the largest |value| a trained model's float tensor may hold (trained weights and BN
#: statistics on [0, 1] images stay far below; a scaled or poisoned upload does not)
MAX_ABS_WEIGHT = 1e6
#: the largest per-class sample count a decoder upload may claim (far above any dataset; a
#: count of 1e308 made the label distribution's sum overflow)
MAX_LABEL_COUNT = 10**12


def check_upload_header(upload: ClientUpload, num_classes: int, in_channels: int,
                        image_size: int) -> None:
    """Check what an upload claims against the server's task before any model is built: the
    class count, image shape, then every size field of its kind (:func:`check_upload_sizes`)."""
    who = f"client {upload.client_id}"
    claimed = (upload.num_classes, upload.in_channels, upload.image_size)
    if claimed != (num_classes, in_channels, image_size):
        raise UploadError(
            f"{who}: upload is for {upload.num_classes} classes, {upload.in_channels}×"
            f"{upload.image_size}² images, but the task has {num_classes} classes, "
            f"{in_channels}×{image_size}² images")
    check_upload_sizes(upload)


def _bounded_int(v: object, lo: int, hi: int) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) \
        and lo <= v <= hi


def check_upload_sizes(upload: ClientUpload) -> None:
    """Every size field an upload declares, bounded before anything is built from it: the
    class count (≤ ``MAX_CLASSES``), image channels and side (what the zoo builds), the sample
    count (1 … :data:`MAX_LABEL_COUNT`; FedAvg weights by it), a classifier's options (only
    those its architecture takes), a decoder's ``latent_dim`` (1 … ``MAX_LATENT_DIM``, and the
    width its uploaded ``fc.weight`` has) and label counts."""
    who = f"client {upload.client_id}"
    if not _bounded_int(upload.num_classes, 1, MAX_CLASSES):
        raise UploadError(f"{who}: num_classes must be an integer in 1 … {MAX_CLASSES} (got "
                          f"{upload.num_classes!r})")
    if upload.in_channels not in VALID_IN_CHANNELS or isinstance(upload.in_channels, bool):
        raise UploadError(f"{who}: in_channels must be one of {VALID_IN_CHANNELS} (got "
                          f"{upload.in_channels!r})")
    sizes = VALID_IMAGE_SIZES if upload.kind == "classifier" else range(1, MAX_IMAGE_SIZE + 1)
    if not _bounded_int(upload.image_size, 1, MAX_IMAGE_SIZE) or upload.image_size not in sizes:
        raise UploadError(f"{who}: image_size must be one of {VALID_IMAGE_SIZES} (a "
                          f"classifier) or ≤ {MAX_IMAGE_SIZE} (a decoder), got "
                          f"{upload.image_size!r}")
    n = upload.num_samples
    if not _bounded_int(n, 1, MAX_LABEL_COUNT):
        raise UploadError(f"{who}: num_samples must be a positive integer ≤ "
                          f"{MAX_LABEL_COUNT:.0e} (got {n!r})")
    if not isinstance(upload.model_kwargs, dict):
        raise UploadError(f"{who}: model_kwargs must be a mapping (got "
                          f"{type(upload.model_kwargs).__name__})")
    if upload.kind == "classifier":
        for k, v in upload.model_kwargs.items():
            if k == "input_norm" and isinstance(v, str) and v in INPUT_NORMS:
                continue  # the one named option: the model's input normalisation
            if not isinstance(v, bool):  # the zoo's other options are switches (conv_relu)
                raise UploadError(f"{who}: model_kwargs[{k!r}] must be true or false (got "
                                  f"{v!r})")
    elif upload.kind == "decoder":
        d = upload.model_kwargs.get("latent_dim")
        if not _bounded_int(d, 1, MAX_LATENT_DIM):
            raise UploadError(f"{who}: model_kwargs['latent_dim'] must be a positive integer "
                              f"≤ {MAX_LATENT_DIM} (got {d!r})")
        w = upload.state_dict.get("fc.weight") if isinstance(upload.state_dict, dict) else None
        if isinstance(w, torch.Tensor) and w.dim() == 2 and w.shape[1] != d + upload.num_classes:
            raise UploadError(f"{who}: parameter 'fc.weight' has shape {tuple(w.shape)}, which "
                              f"does not match model_kwargs['latent_dim'] = {d} (its inputs "
                              f"are latent_dim + {upload.num_classes} classes)")


def build_from_upload(upload: ClientUpload, device: str | torch.device = "cpu",
                      kind: str | None = "classifier") -> nn.Module:
    """Validate an upload (:func:`validate_upload`) and return its model — a classifier, or a
    FedCVAE decoder with ``kind="decoder"`` — frozen (eval mode, no weight gradients)."""
    model = validate_upload(upload, kind)
    model.load_state_dict(upload.state_dict)
    model.eval().requires_grad_(False)
    return model.to(device)


def validate_upload(upload: ClientUpload, kind: str | None = "classifier") -> nn.Module:
    """The one upload validator: check an upload against its declared kind and architecture;
    return an (unloaded) model of it.

    ``kind`` (``"classifier"`` or ``"decoder"``) is what the caller needs (a classifier by
    default: every server but FedCVAE's); None accepts the upload's own. Raises
    :class:`UploadError` naming the client and what is wrong: the wrong kind, an unknown
    architecture or CVAE variant, a decoder's missing ``latent_dim`` or label counts,
    missing/unexpected parameters, shape mismatches, non-finite values.
    """
    who = f"client {upload.client_id}"
    if kind is not None and upload.kind != kind:
        raise UploadError(f"{who}: this server needs a {kind} upload (kind={kind!r}), got "
                          f"kind={upload.kind!r}")
    check_state_dict(upload.state_dict, who)
    if upload.kind in ("classifier", "decoder"):
        check_upload_sizes(upload)  # before any model is built from them
    if upload.kind == "decoder":
        model, what = _decoder_of(upload, who)
    elif upload.kind == "classifier":
        model, what = _classifier_of(upload, who), f"for {upload.arch!r}"
    else:
        raise UploadError(f"{who}: unknown upload kind {upload.kind!r}; "
                          "expected 'classifier' or 'decoder'")
    expected, got = model.state_dict(), upload.state_dict
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    if missing or extra:
        raise UploadError(
            f"{who}: state_dict does not match {upload.kind} {upload.arch!r}: "
            f"missing {missing[:5]}{'…' if len(missing) > 5 else ''}, "
            f"unexpected {extra[:5]}{'…' if len(extra) > 5 else ''}"
        )
    for k, v in expected.items():
        t = got[k]
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(v.shape):
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise UploadError(
                f"{who}: parameter {k!r} has shape {shape}, expected {tuple(v.shape)} {what}"
            )
        if t.dtype != v.dtype:
            raise UploadError(f"{who}: parameter {k!r} has dtype {t.dtype}, expected {v.dtype} "
                              f"for {upload.arch!r}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise UploadError(f"{who}: parameter {k!r} contains NaN or inf values")
        if t.is_floating_point() and t.numel() and float(t.abs().max()) > MAX_ABS_WEIGHT:
            raise UploadError(f"{who}: parameter {k!r} has values up to "
                              f"{float(t.abs().max()):.3g}, beyond any trained model's "
                              f"(limit {MAX_ABS_WEIGHT:g}): a scaled or corrupt upload")
    return model


def check_state_dict(state: object, who: str) -> None:
    """An uploaded state dict is a mapping of string names to dense tensors that hold data: a
    mixed-key, sparse or meta-device state dict is an :class:`UploadError` naming the client
    and the entry (torch's own errors name neither)."""
    if not isinstance(state, dict):
        raise UploadError(f"{who}: state_dict must be a dict of tensors, got "
                          f"{type(state).__name__}")
    for k, v in state.items():
        if not isinstance(k, str):
            raise UploadError(f"{who}: state_dict key {k!r} ({type(k).__name__}) is not a "
                              "parameter name (a string)")
        if not isinstance(v, torch.Tensor):
            raise UploadError(f"{who}: parameter {k!r} is a {type(v).__name__}, not a tensor")
        if v.layout != torch.strided:
            raise UploadError(f"{who}: parameter {k!r} is a {v.layout} tensor; uploads hold "
                              "dense tensors")
        if v.is_meta:
            raise UploadError(f"{who}: parameter {k!r} is on the meta device and holds no "
                              "values")


def _classifier_of(upload: ClientUpload, who: str) -> nn.Module:
    if upload.arch not in MODEL_NAMES:
        raise UploadError(
            f"{who}: unknown architecture {upload.arch!r}; known: {', '.join(MODEL_NAMES)}"
        )
    try:
        return build_model(upload.arch, upload.num_classes, upload.in_channels,
                           upload.image_size, **upload.model_kwargs)
    except ValueError as e:
        raise UploadError(f"{who}: {e}") from None


def _decoder_of(upload: ClientUpload, who: str) -> tuple[nn.Module, str]:
    """A FedCVAE decoder upload's header checks (variant, latent size, label counts)."""
    if upload.arch not in CVAE_VARIANTS:
        raise UploadError(f"{who}: unknown CVAE variant {upload.arch!r}; known: "
                          f"{', '.join(CVAE_VARIANTS)}")
    d = int(upload.model_kwargs["latent_dim"])  # bounded by check_upload_sizes
    extra_kw = sorted(set(upload.model_kwargs) - {"latent_dim"})
    if extra_kw:
        raise UploadError(f"{who}: unexpected model_kwargs {extra_kw} for a decoder upload")
    check_label_counts(upload.label_counts, upload.num_classes, who)
    try:
        dec = build_decoder(upload.arch, upload.num_classes, upload.in_channels,
                            upload.image_size, d)
    except ValueError as e:
        raise UploadError(f"{who}: {e}") from None
    return dec, f"for {upload.arch!r} with latent_dim={d}"


def check_label_counts(counts: object, num_classes: int, who: str) -> None:
    """A decoder upload's ``label_counts``: one integer count per class, each in
    0 … :data:`MAX_LABEL_COUNT` (not a bool, float, NaN or a negative number), not all 0."""
    if (not isinstance(counts, tuple | list | np.ndarray) or np.ndim(counts) != 1
            or len(counts) != num_classes):
        raise UploadError(f"{who}: label_counts must give one count per class "
                          f"({num_classes}), got {counts!r}")
    for i, v in enumerate(counts):
        if (not isinstance(v, int | np.integer) or isinstance(v, bool | np.bool_)
                or not 0 <= v <= MAX_LABEL_COUNT):
            raise UploadError(f"{who}: label_counts[{i}] must be an integer ≥ 0 and ≤ "
                              f"{MAX_LABEL_COUNT:.0e} (a class's sample count), got {v!r} "
                              f"({type(v).__name__})")
    if sum(int(v) for v in counts) < 1:
        raise UploadError(f"{who}: label_counts are all 0: a client without data has no "
                          "decoder to send (its samples would be drawn from no class's count)")
