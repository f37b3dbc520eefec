"""What every config shares: the two presets (the paper's text, or ⚑ the authors' public code),
and *readings*: a preset with named field changes, ``"paper+kd_data=pool+teacher=sa_no_uc"``,
the way a run shows another reading of a paper beside its literal one. The typed checks of
every field are :func:`ofl_core.validation.check_config`."""

from __future__ import annotations

from typing import Any

import yaml

PRESETS = ("paper", "authors_code")

#: fields a reading may not change: how long or how large a server runs is the run's scale
#: (the notebooks' server sizes), not a reading of the method
SIZE_FIELDS = frozenset({
    "epochs", "steps_per_epoch", "batch_size", "kd_batch_size", "strat_steps",
    "strat_batch_size", "ngf", "num_images", "num_samples", "kd_samples", "kd_epochs",
    "classifier_epochs", "dataset", "student_arch", "preset"})


def check_preset(preset: str) -> None:
    """Raise a clear error for an unknown preset name."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS} (got {preset!r})")


def reading_preset(label: str) -> str:
    """The preset a reading label starts from (``"paper+kd_data=pool"`` → ``"paper"``)."""
    return label.split("+", 1)[0]


def split_reading(label: str) -> tuple[str, dict[str, Any]]:
    """A preset or a reading label → (its preset, its field changes). Values are read as YAML
    scalars (``adv_weight=0`` is the number 0, ``adv_mask=true`` a bool, ``kd_data=pool`` a
    string). ``"paper"`` → ``("paper", {})``."""
    base, changes = reading_preset(label), label.split("+")[1:]
    check_preset(base)
    fields: dict[str, Any] = {}
    for change in changes:
        name, eq, value = change.partition("=")
        if not eq or not name.isidentifier() or not value:
            raise ValueError(f"a reading is <preset>+<field>=<value>[+...] (got {label!r}: "
                             f"{change!r} is not <field>=<value>)")
        if name in fields:
            raise ValueError(f"reading {label!r} sets {name} twice")
        if name in SIZE_FIELDS:
            raise ValueError(f"reading {label!r} sets {name}, a size of the run, not a reading "
                             f"of the method: set the run's sizes instead")
        fields[name] = yaml.safe_load(value)
    return base, fields
