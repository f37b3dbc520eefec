"""What a server checkpoint is keyed on: content hashes of the run's inputs
(:func:`digest`) gathered into one payload (:func:`server_payload`)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..precision import resolve_amp
from ..server import ServerContext


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(f"D{type(value).__name__}".encode())
        _feed(h, {f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    elif isinstance(value, Mapping):
        h.update(b"{")
        for k in sorted(value, key=str):
            h.update(json.dumps(str(k)).encode())
            _feed(h, value[k])
        h.update(b"}")
    elif isinstance(value, list | tuple):
        h.update(b"[")
        for v in value:
            _feed(h, v)
        h.update(b"]")
    else:
        h.update(json.dumps(value, sort_keys=True, default=str).encode())


def digest(value: Any) -> str | None:
    """A short hash of ``value``'s exact content: tensors by dtype, shape and bytes, nested in
    dicts, lists, tuples and dataclasses (a :class:`~ofl_core.uploads.ClientUpload`, a
    stratification), other values by their JSON; None for None."""
    if value is None:
        return None
    h = hashlib.sha256()
    _feed(h, value)
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def library_digest() -> str:
    """A hash of the library's source (every ``ofl_core/**/*.py``, read once per process): a
    checkpoint written by other code is never resumed, since a changed loss or loop changes
    the result."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def server_payload(ctx: ServerContext, method: str, uploads: Sequence[Any], cfg: Any,
                   inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Everything that determines a server run's result: the method, its whole config, the
    uploads' contents, other inputs (an initial student, a given stratification, the training
    data of a FedCVAE stage; hashed), the seed, the task's shape, the device type, what
    ``ctx.evaluate`` measures (``ctx.eval_key``), the torch version and the library's
    source (:func:`library_digest`)."""
    return {
        "method": method,
        "config": dataclasses.asdict(cfg),
        "uploads": [digest(u) for u in uploads],
        "inputs": {k: digest(v) for k, v in sorted(inputs.items())},
        "seed": int(ctx.seed),
        "task": [ctx.num_classes, ctx.in_channels, ctx.image_size],
        "device": torch.device(ctx.device).type,
        # "auto" means bfloat16 on one machine and float32 on another: the key says which
        "amp": resolve_amp(getattr(cfg, "amp", False), ctx.device),
        "evaluate": ctx.eval_key if ctx.evaluate is not None else None,
        "torch": torch.__version__,
        "code": library_digest(),
    }


__all__ = ["digest", "library_digest", "server_payload"]
