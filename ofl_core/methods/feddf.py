"""FedDF: ensemble distillation for model fusion (Lin et al., NeurIPS 2020), one-shot and
data-free as DENSE's baseline (DENSE §3.1.3; SPEC §4). No reference code exists for this
baseline; every choice below is in docs/decisions/dense-baselines.md.

The student starts from the FedAvg model (n_k-weighted parameter average, homogeneous clients)
— or a fresh model of ``student_arch`` for heterogeneous clients — and is distilled from the
ensemble D with KL(σ(D/T) ‖ σ(S/T))·T² on an unlabeled proxy set: by default uniform-noise
images (data-free), or a named other dataset found locally (``proxy="cifar100"``, ...), which
is converted to the task's channels and size. ``ServerResult.extras["proxy"]`` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from ..checkpoint import Items
from ..data.datasets import DatasetNotFoundError, load_dataset
from ..devices import to_device
from ..distill.config import DistillConfig, check_distill_config
from ..distill.loop import DistillRun, as_floats, ensemble_kd_step, open_run
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult, average_states
from ..uploads import ClientUpload


@dataclass(frozen=True)
class FedDFConfig(DistillConfig):
    """FedDF with DENSE's "same setting as ours" (§3.1.4): T = 200 epochs of
    ``steps_per_epoch`` = 30 (= T_G) KD steps, batch 128, SGD 0.01 momentum 0.9, temperature 1.

    ``proxy``: ``"noise"`` (uniform U(0, 1) images, fresh each step) or a dataset name of
    :func:`ofl_core.data.datasets.load_dataset` (its training images, from ``proxy_data_root``);
    when that dataset is not on this machine and ``fallback_to_noise`` is True, noise is used
    and the record says so. ``init_from_fedavg``: start from the weighted FedAvg model (FedDF's
    initialisation) when the clients are homogeneous and the student has their architecture.
    ``kd_student_mode``: the student's mode in the KD steps — "train" (FedDF's distillation,
    the literal reading: BN layers normalise with the proxy batch's statistics and update
    their running statistics from it) or "eval" (BN layers keep the FedAvg model's running
    statistics, only weights move; on a noise proxy "train" replaces them with noise
    statistics — see docs/decisions/paper-gaps.md). No authors' code exists: both presets are
    equal."""

    kd_temperature: float = 1.0
    proxy: str = "noise"
    proxy_data_root: str | None = None
    fallback_to_noise: bool = True
    init_from_fedavg: bool = True
    kd_student_mode: Literal["train", "eval"] = "train"

    def __post_init__(self) -> None:
        check_distill_config(self, positive=("kd_temperature",))
        if self.kd_student_mode not in ("train", "eval"):
            raise ValueError(f"kd_student_mode must be 'train' or 'eval' (got "
                             f"{self.kd_student_mode!r})")

    @property
    def method_name(self) -> str:
        return "feddf"


def adapt_images(x: torch.Tensor, channels: int, size: int) -> torch.Tensor:
    """uint8 images (N, C', H', W') → uint8 (N, channels, size, size): grayscale ↔ RGB
    (ITU-R 601 luma for RGB → gray, channel repeat for gray → RGB) and bilinear resize."""
    xf = x.float()
    if xf.shape[1] != channels:
        if channels == 1:
            w = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
            xf = (xf * w).sum(1, keepdim=True)
        else:
            xf = xf.repeat(1, channels, 1, 1)
    if xf.shape[-1] != size or xf.shape[-2] != size:
        xf = F.interpolate(xf, size=(size, size), mode="bilinear", align_corners=False)
    return xf.round().clamp(0, 255).to(torch.uint8)


def load_proxy(cfg: FedDFConfig, ctx: ServerContext) -> tuple[torch.Tensor | None, str]:
    """The proxy images (uint8, task shape) or None for noise, and a description for records."""
    if cfg.proxy == "noise":
        return None, "noise"
    try:
        ds = load_dataset(cfg.proxy, cfg.proxy_data_root)
    except DatasetNotFoundError as e:
        if not cfg.fallback_to_noise:
            raise
        return None, f"noise ({cfg.proxy} not found locally: {str(e).split('.')[0]})"
    return adapt_images(ds.x_train, ctx.in_channels, ctx.image_size), ds.name


def proxy_batch(run_: DistillRun, proxy: torch.Tensor | None, cfg: FedDFConfig,
                ctx: ServerContext) -> torch.Tensor:
    """One unlabeled batch: fresh U(0, 1) noise, or ``batch_size`` proxy images drawn with
    replacement; in the teachers' memory format."""
    if proxy is None:
        shape = (cfg.batch_size, ctx.in_channels, ctx.image_size, ctx.image_size)
        xb = to_device(torch.rand(shape, generator=run_.rng), run_.device)
    else:
        idx = torch.randint(0, len(proxy), (cfg.batch_size,), generator=run_.rng)
        xb = to_device(proxy[idx], run_.device).float().div_(255.0)
    return run_.to_input(xb)


def run(uploads: list[ClientUpload], cfg: FedDFConfig, ctx: ServerContext) -> ServerResult:
    """Distil the ensemble into the (FedAvg-initialised) student on the proxy data with
    KL(σ(D/T) ‖ σ(S/T))·T² (DENSE Eq. 6), SGD."""

    def fedavg_init(student_arch: str) -> dict[str, torch.Tensor] | None:
        if cfg.init_from_fedavg and {u.arch for u in uploads} == {student_arch}:
            return average_states([u.state_dict for u in uploads],
                                  [float(u.num_samples) for u in uploads])
        return None

    run_ = open_run(uploads, cfg, ctx, "FedDF", "feddf", student_init=fedavg_init)
    init = "fedavg" if run_.student_loaded else "random"
    student = run_.student
    proxy, proxy_name = load_proxy(cfg, ctx)
    opt_s = torch.optim.SGD(student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum)
    kd_losses: list[torch.Tensor] = []
    student.train(cfg.kd_student_mode == "train")
    for _epoch in run_.epochs({"opt_s": opt_s, "kd_losses": Items(kd_losses, run_.device)}):
        ep = [ensemble_kd_step(run_.bank, student, opt_s, proxy_batch(run_, proxy, cfg, ctx),
                               cfg.kd_temperature, run_.amp)
              for _ in range(cfg.steps_per_epoch)]
        if ep:
            kd_losses.append(torch.stack(ep).mean())
    extras = {"proxy": proxy_name, "student_init": init, "kd_loss": as_floats(kd_losses),
              "kd_steps": cfg.epochs * cfg.steps_per_epoch}
    return run_.result(cfg.method_name, cfg.preset, extras)


SPEC = MethodSpec(
    "feddf", FedDFConfig, run,
    MethodKind(
        "Lin et al. 2020", False, 1, "1: ensemble distillation on proxy inputs", MODEL,
        "unlabelled proxy data (ofl's default proxy, uniform noise, needs none)", "one model"
    ),
)
