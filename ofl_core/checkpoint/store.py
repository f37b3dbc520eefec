"""One server checkpoint on disk: ``<root>/<key>.ckpt``, written atomically, read back
validated.

The file is a ``torch.save`` of ``{"format", "meta", "epoch", "sha256", "state"}``: ``meta``
is the canonical JSON of the key's payload (a file written for another key is refused even if
its name matched), ``state`` the run's state serialised by ``torch.save`` as a uint8 tensor
and ``sha256`` that tensor's digest, so that a flipped byte in any tensor is caught (torch's
own loader does not check). Both levels are read with ``weights_only=True``. Reading and
writing hold the key's file lock (:func:`ofl_core.upload_cache.file_lock`), so a reader that
discards a bad file never removes a good one a concurrent writer just put there.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import torch

from ..upload_cache import file_lock, payload_key, remove_stale_temps, save_file, unreadable

#: bump when the layout of a checkpoint (or of a method's state in it) changes
CHECKPOINT_FORMAT = 1


class BadFile(ValueError):
    """A checkpoint file that is whole but not a valid checkpoint of this key."""


class CheckpointFile:
    """The checkpoint of one key: ``payload`` (a JSON-able dict) names everything that
    determines the run, hashed into the file name and stored in full inside the file."""

    def __init__(self, root: str | os.PathLike, payload: dict) -> None:
        self.root = Path(root).expanduser()
        full = {"checkpoint_format": CHECKPOINT_FORMAT, **payload}
        self.key = payload_key(full)
        self.meta = json.dumps(full, sort_keys=True, default=str)
        self.path = self.root / f"{self.key}.ckpt"

    def read(self) -> tuple[int, dict[str, Any]] | None:
        """``(epochs done, state)``, or None when there is no valid checkpoint; an invalid one
        (unreadable, truncated, checksum mismatch, another key's) is removed with a warning."""
        with self.lock():
            if not self.path.is_file():
                return None
            try:
                return self.unpack(torch.load(self.path, map_location="cpu", weights_only=True))
            except Exception as e:  # noqa: BLE001 - any unreadable file means: start over
                self.discard(str(e) if isinstance(e, BadFile) else unreadable(e))
                return None

    def unpack(self, obj: object) -> tuple[int, dict[str, Any]]:
        """Check the outer record and the checksum, then load the state (:class:`BadFile`
        if it is not this key's checkpoint)."""
        return unpack_checkpoint(obj, self.meta)

    def write(self, epoch: int, state: dict[str, Any]) -> bool:
        """Write atomically (temp file + ``os.replace``); a failed write (disk full, read-only
        cache) warns, leaves no temp file and keeps the previous checkpoint: the run goes on."""
        tmp = self.root / f".{self.key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            buf = io.BytesIO()
            torch.save(state, buf)
            blob = torch.frombuffer(buf.getbuffer(), dtype=torch.uint8)
            record = {"format": CHECKPOINT_FORMAT, "meta": self.meta, "epoch": int(epoch),
                      "sha256": hashlib.sha256(buf.getbuffer()).hexdigest(), "state": blob}
            self.root.mkdir(parents=True, exist_ok=True)
            with self.lock():
                remove_stale_temps(self.root, self.key)  # of writes killed midway
                save_file(record, tmp)
                os.replace(tmp, self.path)
        except (OSError, RuntimeError) as e:  # torch.save wraps some OS errors
            with contextlib.suppress(OSError):  # e.g. the cache "folder" is a file
                tmp.unlink(missing_ok=True)
            warnings.warn(f"could not write the server checkpoint {self.path} ({e}); the run "
                          "goes on without it", stacklevel=3)
            return False
        return True

    def discard(self, problem: str) -> None:
        """Warn that the checkpoint is ``problem`` and remove it (where the cache is writable);
        the run starts over."""
        try:
            with self.lock():  # re-entrant: read() holds it already
                self.path.unlink(missing_ok=True)
            done = "removed"
        except OSError as e:
            done = f"not removed ({e.strerror or e})"
        warnings.warn(f"server checkpoint {self.path} is {problem}: {done}, the run starts "
                      "over", stacklevel=3)

    def lock(self) -> contextlib.AbstractContextManager:
        """The key's file lock (``<key>.lock`` beside the checkpoint); none while the folder
        does not exist (nothing to read, nothing written yet)."""
        if not self.root.is_dir():
            return contextlib.nullcontext()
        return file_lock(self.root / f"{self.key}.lock")




def unpack_checkpoint(obj: object, meta: str | None = None) -> tuple[int, dict[str, Any]]:
    """(epoch, state) of a loaded checkpoint record: the outer record, its format and checksum
    checked, the state loaded with ``weights_only=True`` (:class:`BadFile` otherwise).
    ``meta``: the key's metadata it must carry; None accepts any key's (inspection tools)."""
    if not isinstance(obj, dict) or set(obj) != {"format", "meta", "epoch", "sha256", "state"}:
        raise BadFile("not a server checkpoint")
    if obj["format"] != CHECKPOINT_FORMAT:
        raise BadFile(f"of format {obj['format']!r}, not {CHECKPOINT_FORMAT}")
    if meta is not None and obj["meta"] != meta:
        raise BadFile("for another key (its metadata does not match)")
    blob = obj["state"]
    if not (isinstance(blob, torch.Tensor) and blob.dtype == torch.uint8 and blob.dim() == 1):
        raise BadFile("not a server checkpoint (no state bytes)")
    data = blob.numpy()
    if hashlib.sha256(data).hexdigest() != obj["sha256"]:
        raise BadFile("corrupt (its checksum does not match)")
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    epoch = obj["epoch"]
    if not isinstance(state, dict) or not isinstance(epoch, int) or epoch < 1:
        raise BadFile("not a server checkpoint (no state or epoch)")
    return epoch, state


__all__ = ["CHECKPOINT_FORMAT", "BadFile", "CheckpointFile", "unpack_checkpoint"]
