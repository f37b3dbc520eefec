"""Content-addressed on-disk cache of trained client uploads.

Key = SHA-256 of a canonical JSON of everything that determines a trained client (dataset
content fingerprint, partition fingerprint, client id, local-training config, seed, initial
state). Files are written atomically (temp file + ``os.replace``), so a crash or Ctrl-C never
leaves a half-written entry under the final name, and read back with ``weights_only=True``. A
corrupt or unreadable entry is treated as missing (and retrained), never trusted.

The cache root is the ``root`` argument, else ``$OFL_CACHE_DIR``, else ``~/.cache/ofl/clients``.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import torch

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    env = os.environ.get("OFL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ofl" / "clients"


def payload_key(payload: dict) -> str:
    """SHA-256 of the canonical JSON of ``payload`` (plus the cache format version)."""
    blob = json.dumps({"format": CACHE_FORMAT, **payload}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def state_hash(state: dict[str, torch.Tensor]) -> str:
    """Hash of a state_dict's exact contents (used when a client starts from a given model)."""
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        t = state[k].detach().cpu().contiguous()
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


class UploadCache:
    """A folder of ``<key>.pt`` files, each a trained client's tensors (dict of tensors)."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        self.hits = 0
        self.misses = 0

    def path(self, payload: dict) -> Path:
        return self.root / f"{payload_key(payload)}.pt"

    def get(self, payload: dict) -> dict[str, torch.Tensor] | None:
        """The cached tensors for ``payload``, or None when absent or unreadable."""
        p = self.path(payload)
        if not p.is_file():
            self.misses += 1
            return None
        try:
            obj = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unreadable file is a miss, not a crash
            warnings.warn(f"ignoring unreadable cache entry {p.name}: {e}", stacklevel=2)
            self.misses += 1
            return None
        self.hits += 1
        return obj["state"]

    def put(self, payload: dict, state: dict[str, torch.Tensor]) -> Path:
        """Write atomically; concurrent writers of the same key both end with a whole file."""
        self.root.mkdir(parents=True, exist_ok=True)
        p = self.path(payload)
        tmp = p.with_name(f".{p.stem}.{os.getpid()}.tmp")
        meta = json.dumps(payload, sort_keys=True, default=str)
        torch.save({"state": state, "meta": meta}, tmp)
        os.replace(tmp, p)
        return p

    def __len__(self) -> int:
        return len(list(self.root.glob("*.pt"))) if self.root.is_dir() else 0
