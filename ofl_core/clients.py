"""Client side: local training (CE or LDAM), the upload a client sends, and upload validation.

SPEC §3. A client trains once on its own data and uploads a :class:`ClientUpload` (its model's
state_dict and architecture name, plus its sample count for FedAvg's weighting). The server side
of every method receives only uploads, never data. :func:`train_clients` trains (or loads from
the content-addressed cache, :mod:`ofl_core.upload_cache`) every client of a partition.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .augment import random_crop_flip
from .data.datasets import ImageDataset
from .data.partition import Partition
from .devices import to_device
from .models import MODEL_NAMES, build_model, check_input_norm
from .models.base import VALID_IMAGE_SIZES, VALID_IN_CHANNELS
from .models.cvae import (
    CVAE_VARIANTS,
    MAX_CLASSES,
    MAX_IMAGE_SIZE,
    MAX_LATENT_DIM,
    build_decoder,
)
from .precision import resolve_amp
from .presets import check_preset
from .progress import progress_bar
from .seeds import classifier_init_seed
from .validation import COUNT, NONNEG, POSITIVE, check_config


@dataclass(frozen=True)
class LocalTrainConfig:
    """Local training of one client (SPEC §3; DENSE/FedHydra defaults).

    SGD lr 0.01, momentum 0.9, batch 128, ``epochs`` epochs, cross-entropy, train mode
    throughout. ``loss="ldam"`` is DENSE+LDAM (margins ∝ n_j^(−1/4), max 0.5, scale 30).
    ⚑ ``bn_eval_after_first_epoch``: DENSE's code leaves BN models in eval mode after the first
    epoch (``preset="authors_code"`` sets it, and 400 local epochs).

    ``shared_init``: every client of an architecture starts from the same weights (the model
    the server sends; FedAvg's parameter average needs it; DENSE's code deep-copies its global
    model into each client). False: each client draws its own initial weights
    (:func:`~ofl_core.seeds.classifier_init_seed`) — ⚑ FedCVAE's code's FedOneShot
    (:func:`ofl_core.fedcvae.clients.baseline_local_config`). A cache key and an experiment hash
    name the field only when it is False, so the shared-init entries made before it existed stay
    valid (:meth:`key_fields`).

    Speed options, as the server methods have them: ``channels_last`` (convolutions on
    channels-last tensors; "auto" = on the CPU, where it is ~1.4× faster; float32 all the same,
    equal up to rounding) and ``amp`` (bfloat16 autocast; "auto" = where bfloat16 is native,
    :mod:`ofl_core.precision`; measured against float32 in docs/decisions/clients.md; False keeps
    float32).

    ``input_norm`` (a name of :data:`~ofl_core.models.base.INPUT_NORMS`): the normalisation the
    client's model applies to its [0, 1] input, ``"none"`` (raw pixels, DENSE's code) or
    ``"half"`` ((x − 0.5)/0.5, ⚑ Co-Boosting's code). It is part of the model (its upload's
    ``model_kwargs`` name it, so servers, FedAvg and evaluation rebuild the same function) and
    of the cache key only when not ``"none"`` (the keys of raw-input clients are those from
    before the field existed).
    """

    arch: str = "cnn_mnist"
    epochs: int = 200
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int = 128
    optimizer: Literal["sgd", "adam"] = "sgd"
    loss: Literal["ce", "ldam"] = "ce"
    ldam_max_margin: float = 0.5
    ldam_scale: float = 30.0
    augment: Literal["none", "crop_flip", "flip"] = "none"
    bn_eval_after_first_epoch: bool = False
    model_kwargs: tuple[tuple[str, object], ...] = ()
    shared_init: bool = True
    channels_last: bool | Literal["auto"] = "auto"
    amp: bool | Literal["auto"] = "auto"
    input_norm: str = "none"
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_input_norm(self.input_norm, "LocalTrainConfig.input_norm")
        check_config(self, {"epochs": NONNEG, "lr": POSITIVE, "momentum": NONNEG,
                            "weight_decay": NONNEG, "batch_size": COUNT,
                            "ldam_max_margin": NONNEG, "ldam_scale": POSITIVE})
        if self.arch not in MODEL_NAMES:
            raise ValueError(f"arch: unknown model {self.arch!r}; known: {', '.join(MODEL_NAMES)}")

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> LocalTrainConfig:
        """The paper's local training, or ⚑ DENSE's code (400 epochs, BN eval after epoch 1)."""
        check_preset(preset)
        base = cls(preset=preset)
        if preset == "authors_code":
            base = replace(base, epochs=400, bn_eval_after_first_epoch=True)
        return replace(base, **overrides)

    def key_fields(self) -> dict:
        """The fields as a dict for cache keys and hashes; ``shared_init`` only when False and
        ``input_norm`` only when not ``"none"`` (the keys of the clients without them are those
        from before these fields existed)."""
        d = asdict(self)
        if d["shared_init"]:
            d.pop("shared_init")
        if d["input_norm"] == "none":
            d.pop("input_norm")
        return d

    @property
    def model_options(self) -> dict[str, object]:
        """The model's options: ``model_kwargs``, with ``input_norm`` when not ``"none"`` (what
        :func:`~ofl_core.models.build_model` takes and an upload's ``model_kwargs`` carry)."""
        opts = dict(self.model_kwargs)
        if self.input_norm != "none":
            opts["input_norm"] = self.input_norm
        return opts


