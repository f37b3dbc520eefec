"""What every config shares: the two presets (the paper's text, or ⚑ the authors' public code)
and the checks of its fields, with errors that name the field and say what to change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PRESETS = ("paper", "authors_code")


def check_preset(preset: str) -> None:
    """Raise a clear error for an unknown preset name."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS} (got {preset!r})")


def check_fields(
    cfg: Any, *, at_least: Mapping[str, float] = {}, positive: Sequence[str] = (),
    choices: Mapping[str, Sequence[Any]] = {},
) -> None:
    """Check a config's fields: ``at_least`` {field: minimum}, ``positive`` fields > 0 (NaN
    fails), ``choices`` {field: allowed values}; the preset too, when the config has one."""
    if hasattr(cfg, "preset"):
        check_preset(cfg.preset)
    for name, low in at_least.items():
        if getattr(cfg, name) < low:
            raise ValueError(f"{name} must be ≥ {low:g} (got {getattr(cfg, name)})")
    for name in positive:
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name} must be > 0 (got {getattr(cfg, name)})")
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            raise ValueError(f"{name} must be one of {tuple(allowed)} "
                             f"(got {getattr(cfg, name)!r})")
