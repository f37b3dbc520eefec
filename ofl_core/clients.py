"""Client side: local training (CE or LDAM); the upload a client sends is :mod:`ofl_core.uploads`.

SPEC §3. A client trains once on its own data and uploads a :class:`ClientUpload` (its model's
state_dict and architecture name, plus its sample count for FedAvg's weighting). The server side
of every method receives only uploads, never data. :func:`train_clients` trains (or loads from
the content-addressed cache, :mod:`ofl_core.upload_cache`) every client of a partition.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .augment import random_crop_flip
from .data.datasets import ImageDataset
from .data.partition import Partition
from .devices import to_device
from .models import MODEL_NAMES, build_model, check_input_norm
from .precision import resolve_amp
from .presets import check_preset
from .progress import progress_bar
from .seeds import classifier_init_seed
from .validation import COUNT, NONNEG, POSITIVE, check_config, within


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
        check_config(self, {"epochs": NONNEG, "lr": POSITIVE,
                            "momentum": within(0, 1, high_open=True),  # ≥ 1 diverges
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
        bad = sorted(set(overrides) - {f.name for f in fields(cls)})
        if bad:
            raise ValueError(f"LocalTrainConfig: unknown field(s) {bad}; fields: "
                             f"{sorted(f.name for f in fields(cls))}")
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
