"""What every config shares: the two presets (the paper's text, or ⚑ the authors' public code).
The typed checks of every field are :func:`ofl_core.validation.check_config`."""

from __future__ import annotations

PRESETS = ("paper", "authors_code")


def check_preset(preset: str) -> None:
    """Raise a clear error for an unknown preset name."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS} (got {preset!r})")
