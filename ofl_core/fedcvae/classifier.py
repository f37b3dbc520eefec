"""The FedCVAE server's two trainings (SPEC §4): the server classifier on synthetic labelled
images (Alg. 1 lines 10–12, Alg. 2) and, for FedCVAE-KD, the server decoder distilled from the
client decoders' samples with ℓ_KD = g(D_θS(z, y), x̂) (Alg. 1 lines 6–8, Eq. 2)."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import RNG, EpochClock, GlobalRNG, Items, ServerCheckpoint
from ..clients import init_model
from ..models.cvae import CVAEDecoder, reconstruction_loss
from ..progress import progress_bar
from ..seeds import fedcvae_server_seed
from ..server import ServerContext


def eval_due(epoch: int, every: int) -> bool:
    """Whether the curve gets a point after 0-based ``epoch`` (every ``every``-th epoch; never
    for ``every=0``; the last epoch is always evaluated by the caller)."""
    return every > 0 and (epoch + 1) % every == 0


def train_classifier(
    x: torch.Tensor, y: torch.Tensor, *, arch: str, conv_relu: bool, epochs: int, lr: float,
    batch_size: int, ctx: ServerContext, seed: int, eval_every: int = 1,
    desc: str = "classifier", checkpoint: ServerCheckpoint | None = None,
    clock: EpochClock | None = None,
) -> tuple[nn.Module, list[float]]:
    """Train the server classifier on synthetic (x ∈ [0, 1], y) with Adam + cross-entropy
    (Alg. 1 lines 10–12). Returns the model and its test-accuracy curve when ``ctx.evaluate``
    is given: the accuracy after every ``eval_every``-th epoch and after the last one
    (``eval_every=0``: after the last epoch only). ``checkpoint``: resume from it and write it
    when due (:mod:`ofl_core.checkpoint`); ``clock`` adds up the epochs' seconds, kept in the
    checkpoint (its ``resumed``: what the earlier parts of a resumed run spent)."""
    kwargs = {"conv_relu": conv_relu} if arch == "mcmahan_cnn" else {}
    model = init_model(arch, ctx.num_classes, ctx.in_channels, ctx.image_size,
                       fedcvae_server_seed(seed, 1), **kwargs).to(ctx.device).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(fedcvae_server_seed(seed, 2))
    n = len(y)
    curve: list[float] = []
    clock = clock if clock is not None else EpochClock()
    pieces = {"model": model, "opt": opt, "rng": RNG(gen), "torch_rng": GlobalRNG(ctx.device),
              "curve": Items(curve), "clock": clock}
    start = checkpoint.resume(pieces) if checkpoint is not None else 0
    for epoch in progress_bar(range(start, epochs), desc=desc, leave=False, show=ctx.progress,
                              initial=start, total=epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(n, generator=gen).to(x.device)
        for s in range(0, n, batch_size):
            idx = perm[s : s + batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if ctx.evaluate is not None and (eval_due(epoch, eval_every) or epoch == epochs - 1):
            curve.append(float(ctx.evaluate(model)))
            model.train()
        clock.seconds += time.perf_counter() - t0
        if checkpoint is not None:
            checkpoint.save_due(epoch + 1, pieces)
    model.eval()
    return model, curve


def distill_decoder(
    student: CVAEDecoder, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, *, epochs: int,
    lr: float, batch_size: int, seed: int, progress: bool = True,
    checkpoint: ServerCheckpoint | None = None, clock: EpochClock | None = None,
) -> list[float]:
    """Train the server decoder on the triples: min ℓ_KD = g(D_θS(z, y), x̂) (Eq. 2), where g
    is the reconstruction loss (BCE-with-logits vs the teachers' σ-outputs for grayscale, MSE
    for RGB), Adam, ``epochs`` passes in shuffled mini-batches. Returns the mean loss per epoch.
    ``checkpoint``: resume from it and write it when due (:mod:`ofl_core.checkpoint`);
    ``clock``: as in :func:`train_classifier`.
    """
    student.train()
    opt = torch.optim.Adam(student.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    n = len(y)
    history: list[float] = []
    clock = clock if clock is not None else EpochClock()
    pieces = {"decoder": student, "opt": opt, "rng": RNG(gen),
              "torch_rng": GlobalRNG(x.device), "history": Items(history), "clock": clock}
    start = checkpoint.resume(pieces) if checkpoint is not None else 0
    for epoch in progress_bar(range(start, epochs), desc="server decoder (KD)", leave=False,
                              show=progress, initial=start, total=epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(n, generator=gen).to(x.device)
        total = torch.zeros((), device=x.device)
        for s in range(0, n, batch_size):
            idx = perm[s : s + batch_size]
            loss = reconstruction_loss(student(z[idx], y[idx]), x[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
        history.append(float(total) / max(n, 1))
        clock.seconds += time.perf_counter() - t0
        if checkpoint is not None:
            checkpoint.save_due(epoch + 1, pieces)
    student.eval()
    return history
