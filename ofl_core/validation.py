"""Typed checks of every config at construction, driven by the dataclass's type hints.

:func:`check_config` is called from each config's ``__post_init__``: every field must match its
annotation — ``int`` (not a bool), ``float`` (an int is fine; finite, not a bool or a str),
``str``, ``bool``, ``None``, ``Literal[...]``, a path (``os.PathLike``), a dataclass type,
unions of those and tuples of them (a list is accepted for a tuple) — and lie in its range
(:class:`Bound`; for a tuple, each item). The error names the class, the field, what it must
be and what it got, e.g. ``ExperimentConfig.num_clients must be an int ≥ 1, got '5' (str)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .presets import check_preset


@dataclass(frozen=True)
class Bound:
    """A numeric range: ``low``/``high`` (None = unbounded), each end open or closed."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, v: float) -> bool:
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        return self.high is None or (v < self.high if self.high_open else v <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '≥'} {_num(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '≤'} {_num(self.high)}"
        return (f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}"
                f"{')' if self.high_open else ']'}")


def _num(x: float) -> str:
    """A bound as a reader writes it: ``0.5``, ``1e-08``, and a large whole number in full
    (``4,294,967,295``, not ``4.29497e+09``)."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) >= 1e5 else f"{x:g}"


def at_least(low: float) -> Bound:
    return Bound(low=low)


def above(low: float) -> Bound:
    return Bound(low=low, low_open=True)


def within(low: float, high: float, *, low_open: bool = False, high_open: bool = False
           ) -> Bound:
    return Bound(low, high, low_open, high_open)


#: the ranges most fields need
COUNT, NONNEG, POSITIVE = at_least(1), at_least(0), above(0)
#: a seed: NumPy's random generators take 0 … 2**32 - 1
SEED = within(0, 2**32 - 1)


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass's fields (cached per class)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _is_int(v: object) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_bool(v: object) -> bool:
    return isinstance(v, bool) or type(v).__name__ == "bool_"  # numpy's bool too


def matches(tp: Any, v: object, bound: Bound | None = None) -> bool:
    """Whether ``v`` is a value of the annotation ``tp`` (numbers within ``bound``)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(matches(a, v, bound) for a in args)
    if origin is Literal:
        return any(v is a or (type(v) is type(a) and v == a) for a in args)
    if tp is type(None) or tp is None:
        return v is None
    if tp is int:
        return _is_int(v) and (bound is None or bound.holds(v))  # type: ignore[arg-type]
    if tp is float:
        return (isinstance(v, numbers.Real) and not _is_bool(v) and math.isfinite(v)
                and (bound is None or bound.holds(v)))
    if tp is bool:
        return _is_bool(v)
    if tp is str:
        return isinstance(v, str)
    if origin is tuple:
        if isinstance(v, str | bytes) or not isinstance(v, tuple | list):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(args[0], x, bound) for x in v)
        return len(v) == len(args) and all(
            matches(a, x, bound) for a, x in zip(args, v, strict=True))
    if isinstance(origin, type):  # Mapping[str, Any], list[int]: the container only
        return isinstance(v, origin)
    if isinstance(tp, type) and tp is not object:
        return isinstance(v, tp)
    return True  # Any, object: anything


def describe(tp: Any, bound: Bound | None = None, plural: bool = False) -> str:
    """What a value of ``tp`` must be, in words: ``an int ≥ 1``, ``a bool or 'auto'``,
    ``a tuple of 2 finite floats in [0, 1)`` (``plural``: the words for a tuple's items)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    rng = f" {bound}" if bound is not None else ""
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a, bound, plural) for a in args)
    if origin is Literal:
        return repr(args[0]) if len(args) == 1 else f"one of {args!r}"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            what = "tuples" if plural else "a tuple"
            return f"{what} of {describe(args[0], bound, plural=True)}"
        if len(set(args)) == 1:
            return f"a tuple of {len(args)} {describe(args[0], bound, plural=True)}"
        items = ", ".join(describe(a, bound) for a in args)
        return f"({items}) pairs" if plural and len(args) == 2 else f"a tuple ({items})"
    names = {type(None): ("None", "None"), int: ("an int", "ints"),
             float: ("a finite float", "finite floats"), bool: ("a bool", "bools"),
             str: ("a str", "strs"), os.PathLike: ("a path", "paths"),
             object: ("any value", "any values")}
    if tp in names:
        word = names[tp][plural]
        return f"{word}{rng}" if tp in (int, float) else word
    name = getattr(origin or tp, "__name__", str(tp))
    return f"{name} objects" if plural else f"a {name}"


def shown(v: object, limit: int = 80) -> str:
    """``repr(v)``, cut to ``limit`` characters (a bad value can be a large object)."""
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 1] + "…"


def check_config(cfg: Any, ranges: Mapping[str, Bound] | None = None) -> None:
    """Check every field of the dataclass ``cfg`` against its type hint and ``ranges``
    (field → :class:`Bound`; a name the class lacks is ignored, so a base class can give its
    subclasses' ranges); the preset too, when the config has one. Raises ``ValueError`` naming
    the class and the field."""
    cls = type(cfg)
    ranges = ranges or {}
    for name, tp in type_hints(cls).items():
        v = getattr(cfg, name)
        if not matches(tp, v, ranges.get(name)):
            raise ValueError(f"{cls.__name__}.{name} must be {describe(tp, ranges.get(name))}, "
                             f"got {shown(v)} ({type(v).__name__})")
    if hasattr(cfg, "preset"):
        check_preset(cfg.preset)


DEVICES = "cpu, cuda, cuda:N, mps or auto"
_DEVICE = re.compile(r"cpu|cuda|cuda:\d+|mps|auto")


def check_device(device: object, where: str = "device") -> None:
    """A device name: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise ValueError(f"{where} must be one of {DEVICES}, got {shown(device)} "
                         f"({type(device).__name__})")


__all__ = ["COUNT", "DEVICES", "NONNEG", "POSITIVE", "SEED", "Bound", "above", "at_least",
           "check_config", "check_device", "describe", "matches", "shown", "type_hints", "within"]
