"""FedHydra's model stratification (Bai et al., Alg. 2, Eqs. 1–7; SPEC §4 "FedHydra").

For every client k and class j a *fresh* generator G_kj is trained for T_G Adam steps on a fixed
noise batch z_kj with every label equal to j, guided by client k's model alone:
ℓ^t_kj = CE(f_k(G_kj(z_kj)), j) (Eq. 1). The loss sequence L_kj = [ℓ^1 … ℓ^T_G] gives the
guidance capability u_kj = (max L_kj − min L_kj) / min L_kj (Eq. 2): a client that knows class j
lets the generator drive the loss down far and to a small minimum.

Orientation: every matrix here is **(C, m)** — rows are classes j, columns are clients k — the
paper's U = ([u_kj]_{m×c})ᵀ (Eq. 3). Ū_r normalises each row over the clients (Eqs. 4–5,
Σ_k Ū_r[j, k] = 1) and Ū_c normalises each column over the classes (Eqs. 6–7,
Σ_j Ū_c[j, k] = 1).

Batching: the m·C generator trainings are independent, so they run as groups of generators
trained together — the generators' parameters are stacked (``torch.func.stack_module_state``)
and one ``vmap``-ed forward produces every generator's batch; each client's model then sees the
images of all its generators of the group in one call. One Adam over the stacked parameters
equals independent Adams (Adam is elementwise and the summed loss gives each generator the
gradient of its own loss). Every generator's initial weights and z come from its own seed
derived from (seed, k, j), so the result does not depend on the grouping (up to float
summation order).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..distill.generator import build_generator, generator_forward
from ..progress import progress_bar
from ..seeds import derive_seed

#: default floor of min L in Eq. 2 (see :func:`guidance_capability`)
MIN_LOSS_FLOOR = 1e-300
#: how u is computed from a loss curve: ``"eq2"`` = the paper; ``"log_ratio"`` = a deviation
U_RULES = ("eq2", "log_ratio")


@dataclass(frozen=True, eq=False)
class Stratification:
    """Result of model stratification (FedHydra Alg. 2).

    ``U``, ``U_r``, ``U_c``: float64 CPU tensors of shape **(C, m)** (rows = classes j,
    columns = clients k; the paper's orientation, Eq. 3): U the raw guidance capabilities
    u_kj (Eq. 2), ``U_r`` rows normalised over clients (Eqs. 4–5), ``U_c`` columns normalised
    over classes (Eqs. 6–7). ``losses``: float64 CPU tensor (m, C, T_G), the loss sequences
    L_kj (Eq. 1), ℓ^t recorded before the t-th generator update (Alg. 2 lines 10–13) and
    computed by :func:`exact_cross_entropy`.
    """

    U: torch.Tensor
    U_r: torch.Tensor
    U_c: torch.Tensor
    losses: torch.Tensor

    @property
    def num_classes(self) -> int:
        return int(self.U.shape[0])

    @property
    def num_clients(self) -> int:
        return int(self.U.shape[1])

    @classmethod
    def from_losses(cls, losses: torch.Tensor, min_loss_floor: float = MIN_LOSS_FLOOR,
                    rule: str = "eq2") -> Stratification:
        """U, Ū_r, Ū_c from recorded loss curves (m, C, T_G) (Eqs. 2–7), e.g. to compare
        ``rule`` settings on one stratification run."""
        L = torch.as_tensor(losses, dtype=torch.float64).cpu()
        U = guidance_capability(L, min_loss_floor, rule).T.contiguous()  # (C, m)
        U_r, U_c = stratified_weights(U)
        return cls(U=U, U_r=U_r, U_c=U_c, losses=L)

    def to_lists(self) -> dict[str, list]:
        """Plain nested lists (JSON-friendly): ``U``, ``U_r``, ``U_c`` as C rows of m values."""
        return {"U": self.U.tolist(), "U_r": self.U_r.tolist(), "U_c": self.U_c.tolist()}


def guidance_capability(losses: torch.Tensor, min_loss_floor: float = MIN_LOSS_FLOOR,
                        rule: str = "eq2") -> torch.Tensor:
    """u = (max L − min L) / min L over the last dimension (FedHydra Eq. 2), in float64.

    ``rule="log_ratio"`` (opt-in, **not the paper**; docs/decisions/fedhydra.md):
    u = log(max L / min L) = log(1 + u_Eq.2). Eq. 2 grows like 1/min L, so a client's two own
    classes can differ by orders of magnitude in u (and Ū_c is then winner-take-all between
    them); the logarithm keeps the order of Eq. 2 and turns those ratios into differences.

    Guard: min L can be exactly 0 — a teacher so confident that its loss underflows (the
    float64 :func:`exact_cross_entropy` used for L_kj underflows only past a margin of ≈ 745;
    float32 cross-entropy already past ≈ 17) — which makes Eq. 2 infinite, or 0/0 when the loss
    is 0 throughout. The denominator is clamped at ``min_loss_floor`` (default 1e-300, near
    float64's smallest normal number, so genuinely tiny minima still count: u ≈ L_max·e^margin
    for a confident teacher). Such a client gets a huge but finite u — the limit of Eq. 2 as
    min L → 0 — and keeps the largest weight of its class row; a loss that is 0 throughout (no
    guidance at all) gives u = 0. U stays finite for losses below ≈ 1e8.
    """
    if min_loss_floor <= 0:
        raise ValueError(f"min_loss_floor must be > 0 (got {min_loss_floor})")
    if rule not in U_RULES:
        raise ValueError(f"rule must be one of {U_RULES} ('eq2' = Eq. 2; got {rule!r})")
    L = losses.double()
    hi, lo = L.amax(-1), L.amin(-1)
    if rule == "log_ratio":
        return torch.where(hi > lo, torch.log(hi.clamp_min(min_loss_floor)
                                              / lo.clamp_min(min_loss_floor)), 0.0)
    return (hi - lo) / lo.clamp_min(min_loss_floor)


def exact_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy in float64, written as softplus(log Σ_{i≠j} e^{l_i} − l_j) so that
    a confident teacher's loss e^(−margin) is not rounded to 0 (float32 ``cross_entropy``
    returns exactly 0 once the margin exceeds ≈ 17). Used for the recorded L_kj of Eq. 2."""
    lg = logits.double()
    idx = target[:, None]
    own = lg.gather(1, idx).squeeze(1)
    others = lg.scatter(1, idx, float("-inf"))
    return F.softplus(torch.logsumexp(others, 1) - own)


def _normalise(u: torch.Tensor, dim: int) -> torch.Tensor:
    # divide by the largest entry first: u can be ~1e300 and the plain sum would overflow
    peak = u.amax(dim, keepdim=True)
    u = u / torch.where(peak > 0, peak, 1.0)
    total = u.sum(dim, keepdim=True)
    uniform = torch.full_like(u, 1.0 / u.shape[dim])
    return torch.where(total > 0, u / torch.where(total > 0, total, 1.0), uniform)


def stratified_weights(U: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Ū_r, Ū_c) from U of shape (C, m) (FedHydra Eqs. 4–7).

    Ū_r[j, k] = u_kj / Σ_k' u_k'j (each class row sums to 1 over clients, Eqs. 4–5);
    Ū_c[j, k] = u_kj / Σ_j' u_kj' (each client column sums to 1 over classes, Eqs. 6–7).
    Guard: a row (column) whose u are all 0 — no client (class) gave any guidance — gets
    uniform weights 1/m (1/C) instead of 0/0.
    """
    if U.dim() != 2:
        raise ValueError(f"U must be a (C, m) matrix (got shape {tuple(U.shape)})")
    if bool((U < 0).any()) or not bool(torch.isfinite(U).all()):
        raise ValueError("U must be finite and non-negative")
    return _normalise(U, 1), _normalise(U, 0)


class _FastGenerator(nn.Module):
    """Wraps a generator so that ``functional_call`` runs :func:`generator_forward`."""

    def __init__(self, g: nn.Module, fast: bool) -> None:
        super().__init__()
        self.g, self.fast = g, fast

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return generator_forward(self.g, z, self.fast, cpu_kernels=False)  # under vmap


def resolve_group(group: int | Literal["auto"], m: int, num_classes: int, batch_size: int,
                  device: torch.device) -> int:
    """Number of generators trained together. ``"auto"``: one client's C generators on the
    CPU (memory ~ C·b images of activations); on CUDA as many of the m·C as keep
    group·b ≤ 16384 images."""
    if group == "auto":
        if device.type == "cuda":
            return max(1, min(m * num_classes, 16384 // max(1, batch_size)))
        return num_classes
    if not isinstance(group, int) or group < 1:
        raise ValueError(f"group must be a positive integer or 'auto' (got {group!r})")
    return group


def stacked_generators(chunk: Sequence[tuple[int, int]], seed: int, nz: int, ngf: int,
                       image_size: int, in_channels: int, batch_size: int, dev: torch.device,
                       fast_generator: bool) -> tuple[Callable, dict, dict, torch.Tensor]:
    """The generators G_kj of one group, stacked: (vmapped forward, stacked parameters,
    stacked buffers, z of shape (G, b, nz)). G_kj and z_kj come from ``derive_seed(seed,
    "stratify", k, j)`` only."""
    gens, zs = [], []
    for k, j in chunk:
        rng = torch.Generator().manual_seed(derive_seed(seed, "stratify", k, j))
        gens.append(_FastGenerator(
            build_generator(nz, ngf, image_size, in_channels, rng, dev).train(),
            fast_generator))
        zs.append(torch.randn(batch_size, nz, generator=rng))
    z = torch.stack(zs).to(dev)  # (G, b, nz)
    params, buffers = torch.func.stack_module_state(gens)
    base = copy.deepcopy(gens[0]).to("meta")

    def gen_fn(p: dict, b: dict, zz: torch.Tensor, _base: nn.Module = base) -> torch.Tensor:
        return torch.func.functional_call(_base, (p, b), (zz,))

    return torch.vmap(gen_fn, randomness="error"), params, buffers, z


def group_layout(chunk: Sequence[tuple[int, int]], batch_size: int, dev: torch.device
                 ) -> tuple[list[int], dict, dict, torch.Tensor, torch.Tensor]:
    """Where each client's generators sit in the group and their target labels: (clients,
    positions per client, per-sample labels per client, k of each generator, j of each)."""
    clients = sorted({k for k, _ in chunk})
    pos = {k: torch.tensor([i for i, (kk, _) in enumerate(chunk) if kk == k], device=dev)
           for k in clients}
    tgt = {k: torch.tensor([j for kk, j in chunk if kk == k], device=dev)
           .repeat_interleave(batch_size) for k in clients}
    k_idx = torch.tensor([k for k, _ in chunk], device=dev)
    j_idx = torch.tensor([j for _, j in chunk], device=dev)
    return clients, pos, tgt, k_idx, j_idx


def stratify(
    models: Sequence[nn.Module],
    num_classes: int,
    in_channels: int,
    image_size: int,
    *,
    steps: int = 30,
    batch_size: int = 128,
    nz: int = 256,
    ngf: int = 64,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.5, 0.999),
    seed: int = 0,
    device: str | torch.device = "cpu",
    group: int | Literal["auto"] = "auto",
    fast_generator: bool = True,
    channels_last: bool = False,
    min_loss_floor: float = MIN_LOSS_FLOOR,
    rule: str = "eq2",
    progress: bool = False,
) -> Stratification:
    """Model stratification, FedHydra Algorithm 2 (Eqs. 1–7).

    Args:
        models: the client models f_1..f_m (frozen here: eval mode, no weight gradients).
            Heterogeneous architectures are fine.
        steps: T_G, generator steps per (client, class) (paper: 30).
        batch_size: b, the fixed noise batch per (client, class) (paper: the same b = 128).
        nz, ngf: generator size (SPEC §2 ``generator``); lr, betas: its Adam.
        seed: generator (k, j) is initialised and draws z from ``derive_seed(seed,
            "stratify", k, j)`` (torch's global RNG is untouched).
        group: generators trained together (see :func:`resolve_group`).
        channels_last: feed channels-last images (for teachers stored channels-last).
        min_loss_floor: guard of Eq. 2 (see :func:`guidance_capability`).
        rule: u from the loss curves: ``"eq2"`` (the paper) or ``"log_ratio"`` (opt-in).

    Returns:
        :class:`Stratification` with U, Ū_r, Ū_c of shape (C, m) and the loss curves.
    """
    m = len(models)
    if m == 0:
        raise ValueError("stratify: no client models")
    if rule not in U_RULES:
        raise ValueError(f"stratify: rule must be one of {U_RULES} (got {rule!r})")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"stratify: steps and batch_size must be ≥ 1 (got {steps}, "
                         f"{batch_size})")
    dev = torch.device(device)
    for mdl in models:
        mdl.eval().requires_grad_(False)
    gsize = resolve_group(group, m, num_classes, batch_size, dev)
    pairs = [(k, j) for k in range(m) for j in range(num_classes)]
    losses = torch.zeros(m, num_classes, steps, device=dev, dtype=torch.float64)
    total = len(pairs) * steps
    bar = progress_bar(total=total, desc="FedHydra stratification", show=progress)
    for start in range(0, len(pairs), gsize):
        chunk = pairs[start : start + gsize]
        batched_gen, params, buffers, z = stacked_generators(
            chunk, seed, nz, ngf, image_size, in_channels, batch_size, dev, fast_generator)
        opt = torch.optim.Adam(list(params.values()), lr=lr, betas=betas)
        clients, pos, tgt, k_idx, j_idx = group_layout(chunk, batch_size, dev)
        for t in range(steps):
            x = batched_gen(params, buffers, z)  # (G, b, ch, H, W)
            per_gen = x.new_zeros(len(chunk))
            for k in clients:
                xk = x[pos[k]].flatten(0, 1)
                if channels_last:
                    xk = xk.contiguous(memory_format=torch.channels_last)
                logits = models[k](xk).float()
                ce = F.cross_entropy(logits, tgt[k], reduction="none")
                n = len(pos[k])
                per_gen = per_gen.index_put((pos[k],), ce.view(n, batch_size).mean(1))
                record = exact_cross_entropy(logits.detach(), tgt[k]).view(n, batch_size).mean(1)
                losses[k_idx[pos[k]], j_idx[pos[k]], t] = record
            opt.zero_grad(set_to_none=True)
            per_gen.sum().backward()
            opt.step()
            bar.update(len(chunk))
    bar.close()
    return Stratification.from_losses(losses.cpu(), min_loss_floor, rule)


def block_structure(weights: torch.Tensor, counts: Sequence[Sequence[int]] | torch.Tensor
                    ) -> dict:
    """Does a (C, m) weight matrix (e.g. Ū_r) follow the clients' data — FedHydra Fig. 6b?

    ``counts``: the partition's (m, C) client×class sample counts; client k "owns" class j when
    it holds samples of it. Returns:

    - ``client_top_are_own``: per client, whether its largest weights (column k, the top n_k
      entries for a client owning n_k classes) are exactly on its own classes;
    - ``class_argmax_is_owner``: per class, whether the client with the largest weight of
      that class row owns the class;
    - ``owner_weight``: per class, the total weight on the clients that own it;
    - ``block_structured``: every client's top weights are its own classes (the 2c/c heat map
      shows one block per client).
    """
    W = torch.as_tensor(weights, dtype=torch.float64)
    own = torch.as_tensor(counts).T > 0  # (C, m)
    if W.dim() != 2 or W.shape != own.shape:
        raise ValueError(f"weights must be (C, m) = {tuple(own.shape)} to match counts (m, C) "
                         f"(got {tuple(W.shape)})")
    client_ok = []
    for k in range(W.shape[1]):
        n = int(own[:, k].sum())
        top = set(torch.topk(W[:, k], n).indices.tolist()) if n else set()
        client_ok.append(top == set(torch.nonzero(own[:, k]).flatten().tolist()))
    class_ok = [bool(own[j, int(W[j].argmax())]) for j in range(W.shape[0])]
    owner_weight = (W * own).sum(1).tolist()
    return {"client_top_are_own": client_ok, "class_argmax_is_owner": class_ok,
            "owner_weight": owner_weight, "block_structured": all(client_ok)}


__all__ = ["MIN_LOSS_FLOOR", "U_RULES", "Stratification", "block_structure", "exact_cross_entropy",
           "group_layout", "guidance_capability", "resolve_group", "stacked_generators",
           "stratified_weights", "stratify"]
