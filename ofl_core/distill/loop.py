"""The loop scaffold every distillation server shares (DENSE, Fed-DAFL, Fed-ADI, FedDF,
FedHydra), so that a method file holds only its own losses and steps.

:func:`open_run` builds the :class:`~ofl_core.distill.teachers.TeacherBank` from the uploads,
the student (:func:`server_student`, optionally from a given state), puts it channels-last
beside channels-last teachers and fuses its ReLU/max-pool pairs (exact), and seeds the
method's generator ``derive_seed(ctx.seed, tag)``. :meth:`DistillRun.epochs` is the epoch loop
with the progress bar, the test curve (:class:`EvalCurve`) and the server checkpoint
(:mod:`ofl_core.checkpoint`: a method passes its own state, the scaffold adds the student, the
RNGs and the curve, resumes and saves); :meth:`DistillRun.result`
undoes the set-up and builds the :class:`~ofl_core.server.ServerResult` with the
extras every method reports. :func:`ensemble_kd_step` is the distillation step (DENSE Eq. 6)
the methods share.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from ..checkpoint import RNG, EpochClock, GlobalRNG, ServerCheckpoint, Stateful, server_checkpoint
from ..clients import init_model
from ..progress import progress_bar
from ..seeds import derive_seed
from ..server import ServerContext, ServerResult
from ..uploads import build_from_upload
from .kernels import autocast_context, fuse_relu_maxpool
from .losses import kd_loss
from .pool import ImagePool
from .targets import PoolTargets
from .teachers import TeacherBank

T = TypeVar("T")


def server_student(uploads: Sequence, student_arch: str | None, num_classes: int,
                   in_channels: int, image_size: int, seed: int,
                   device: str | torch.device = "cpu", method: str = "DENSE",
                   input_norm: str | None = None) -> tuple[nn.Module, str]:
    """A fresh server model (the student), initialised from ``seed`` only.

    ``student_arch=None`` takes the clients' architecture (and its model options) and needs
    homogeneous clients; for heterogeneous clients it raises a clear error asking for one
    (the papers' server model there is ``"resnet18"``). ``input_norm``: the normalisation the
    student applies to its [0, 1] input (:data:`~ofl_core.models.base.INPUT_NORMS`); None = the
    clients' when it takes their architecture, else none.
    """
    archs = sorted({u.arch for u in uploads})
    if student_arch is None:
        if len(archs) != 1:
            raise ValueError(
                f"{method}: the clients use different architectures {archs}, so the server "
                "model's architecture must be given: set student_arch (e.g. 'resnet18', the "
                "server model of DENSE Table 2 and FedHydra Table 3)")
        student_arch = archs[0]
    kwargs = dict(uploads[0].model_kwargs) if archs == [student_arch] else {}
    if input_norm is not None:
        kwargs.pop("input_norm", None)
        if input_norm != "none":
            kwargs["input_norm"] = input_norm
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

    def state_dict(self) -> dict[str, list]:
        return {"curve": list(self.curve), "epochs_done": list(self.epochs_done)}

    def load_state_dict(self, state: Mapping[str, list]) -> None:
        curve, done = state["curve"], state["epochs_done"]
        if not (isinstance(curve, list) and isinstance(done, list) and len(curve) == len(done)):
            raise ValueError("EvalCurve: a curve and its epochs of equal lengths expected")
        self.curve, self.epochs_done = [float(a) for a in curve], [int(e) for e in done]

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


@dataclass(eq=False)
class DistillRun:
    """One distillation server's shared state: teachers, student, its seeded RNG, the autocast
    context, the test curve and the checkpoint (None when off). Made by :func:`open_run`;
    ``student_loaded`` says whether the student started from a given state."""

    name: str
    bank: TeacherBank
    student: nn.Module
    student_arch: str
    rng: torch.Generator
    device: torch.device
    amp: torch.autocast
    tracker: EvalCurve
    epochs_total: int
    progress: bool
    unfuse: Callable[[], None]
    student_loaded: bool = False
    finished: bool = False
    checkpoint: ServerCheckpoint | None = None
    clock: EpochClock = field(default_factory=EpochClock)

    def to_input(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` in the teachers' memory format (channels-last when the bank is)."""
        return self.bank.to_input(x)

    def epochs(self, state: Mapping[str, Stateful] | None = None) -> Iterator[int]:
        """The epochs 0..T−1 under a progress bar; after each, the student is evaluated when
        due (:class:`EvalCurve`), the bar shows its accuracy and the checkpoint is written when
        due. ``state``: the method's own pieces of state (generator, optimisers, pool, logs,
        loop-carried values; :mod:`ofl_core.checkpoint.state`), beside the student, the RNGs
        and the curve; with a checkpoint, the loop first resumes from it (skipping the epochs
        it had done)."""
        pieces = {"student": self.student, "rng": RNG(self.rng),
                  "torch_rng": GlobalRNG(self.device), "curve": self.tracker,
                  "clock": self.clock, **(state or {})}
        ckpt = self.checkpoint
        start = ckpt.resume(pieces) if ckpt is not None else 0
        bar = progress_bar(range(start, self.epochs_total), desc=self.name, show=self.progress,
                           initial=start, total=self.epochs_total)
        for epoch in bar:
            t0 = time.perf_counter()
            yield epoch
            acc = self.tracker(epoch, self.student)
            if acc is not None:
                bar.set_postfix(acc=f"{acc:.2f}")
            self.clock.seconds += time.perf_counter() - t0
            if ckpt is not None:
                ckpt.save_due(epoch + 1, pieces)
        bar.close()

    def stage(self, name: str, compute: Callable[[], T], encode: Callable[[T], Any],
              decode: Callable[[Any], T]) -> T:
        """A result computed once before the epochs (FedHydra's stratification), kept in the
        checkpoint: :meth:`ofl_core.checkpoint.ServerCheckpoint.stage`; just ``compute()``
        without one."""
        if self.checkpoint is None:
            return compute()
        return self.checkpoint.stage(name, compute, encode, decode)

    def finish(self) -> None:
        """Undo the set-up: remove the teachers' BN hooks, unfuse the student, put student and
        teachers back in eval mode / contiguous memory. Idempotent."""
        if self.finished:
            return
        self.bank.close()
        self.unfuse()
        self.student.eval().to(memory_format=torch.contiguous_format)
        for mdl in self.bank.models:
            mdl.to(memory_format=torch.contiguous_format)
        self.finished = True

    def result(self, method: str, preset: str, extras: dict[str, Any],
               samples: tuple[torch.Tensor | None, torch.Tensor | None] | None = None,
               num_images: int = 64) -> ServerResult:
        """:meth:`finish`, then the :class:`ServerResult` with the common extras
        (``student_arch``, ``teachers_batched``, ``curve_epochs``) before the method's own.
        ``samples``: (images, labels) for the image grid (``image_labels`` in the extras);
        None for methods without synthetic images."""
        self.finish()
        out = {"student_arch": self.student_arch, "teachers_batched": self.bank.batched,
               "curve_epochs": self.tracker.epochs_done,
               "time_resumed_s": round(self.clock.resumed, 3), **extras}
        images = None
        if samples is not None:
            x, y = samples
            images, labels = image_grid(x, y, num_images) if x is not None else (None, None)
            out["image_labels"] = labels
        t = self.tracker
        return ServerResult(method=method, preset=preset, model=self.student, curve=t.curve,
                            last_acc=t.last, best_acc=t.best, images=images, extras=out)


def open_run(uploads: Sequence, cfg: Any, ctx: ServerContext, name: str, tag: str, *,
             student_state: dict[str, torch.Tensor] | None = None,
             student_init: Callable[[str], dict[str, torch.Tensor] | None] | None = None,
             fuse_student: bool = True, inputs: Mapping[str, Any] | None = None,
             input_norm: str | None = None) -> DistillRun:
    """Set up a distillation server: teachers from ``uploads``, the student (seed
    ``derive_seed(ctx.seed, f"{tag}-student")``, then ``student_state`` or
    ``student_init(student_arch)`` when given), the RNG ``derive_seed(ctx.seed, tag)``, the
    checkpoint (keyed on ``tag``, the uploads, ``cfg``, the initial student, ``inputs`` — the
    method's other arguments that change its result — and ``ctx``).

    ``input_norm``: the student's input normalisation (:func:`server_student`; None = the
    clients'); the teachers keep the one their uploads name.

    ``cfg`` needs ``student_arch``, ``batched_teachers``, ``channels_last``, ``amp``,
    ``epochs`` and ``eval_every``; ``name`` is the method's display name (progress bar and
    error messages)."""
    if not uploads:
        raise ValueError(f"{name}: no client uploads")
    dev = torch.device(ctx.device)
    bank = TeacherBank([build_from_upload(u, dev) for u in uploads],
                       batched=cfg.batched_teachers, channels_last=cfg.channels_last)
    student, s_arch = server_student(uploads, cfg.student_arch, ctx.num_classes,
                                     ctx.in_channels, ctx.image_size,
                                     derive_seed(ctx.seed, f"{tag}-student"), dev, name,
                                     input_norm)
    state = student_init(s_arch) if student_init is not None else student_state
    if state is not None:
        student.load_state_dict(state)
    if bank.channels_last:
        student.to(memory_format=torch.channels_last)
    unfuse = fuse_relu_maxpool(student) if fuse_student else (lambda: None)
    ckpt = server_checkpoint(ctx, tag, uploads, cfg, cfg.epochs, student=state,
                             **(inputs or {}))
    return DistillRun(name=name, bank=bank, student=student, student_arch=s_arch,
                      rng=torch.Generator().manual_seed(derive_seed(ctx.seed, tag)), device=dev,
                      amp=autocast_context(dev, cfg.amp),
                      tracker=EvalCurve(ctx.evaluate, cfg.epochs, cfg.eval_every),
                      epochs_total=cfg.epochs, progress=ctx.progress, unfuse=unfuse,
                      student_loaded=state is not None, checkpoint=ckpt)


@dataclass
class SynthesisLog:
    """What a synthesise-then-distil server records: the per-epoch mean losses of its
    synthesis step and of the student, and the last synthetic batch ``x`` with ``y``, its
    labels (Fed-ADI) or the ensemble's logits on it (Fed-DAFL)."""

    synth_losses: list[torch.Tensor] = field(default_factory=list)
    kd_losses: list[torch.Tensor] = field(default_factory=list)
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None


def as_floats(values: list[torch.Tensor]) -> list[float]:
    """Scalar tensors (e.g. per-epoch mean losses) as floats, with one host sync."""
    return torch.stack(values).tolist() if values else []


def teacher_output(bank: TeacherBank, xb: torch.Tensor, amp: torch.autocast,
                   teacher: Callable[[torch.Tensor], torch.Tensor] | None = None
                   ) -> torch.Tensor:
    """The distillation target of the batch ``xb`` (in the teachers' memory format), under
    ``no_grad``: ``teacher`` maps the clients' logits (m, B, C) to the teacher's (B, C)
    (:func:`~ofl_core.distill.combiners.combine_teachers`); None = D, the mean of logits."""
    with torch.no_grad(), amp:
        return bank(xb) if teacher is None else teacher(bank.logits(xb))


def ensemble_kd_step(bank: TeacherBank, student: nn.Module, opt: torch.optim.Optimizer,
                     xb: torch.Tensor, temperature: float, amp: torch.autocast,
                     teacher: Callable[[torch.Tensor], torch.Tensor] | None = None,
                     target: torch.Tensor | None = None) -> torch.Tensor:
    """One SGD step of the student on L_dis = KL(σ(D/T) ‖ σ(S/T))·T² (DENSE Eq. 6) on the
    batch ``xb`` (in the teachers' memory format); returns the detached loss. The target is
    :func:`teacher_output`, or ``target`` when given (kept from an earlier pass:
    :class:`~ofl_core.distill.targets.PoolTargets`)."""
    t_out = teacher_output(bank, xb, amp, teacher) if target is None else target
    with amp:
        s_out = student(xb)
    loss = kd_loss(s_out, t_out, temperature)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def pool_targets(bank: TeacherBank, amp: torch.autocast, augment: str, chunk: int,
                 teacher: Callable[[torch.Tensor], torch.Tensor] | None = None) -> PoolTargets:
    """The teachers' :func:`teacher_output` of a pool's images, kept as they join (``chunk``
    at a time; the KD batch size, so that they are computed as a pass would compute them)."""
    return PoolTargets(lambda x: teacher_output(bank, bank.to_input(x), amp, teacher),
                       augment, chunk)


def distil_pool(run_: DistillRun, pool: ImagePool, opt_s: torch.optim.Optimizer,
                kd_batch_size: int, temperature: float,
                targets: PoolTargets | None = None) -> torch.Tensor:
    """One shuffled pass over the pool, one SGD step of the student on L_dis (DENSE Eq. 6)
    per batch of ``kd_batch_size``; returns the mean KD loss (Fed-ADI, Fed-DAFL's ``"pool"``).
    ``targets`` (:func:`pool_targets`, made once per run): the teachers' outputs kept from
    earlier passes, the same batches and steps without running the teachers again."""
    student = run_.student
    student.train().requires_grad_(True)
    if targets is not None:
        ep = [ensemble_kd_step(run_.bank, student, opt_s, run_.to_input(xb), temperature,
                               run_.amp, target=t)
              for xb, t, _ in targets.batches(pool, kd_batch_size, run_.rng)]
    else:
        ep = [ensemble_kd_step(run_.bank, student, opt_s, run_.to_input(xb), temperature,
                               run_.amp) for xb in pool.batches(kd_batch_size, run_.rng)]
    return torch.stack(ep).mean()