@dataclass(frozen=True, eq=False)
class ClientUpload:
    """What a client sends to the server: its model (architecture + state_dict) and n_k.

    ``label_counts`` is only filled for methods whose upload includes them (FedCVAE); classifier
    methods send ``None``. ``kind`` is ``"classifier"`` or ``"decoder"``.
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
            if not isinstance(v, bool):  # the zoo's only options are switches (conv_relu)
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
    0 … :data:`MAX_LABEL_COUNT` (not a bool, float, NaN or a negative number)."""
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


def ldam_loss(
    logits: torch.Tensor, y: torch.Tensor, class_counts: torch.Tensor,
    max_margin: float = 0.5, scale: float = 30.0,
) -> torch.Tensor:
    """LDAM loss (Cao et al. 2019), DENSE §2.3: margins ∝ n_j^(−1/4), largest = ``max_margin``.

    Cao et al. feed ``s·cos θ − s·m_y`` to the softmax, with a cosine-normalised last layer
    (``cos θ`` in [−1, 1]) and s = 30. Our clients keep the shared architectures (a plain
    linear last layer, so FedAvg/ensembles/KD treat LDAM and CE clients alike); their raw
    logits already play the role of ``s·cos θ``, so the margin enters in softmax-input units
    as ``s·m_y`` and the logits are not multiplied by s. Multiplying raw, unbounded logits by
    30 (a literal reading) scales every gradient by 30 and the clients collapse to chance
    (measured; docs/decisions/clients.md). Classes absent from the client get the largest margin
    (they never occur as targets, so the choice only avoids an infinite margin).
    """
    n = to_device(class_counts, logits.device).float().clamp(min=1)
    margins = n.pow(-0.25)
    margins = margins * (max_margin / margins.max())
    adjusted = logits - F.one_hot(y, logits.shape[1]) * (scale * margins)[None, :]
    return F.cross_entropy(adjusted, y)


def init_model(arch: str, num_classes: int, in_channels: int, image_size: int, seed: int,
               **model_kwargs: object) -> nn.Module:
    """Build a model whose initial weights depend only on ``seed`` (global RNG left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model(arch, num_classes, in_channels, image_size, **model_kwargs)


def train_local(
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: LocalTrainConfig,
    num_classes: int,
    seed: int,
    device: str | torch.device = "cpu",
    init_state: dict[str, torch.Tensor] | None = None,
    progress: bool = True,
    desc: str = "client",
    init_from: int = 0,
    client_id: int = 0,
) -> dict[str, torch.Tensor]:
    """Train one client's model on its data (uint8 images ``x``, labels ``y``, fed to the model
    in [0, 1]: the model applies ``cfg.input_norm`` itself); return its state_dict on the CPU.
    Data stays a device tensor, shuffled by a generator seeded ``seed``; initial weights come
    from the experiment seed ``init_from`` — common to all clients, or client ``client_id``'s
    own with ``cfg.shared_init=False`` (:func:`~ofl_core.seeds.classifier_init_seed`)."""
    dev = torch.device(device)
    model = init_model(cfg.arch, num_classes, int(x.shape[1]), int(x.shape[-1]),
                       classifier_init_seed(init_from, client_id, cfg), **cfg.model_options)
    if init_state is not None:
        model.load_state_dict(init_state)
    model.to(dev).train()
    channels_last = cfg.channels_last if cfg.channels_last != "auto" else (
        dev.type == "cpu" and any(isinstance(m, nn.Conv2d) for m in model.modules()))
    if channels_last:
        model.to(memory_format=torch.channels_last)
    amp = resolve_amp(cfg.amp, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum,
                              weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(seed)
    xd, yd = x.to(dev), y.to(dev)
    counts = torch.bincount(y, minlength=num_classes).to(dev)  # once, not per LDAM step
    n = len(yd)
    steps = math.ceil(n / cfg.batch_size)
    for epoch in progress_bar(range(cfg.epochs), desc=desc, leave=False, show=progress):
        if cfg.bn_eval_after_first_epoch and epoch == 1:
            model.eval()  # ⚑ DENSE's code: BN layers stop updating after the first epoch
        perm = torch.randperm(n, generator=gen).to(dev)
        for s in range(steps):
            idx = perm[s * cfg.batch_size : (s + 1) * cfg.batch_size]
            xb = xd[idx].float().div_(255.0)
            if cfg.augment != "none":
                xb = random_crop_flip(xb, crop=cfg.augment == "crop_flip", generator=gen)
            if channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                logits = model(xb)
            logits = logits.float()
            if cfg.loss == "ldam":
                loss = ldam_loss(logits, yd[idx], counts, cfg.ldam_max_margin, cfg.ldam_scale)
            else:
                loss = F.cross_entropy(logits, yd[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}


def train_key_payload(
    dataset: ImageDataset, partition: Partition, client_id: int, cfg: LocalTrainConfig,
    seed: int, init_state_hash: str | None = None,
) -> dict:
    """Everything that determines a trained client (hashed into its cache key)."""
    return {
        "kind": "classifier",
        "dataset": dataset.name,
        "data": dataset.fingerprint(),
        "partition": partition.fingerprint(),
        "client_id": int(client_id),
        "train": cfg.key_fields(),
        "seed": int(seed),
        "init": init_state_hash,
        "init_scheme": "shared-per-arch" if cfg.shared_init else "per-client",
    }
