"""What a server checkpoint holds: named pieces of a run's state, each with ``state_dict()`` /
``load_state_dict()`` (modules, optimisers, LR schedulers,
:class:`~ofl_core.distill.pool.ImagePool` and :class:`~ofl_core.distill.loop.EvalCurve` have
them), and adapters for what has none: :class:`Attrs` (a method's logs and loop-carried
values), :class:`Items` (a list filled in place), :class:`RNG` (a ``torch.Generator``) and
:class:`GlobalRNG` (torch's global CPU and CUDA generators); :class:`EpochClock` keeps the
seconds a server's epochs took, so that a resumed run counts its earlier parts.

:func:`capture` reads every piece without changing anything (no RNG is drawn);
:func:`restore` loads them all or, when one does not fit, puts every piece back as it was and
raises :class:`CheckpointMismatch`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch


class CheckpointMismatch(ValueError):
    """A checkpoint's state that does not fit the run (corrupt, or from other code)."""


class Stateful(Protocol):
    """Anything a checkpoint can save and load in place."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


def to_device(value: Any, device: torch.device | str | None) -> Any:
    """``value`` with every tensor (in nested lists, tuples, dicts) moved to ``device``."""
    if device is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_device(v, device) for v in value)
    return value


class Attrs:
    """Named attributes of a mutable object (logs, counters, the last batch) as one piece of
    state; on loading, tensors go to ``device`` (where the run keeps them)."""

    def __init__(self, obj: object, names: Sequence[str],
                 device: torch.device | str | None = None) -> None:
        self.obj, self.names, self.device = obj, tuple(names), device

    @classmethod
    def of(cls, obj: object, device: torch.device | str | None = None,
           exclude: Sequence[str] = ()) -> Attrs:
        """Every field of the dataclass instance ``obj`` but ``exclude``."""
        return cls(obj, [f.name for f in dataclasses.fields(obj)  # type: ignore[arg-type]
                         if f.name not in exclude], device)

    def state_dict(self) -> dict[str, Any]:
        return {n: getattr(self.obj, n) for n in self.names}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if set(state) != set(self.names):
            raise CheckpointMismatch(f"fields {sorted(state)}, expected {sorted(self.names)}")
        for n in self.names:
            setattr(self.obj, n, to_device(state[n], self.device))


class Items:
    """A list filled in place (a test curve, a loss history) as one piece of state; on
    loading, tensors go to ``device``."""

    def __init__(self, items: list, device: torch.device | str | None = None) -> None:
        self.items, self.device = items, device

    def state_dict(self) -> list:
        return list(self.items)

    def load_state_dict(self, state: list) -> None:
        if not isinstance(state, list):
            raise CheckpointMismatch(f"a {type(state).__name__}, expected a list")
        self.items[:] = to_device(state, self.device)


class RNG:
    """A ``torch.Generator``'s state (set in place: every holder of the generator sees it)."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"state": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.generator.set_state(state["state"])


class GlobalRNG:
    """torch's global CPU generator, and the CUDA generators when the run is on CUDA (dropout
    and any draw without an explicit generator use them)."""

    def __init__(self, device: torch.device | str) -> None:
        self.cuda = torch.device(device).type == "cuda"

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"cpu": torch.get_rng_state()}
        if self.cuda:
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.cuda != ("cuda" in state):
            raise CheckpointMismatch("saved on another device type")
        torch.set_rng_state(state["cpu"])
        if self.cuda:
            torch.cuda.set_rng_state_all(state["cuda"])


def capture(pieces: Mapping[str, Stateful]) -> dict[str, Any]:
    """Every piece's state, by name (references to live tensors: save them at once)."""
    return {name: piece.state_dict() for name, piece in pieces.items()}


def restore(pieces: Mapping[str, Stateful], state: Mapping[str, Any]) -> None:
    """Load ``state`` into ``pieces``, all or nothing: if one piece refuses its state, every
    piece is put back as it was before the call and :class:`CheckpointMismatch` is raised."""
    if set(state) != set(pieces):
        raise CheckpointMismatch(f"it holds {sorted(state)}, this run has {sorted(pieces)}")
    before = copy.deepcopy(capture(pieces))
    try:
        for name, piece in pieces.items():
            piece.load_state_dict(state[name])
    except Exception as e:  # noqa: BLE001 - whatever the piece raised, the run starts over
        for other, piece in pieces.items():
            piece.load_state_dict(before[other])
        raise CheckpointMismatch(f"{name}: {e}") from e


class EpochClock:
    """The wall seconds of a server's epochs (their evaluation included), kept in its
    checkpoint: ``resumed`` is what the earlier, interrupted parts of a resumed run spent."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.resumed = 0.0

    def state_dict(self) -> dict[str, float]:
        return {"seconds": self.seconds}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.seconds = self.resumed = float(state["seconds"])


__all__ = ["RNG", "Attrs", "CheckpointMismatch", "EpochClock", "GlobalRNG", "Items", "Stateful",
           "capture", "restore", "to_device"]
