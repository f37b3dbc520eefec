"""The scale of a run: at the papers' settings (a task of ``notebooks/grids/full``) or reduced.

A run is at paper scale when every parameter it runs with (its *effective* parameters,
defaults included) agrees with one task of the full grid for its notebook: the same value, or
for a list (seeds, α, methods) a part of the full task's list — possibly none of it (an empty
list runs none of that part: ``partition_seeds: []`` makes a FedCVAE Table 2 run without its
Table 5 runs, each record still at the paper's settings). Where the run is,
and which seeds it uses, never change its scale (``device``, ``data_root``, ``cache_dir``,
``seeds``). Anything else — the quick defaults, the embedded data, fewer epochs — is reduced
scale, and the report names the first differences.

A size in ``server`` that is a config field of one method alone (FedLPA's ``newton_steps``)
counts only where the run runs that method (:func:`relevant_sizes`): a notebook's default
``server`` is part of every run's parameters, also of the runs that never read it.

Runs made before the notebooks' server sizes became one ``server`` parameter keep the old
names (:data:`LEGACY_SERVER_SIZES`); :func:`current_names` reads them as today's ``server``, so
shipped records keep their scale.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..presets import reading_preset

#: parameters that say where or with which seeds a run is, not at what scale
NOT_SCALE = frozenset({"device", "data_root", "cache_dir", "figures_dir", "seeds"})


#: the notebooks' server sizes as they were named before ``server`` held them: old parameter →
#: key of ``server`` (the methods' config field)
LEGACY_SERVER_SIZES = {"server_epochs": "epochs", "steps_per_epoch": "steps_per_epoch",
                       "batch_size": "batch_size", "ngf": "ngf", "strat_steps": "strat_steps",
                       "strat_batch_size": "strat_batch_size"}


def current_names(params: Mapping[str, object]) -> dict:
    """``params`` of a run with any :data:`LEGACY_SERVER_SIZES` folded into ``server`` (a
    ``None``, each method's paper default, left out as today's ``server`` leaves it out)."""
    if not LEGACY_SERVER_SIZES.keys() & params.keys():
        return dict(params)
    out = {k: v for k, v in params.items() if k not in LEGACY_SERVER_SIZES}
    server = _set_sizes({LEGACY_SERVER_SIZES[k]: v for k, v in params.items()
                         if k in LEGACY_SERVER_SIZES})
    given = out.get("server")
    out["server"] = {**server, **(given if isinstance(given, dict) else {})}
    return out


def _set_sizes(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


@dataclass(frozen=True)
class Scale:
    """``paper``: at the papers' settings; else ``reason`` names what differs."""

    paper: bool
    reason: str = ""
    quick: bool = False

    @property
    def label(self) -> str:
        return "paper scale" if self.paper else "reduced scale"

    @property
    def short(self) -> str:
        """``paper``, ``quick`` (the notebook's defaults) or ``reduced``."""
        return "paper" if self.paper else "quick" if self.quick else "reduced"


#: parameters whose values may be readings (``"paper+kd_data=pool"``): a reading runs at the
#: scale of its preset, since it cannot change a size (:data:`ofl_core.presets.SIZE_FIELDS`)
READING_LISTS = frozenset({"presets", "baseline_presets"})


def _agrees(value: object, ref: object, key: str = "") -> bool:
    if key in READING_LISTS and isinstance(value, list):
        value = [reading_preset(v) if isinstance(v, str) else v for v in value]
    if isinstance(value, dict) and isinstance(ref, dict):  # ``server``: None = not given
        return _set_sizes(value) == _set_sizes(ref)
    if isinstance(value, list) and isinstance(ref, list):
        return all(v in ref for v in value)
    return value == ref


@functools.cache
def _one_method_fields() -> dict[str, str]:
    """Config fields that one registered method alone has: field → that method."""
    from ..registry import METHODS  # the methods' modules import torch: only when needed

    owners: dict[str, set[str]] = {}
    for name, spec in METHODS.items():
        for f in dataclasses.fields(spec.config):
            owners.setdefault(f.name, set()).add(name)
    return {k: next(iter(v)) for k, v in owners.items() if len(v) == 1}


def _named(params: Mapping[str, object]) -> set[str]:
    """Every string among ``params``' values and their lists (method names among them)."""
    out: set[str] = set()
    for v in params.values():
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, str):
                out.add(x)
    return out


def _runs(method: str, named: set[str]) -> bool:
    """Whether ``method`` or one of its variants (``dense-no-bn``, ``dense+ldam``) is named."""
    return any(n == method or n.startswith((f"{method}-", f"{method}+")) for n in named)


def relevant_sizes(params: Mapping[str, object]) -> dict:
    """``params`` with the ``server`` sizes of methods the run does not run left out: a size
    that is a config field of one method alone counts only where that method runs."""
    server = params.get("server")
    if not isinstance(server, dict):
        return dict(params)
    owned, named = _one_method_fields(), _named(params)
    kept = {k: v for k, v in server.items() if k not in owned or _runs(owned[k], named)}
    return {**params, "server": kept}


def run_scale(params: dict, references: Sequence[dict], quick: bool = False) -> Scale:
    """The scale of a run with effective ``params`` against the effective parameters of its
    notebook's full-grid tasks (``references``). ``quick``: the run is the notebook's defaults."""
    best: tuple[list[str], dict] | None = None
    params = relevant_sizes(params)
    for ref in references:
        ref = relevant_sizes(ref)
        diffs = sorted(k for k in params.keys() | ref.keys()
                       if k not in NOT_SCALE and not _agrees(params.get(k), ref.get(k), k))
        if not diffs:
            return Scale(True)
        if best is None or len(diffs) < len(best[0]):
            best = (diffs, ref)
    if best is None:
        return Scale(False, "its notebook has no paper-scale grid", quick)
    diffs, ref = best
    shown = [f"{k}={params.get(k)!r} (paper {ref.get(k)!r})" for k in diffs[:3]]
    more = f", and {len(diffs) - 3} more" if len(diffs) > 3 else ""
    return Scale(False, ("quick defaults: " if quick else "") + ", ".join(shown) + more, quick)
