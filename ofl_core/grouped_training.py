"""All clients of one architecture trained at once: K clients' CNNs as one grouped network.

Each convolution becomes one convolution with ``groups = K`` (client k owns input and output
channel block k), each BatchNorm one BatchNorm over the K·C channels (statistics per channel,
so per client), ReLU and max-pooling act per channel, and the classifier head is one batched
matrix product. Client k's batch enters as channel block k, so the K forward and backward
passes are one pass of a wider network; the loss is the sum of the clients' mean losses, whose
gradient with respect to client k's weights is client k's own. One SGD optimizer over the
grouped weights is K independent SGDs (every update is element-wise).

Every client keeps its own data order (its own generator, as :func:`~ofl_core.clients.train_local`
draws it), initial weights, momentum, step count and BN mode. At each *tick* every client still
training takes its next step; clients whose next batch is smaller (an epoch's last batch) step in
a second pass, and the clients not stepping in a pass are restored afterwards (weights, momentum,
BN statistics), so no client's arithmetic sees padding or another client's data. A client that
has finished all its epochs leaves and the others are regrouped. Results equal one-at-a-time
training up to float rounding (tests/test_grouped_training.py).

Supported: the ``conv`` Sequential + ``fc`` networks (``cnn_mnist``, ``cnn_cifar``,
``cnn_cifar100``) with SGD; :func:`groupable` says when, and the caller falls back otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .augment import random_crop_flip
from .clients import LocalTrainConfig, init_model, ldam_loss
from .devices import to_device
from .models.cnn import CNNCifar, CNNMnist
from .precision import resolve_amp
from .seeds import init_seed

State = dict[str, torch.Tensor]
_GROUPABLE = (CNNMnist, CNNCifar)


def groupable(cfg: LocalTrainConfig, n_clients: int) -> bool:
    """Whether :func:`train_grouped` can train these clients (else train one at a time): SGD
    clients of a groupable CNN sharing one initialisation (``cfg.shared_init``) on raw [0, 1]
    inputs (``cfg.input_norm == "none"``: the grouped forward does not normalise)."""
    probe = init_model(cfg.arch, 10, 1 if cfg.arch == "cnn_mnist" else 3,
                       28 if cfg.arch == "cnn_mnist" else 32, 0, **dict(cfg.model_kwargs))
    return (n_clients >= 2 and type(probe) in _GROUPABLE and cfg.optimizer == "sgd"
            and cfg.shared_init and cfg.input_norm == "none")


class GroupedBatchNorm(nn.BatchNorm2d):
    """BatchNorm over K clients' channel blocks; clients in ``frozen`` use (and keep) their
    running statistics, as a model in eval mode does (⚑ DENSE's BN-eval after epoch 1)."""

    def __init__(self, k: int, c: int, eps: float, momentum: float | None) -> None:
        super().__init__(k * c, eps=eps, momentum=momentum)
        self.k, self.c = k, c
        self.frozen = [False] * k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not any(self.frozen):
            return super().forward(x)
        mask = to_device(torch.tensor(self.frozen).repeat_interleave(self.c), x.device)
        mean, var = self.running_mean.clone(), self.running_var.clone()
        new_mean, new_var = mean.clone(), var.clone()  # updated by the training-mode pass
        live = F.batch_norm(x, new_mean, new_var, self.weight, self.bias, True,
                            self.momentum, self.eps)
        with torch.no_grad():
            self.running_mean.copy_(torch.where(mask, mean, new_mean))
            self.running_var.copy_(torch.where(mask, var, new_var))
        fixed = F.batch_norm(x, mean, var, self.weight, self.bias, False, 0.0, self.eps)
        return torch.where(mask.view(1, -1, 1, 1), fixed, live)


class GroupedCNN(nn.Module):
    """K ``conv`` + ``fc`` classifiers as one network: input ``(B, K·C_in, H, W)`` (client k's
    batch in channel block k), output ``(K, B, num_classes)``."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        k = self.k = len(models)
        layers: list[nn.Module] = []
        for i, m in enumerate(models[0].conv):
            parts = [mm.conv[i] for mm in models]
            if isinstance(m, nn.Conv2d):
                g = nn.Conv2d(m.in_channels * k, m.out_channels * k, m.kernel_size, m.stride,
                              m.padding, m.dilation, groups=k * m.groups, bias=m.bias is not None)
                g.weight = nn.Parameter(torch.cat([p.weight.detach() for p in parts]).clone())
                if m.bias is not None:
                    g.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]).clone())
            elif isinstance(m, nn.BatchNorm2d):
                g = GroupedBatchNorm(k, m.num_features, m.eps, m.momentum)
                for name in ("weight", "bias", "running_mean", "running_var"):
                    getattr(g, name).data.copy_(torch.cat([getattr(p, name).detach()
                                                           for p in parts]))
            else:
                g = m
            layers.append(g)
        self.conv = nn.Sequential(*layers)
        self.fc_w = nn.Parameter(torch.stack([mm.fc.weight.detach().t() for mm in models]))
        self.fc_b = nn.Parameter(torch.stack([mm.fc.bias.detach() for mm in models])[:, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        h = h.reshape(h.shape[0], self.k, -1).transpose(0, 1)
        return torch.baddbmm(self.fc_b, h, self.fc_w)

    def client_slices(self, j: int) -> list[tuple[torch.Tensor, slice | int]]:
        """Every tensor that holds client ``j``'s state, with client j's part of it."""
        out: list[tuple[torch.Tensor, slice | int]] = []
        for m in self.conv:
            if isinstance(m, nn.Conv2d):
                rows = slice(j * m.out_channels // self.k, (j + 1) * m.out_channels // self.k)
                out += [(m.weight, rows)] + ([(m.bias, rows)] if m.bias is not None else [])
            elif isinstance(m, GroupedBatchNorm):
                rows = slice(j * m.c, (j + 1) * m.c)
                out += [(t, rows) for t in (m.weight, m.bias, m.running_mean, m.running_var)]
        return out + [(self.fc_w, j), (self.fc_b, j)]


@dataclass
class _Client:
    """One client's training position and state between regroupings."""

    x: torch.Tensor
    y: torch.Tensor
    gen: torch.Generator
    counts: torch.Tensor
    state: State
    momentum: dict[str, torch.Tensor] = field(default_factory=dict)
    epoch: int = 0
    step: int = 0
    perm: torch.Tensor | None = None
    bn_steps: int = 0

    def next_batch(self, bs: int) -> torch.Tensor:
        if self.perm is None:
            self.perm = torch.randperm(len(self.y), generator=self.gen)
        return self.perm[self.step * bs:(self.step + 1) * bs]

    def advance(self, steps_per_epoch: int) -> None:
        self.step += 1
        if self.step == steps_per_epoch:
            self.epoch, self.step, self.perm = self.epoch + 1, 0, None


def _plain_names(model: nn.Module) -> list[str]:
    """The plain model's state keys in the order of :meth:`GroupedCNN.client_slices`."""
    names = []
    for i, m in enumerate(model.conv):
        if isinstance(m, nn.Conv2d):
            names += [f"conv.{i}.weight"] + ([f"conv.{i}.bias"] if m.bias is not None else [])
        elif isinstance(m, nn.BatchNorm2d):
            names += [f"conv.{i}.{n}" for n in ("weight", "bias", "running_mean", "running_var")]
    return names + ["fc.weight", "fc.bias"]


def _grouped(clients: Sequence[_Client], template: nn.Module, cfg: LocalTrainConfig,
             device: torch.device) -> tuple[GroupedCNN, torch.optim.SGD]:
    models = []
    for c in clients:
        m = _copy_model(template)
        m.load_state_dict(c.state)
        models.append(m)
    g = GroupedCNN(models).to(device).train()
    if device.type == "cpu":
        g = g.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(g.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                          weight_decay=cfg.weight_decay)
    names = _plain_names(template)
    if cfg.momentum != 0:  # zero buffers: a first step gives 0·μ + d = d, as SGD's own does
        for p in g.parameters():
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
        for j, c in enumerate(clients):
            for (t, sl), name in zip(g.client_slices(j), names, strict=True):
                if name in c.momentum:
                    buf = opt.state[t]["momentum_buffer"]
                    buf[sl] = _to_grouped(name, c.momentum[name])
    return g, opt


def _copy_model(template: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(template)


def _to_plain(name: str, v: torch.Tensor) -> torch.Tensor:
    """A client's slice of a grouped tensor in the plain model's layout."""
    if name == "fc.weight":
        v = v.t()
    elif name == "fc.bias":
        v = v.reshape(-1)
    return v.contiguous().cpu().clone()


def _to_grouped(name: str, v: torch.Tensor) -> torch.Tensor:
    return v.t() if name == "fc.weight" else v.reshape(1, -1) if name == "fc.bias" else v


def _export(g: GroupedCNN, opt: torch.optim.SGD, clients: Sequence[_Client],
            names: list[str]) -> None:
    """Write the grouped state back into each client's plain state and momentum."""
    for j, c in enumerate(clients):
        for (t, sl), name in zip(g.client_slices(j), names, strict=True):
            c.state[name] = _to_plain(name, t.detach()[sl])
            buf = opt.state.get(t, {}).get("momentum_buffer") if isinstance(t, nn.Parameter) \
                else None
            if buf is not None:
                c.momentum[name] = _to_plain(name, buf[sl])
        for key in c.state:
            if key.endswith("num_batches_tracked"):
                c.state[key] = torch.tensor(c.bn_steps, dtype=torch.long)


def _step(g: GroupedCNN, opt: torch.optim.SGD, batches: list[torch.Tensor | None],
          labels: list[torch.Tensor | None], loss_fn: Callable, shape: tuple[int, ...],
          amp: bool = False) -> None:
    """One SGD step of the clients with a batch; the others (None) are left as they were."""
    idle = [j for j, b in enumerate(batches) if b is None]
    saved = []
    for j in idle:
        for t, sl in g.client_slices(j):
            saved.append((t, sl, t.detach()[sl].clone()))
            if isinstance(t, nn.Parameter) and (buf := opt.state.get(t, {})
                                                .get("momentum_buffer")) is not None:
                saved.append((buf, sl, buf[sl].clone()))
    b = next(x.shape[0] for x in batches if x is not None)
    x = torch.cat([xb if xb is not None else torch.zeros(b, *shape) for xb in batches], 1)
    if next(g.parameters()).device.type == "cpu":
        x = x.contiguous(memory_format=torch.channels_last)
    dev = next(g.parameters()).device
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
        logits = g(to_device(x, dev))
    logits = logits.float()
    loss = sum(loss_fn(j, logits[j], labels[j]) for j in range(len(batches))
               if batches[j] is not None)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
    with torch.no_grad():
        for t, sl, v in saved:
            t[sl] = v


def train_grouped(
    data: Sequence[tuple[torch.Tensor, torch.Tensor, int]], cfg: LocalTrainConfig,
    num_classes: int, device: str | torch.device = "cpu", init_from: int = 0,
    on_done: Callable[[int, State], None] | None = None,
) -> list[State]:
    """Train clients ``data = [(x_k, y_k, seed_k), ...]`` (uint8 images, labels, data-order
    seed) of one architecture at once; the same result as ``train_local`` on each, up to float
    rounding. ``on_done(k, state)`` is called as each client finishes (e.g. to cache it)."""
    if not cfg.shared_init:
        raise ValueError("train_grouped starts every client from one shared initialisation; "
                         "train per-client-init clients one at a time (train_local)")
    if cfg.input_norm != "none":
        raise ValueError("train_grouped feeds raw [0, 1] inputs; train clients with an "
                         "input_norm one at a time (train_local)")
    dev = torch.device(device)
    x0 = data[0][0]
    template = init_model(cfg.arch, num_classes, int(x0.shape[1]), int(x0.shape[-1]),
                          init_seed(init_from, cfg.arch), **dict(cfg.model_kwargs))
    names = _plain_names(template)
    shape = tuple(x0.shape[1:])
    clients = [_Client(x, y, torch.Generator().manual_seed(seed),
                       to_device(torch.bincount(y, minlength=num_classes), dev),
                       {k: v.clone() for k, v in template.state_dict().items()})
               for x, y, seed in data]
    steps = [math.ceil(len(c.y) / cfg.batch_size) for c in clients]
    total = [cfg.epochs * s for s in steps]
    done: dict[int, State] = {}

    def loss_of(active: list[int]) -> Callable:
        def loss_fn(j: int, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            if cfg.loss == "ldam":
                return ldam_loss(logits, y, clients[active[j]].counts,
                                 cfg.ldam_max_margin, cfg.ldam_scale)
            return F.cross_entropy(logits, y)
        return loss_fn

    active = [k for k in range(len(clients)) if total[k] > 0]
    for k in range(len(clients)):
        if total[k] == 0:
            done[k] = clients[k].state
    while active:
        g, opt = _grouped([clients[k] for k in active], template, cfg, dev)
        loss_fn = loss_of(active)
        while all(clients[k].epoch * steps[k] + clients[k].step < total[k] for k in active):
            _tick(g, opt, active, clients, steps, cfg, loss_fn, shape, dev)
        _export(g, opt, [clients[k] for k in active], names)
        for k in [k for k in active if clients[k].epoch * steps[k] >= total[k]]:
            done[k] = clients[k].state
            if on_done is not None:
                on_done(k, clients[k].state)
        active = [k for k in active if k not in done]
    return [done[k] for k in range(len(clients))]


def _tick(g: GroupedCNN, opt: torch.optim.SGD, active: list[int], clients: list[_Client],
          steps: list[int], cfg: LocalTrainConfig, loss_fn: Callable, shape: tuple[int, ...],
          dev: torch.device) -> None:
    """Every active client takes its next step (one pass per distinct batch size)."""
    batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    for j, k in enumerate(active):
        c = clients[k]
        frozen = cfg.bn_eval_after_first_epoch and c.epoch >= 1
        for m in g.conv:
            if isinstance(m, GroupedBatchNorm):
                m.frozen[j] = frozen
        idx = c.next_batch(cfg.batch_size)
        xb = c.x[idx].float().div_(255.0)
        if cfg.augment != "none":
            xb = random_crop_flip(xb, crop=cfg.augment == "crop_flip", generator=c.gen)
        batches.append((xb, to_device(c.y[idx], dev)))
        c.bn_steps += 0 if frozen else 1
    for size in sorted({len(b[1]) for b in batches}, reverse=True):
        pick = [j for j, b in enumerate(batches) if len(b[1]) == size]
        _step(g, opt, [batches[j][0] if j in pick else None for j in range(len(active))],
              [batches[j][1] if j in pick else None for j in range(len(active))], loss_fn,
              shape, resolve_amp(cfg.amp, dev))
    for k in active:
        clients[k].advance(steps[k])
