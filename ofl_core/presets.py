"""The two presets every config offers: the paper's text, or ⚑ the authors' public code."""

from __future__ import annotations

PRESETS = ("paper", "authors_code")


def check_preset(preset: str) -> None:
    """Raise a clear error for an unknown preset name."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS} (got {preset!r})")
