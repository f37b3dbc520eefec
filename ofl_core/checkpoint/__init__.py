"""Server checkpoints: a server run's whole state written to the cache every few epochs, so
that a run killed midway resumes where it stopped, bit-identical on the CPU to an
uninterrupted run (docs/decisions/reliability.md#checkpoints).

- :mod:`.state`: what is saved (named pieces with ``state_dict``/``load_state_dict``; RNG
  adapters), captured without drawing from any RNG and restored all-or-nothing;
- :mod:`.key`: what the checkpoint is keyed on (content hashes of the uploads, the config,
  the seed and every other input);
- :mod:`.store`: the file (atomic write, file lock, checksum, ``weights_only`` loading);
- :mod:`.resume`: :func:`server_checkpoint` and :class:`ServerCheckpoint`, which the server
  loops use (:class:`~ofl_core.distill.loop.DistillRun`, FedCVAE's trainings).
"""

from .key import digest, server_payload
from .resume import ServerCheckpoint, checkpoint_dir, server_checkpoint
from .state import (
    RNG,
    Attrs,
    CheckpointMismatch,
    EpochClock,
    GlobalRNG,
    Items,
    Stateful,
    capture,
    restore,
)
from .store import CHECKPOINT_FORMAT, CheckpointFile

__all__ = ["CHECKPOINT_FORMAT", "RNG", "Attrs", "CheckpointFile", "CheckpointMismatch",
           "EpochClock",
           "GlobalRNG", "Items", "ServerCheckpoint", "Stateful", "capture", "checkpoint_dir",
           "digest", "restore", "server_checkpoint", "server_payload"]
