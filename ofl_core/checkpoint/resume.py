"""A server run's checkpoint: where it lives, when it is written, how a run resumes from it.

:func:`server_checkpoint` gives the :class:`ServerCheckpoint` of one run (None when
checkpointing is off). A server loop declares its state as named pieces
(:mod:`ofl_core.checkpoint.state`), calls :meth:`ServerCheckpoint.resume` before its first
epoch (the epochs already done come back) and :meth:`ServerCheckpoint.save_due` after each
epoch. Results computed once before the epochs (FedHydra's stratification) can be kept in the
checkpoint with :meth:`ServerCheckpoint.stage`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..server import ServerContext
from .key import server_payload
from .state import CheckpointMismatch, Stateful, capture, restore
from .store import CheckpointFile

T = TypeVar("T")
log = logging.getLogger(__name__)


def checkpoint_dir(cache_dir: str | os.PathLike) -> Path:
    """Where server checkpoints live: ``<cache_dir>/servers``."""
    return Path(cache_dir).expanduser() / "servers"


class ServerCheckpoint:
    """The checkpoint of one run of ``epochs`` epochs, written after every ``every``-th epoch
    and after the last one. Made by :func:`server_checkpoint`, which reads (and validates) an
    existing checkpoint at once."""

    def __init__(self, file: CheckpointFile, every: int, epochs: int) -> None:
        self.file, self.every, self.epochs = file, int(every), int(epochs)
        self.stages: dict[str, Any] = {}
        self.loaded = self._read()

    def _read(self) -> tuple[int, dict[str, Any]] | None:
        got = self.file.read()
        if got is None:
            return None
        epoch, state = got
        if (epoch > self.epochs or set(state) != {"pieces", "stages"}
                or not all(isinstance(state[k], dict) for k in state)):
            self.file.discard(f"not a checkpoint of this run (epoch {epoch} of {self.epochs})")
            return None
        return got

    def stage(self, name: str, compute: Callable[[], T], encode: Callable[[T], Any],
              decode: Callable[[Any], T]) -> T:
        """A result computed before the epochs: ``decode``-d from the checkpoint when it holds
        one, else ``compute()``-d; ``encode``-d into every later checkpoint."""
        saved = self.loaded[1]["stages"].get(name) if self.loaded is not None else None
        if saved is not None:
            try:
                value = decode(saved)
                self.stages[name] = saved
                return value
            except Exception as e:  # noqa: BLE001 - a stage that does not fit: start over
                self.loaded = None
                self.file.discard(f"not a checkpoint of this run ({name}: {e})")
        value = compute()
        self.stages[name] = encode(value)
        return value

    def resume(self, pieces: Mapping[str, Stateful]) -> int:
        """Load the checkpoint into ``pieces``; the number of epochs it had done (0 when there
        is none or it does not fit: then it is removed with a warning, pieces untouched)."""
        if self.loaded is None:
            return 0
        epoch, state = self.loaded
        self.loaded = None
        try:
            restore(pieces, state["pieces"])
        except CheckpointMismatch as e:
            self.file.discard(f"not a checkpoint of this run ({e})")
            return 0
        log.info("resuming after epoch %d of %d from %s", epoch, self.epochs, self.file.path)
        return epoch

    def save_due(self, done: int, pieces: Mapping[str, Stateful]) -> None:
        """After epoch ``done`` (1-based): write the checkpoint when due."""
        if done % self.every == 0 or done == self.epochs:
            self.file.write(done, {"pieces": capture(pieces), "stages": self.stages})


def server_checkpoint(ctx: ServerContext, method: str, uploads: Sequence[Any], cfg: Any,
                      epochs: int, **inputs: Any) -> ServerCheckpoint | None:
    """The checkpoint of a run of ``method`` (its config ``cfg``, ``epochs`` epochs) on
    ``uploads`` in context ``ctx``; ``inputs``: whatever else determines the result (hashed
    into the key). None when checkpointing is off: no ``ctx.cache_dir``,
    ``ctx.checkpoint_every == 0``, or no epochs."""
    if ctx.cache_dir is None or ctx.checkpoint_every <= 0 or epochs <= 0:
        return None
    payload = server_payload(ctx, method, uploads, cfg, inputs)
    return ServerCheckpoint(CheckpointFile(checkpoint_dir(ctx.cache_dir), payload),
                            ctx.checkpoint_every, epochs)


__all__ = ["ServerCheckpoint", "checkpoint_dir", "server_checkpoint"]
