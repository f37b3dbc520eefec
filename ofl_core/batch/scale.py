"""The scale of a run: at the papers' settings (a task of ``notebooks/grids/full``) or reduced.

A run is at paper scale when every parameter it runs with (its *effective* parameters,
defaults included) agrees with one task of the full grid for its notebook: the same value, or
for a list (seeds, α, methods) a part of the full task's list — possibly none of it (an empty
list runs none of that part: ``partition_seeds: []`` makes a FedCVAE Table 2 run without its
Table 5 runs, each record still at the paper's settings). Where the run is,
and which seeds it uses, never change its scale (``device``, ``data_root``, ``cache_dir``,
``seeds``). Anything else — the quick defaults, the embedded data, fewer epochs — is reduced
scale, and the report names the first differences.

In ``main_tables`` a ``server`` size counts only where a method the run runs has it
(:func:`relevant_sizes`): the notebook's default ``server`` is part of every run's parameters,
also of the FedCVAE-only runs that never read it, and FedLPA's ``newton_steps`` is FedLPA's
alone.

Runs made before the notebooks' server sizes became one ``server`` parameter keep the old
names (:data:`LEGACY_SERVER_SIZES`); :func:`current_names` reads them as today's ``server``, so
shipped records keep their scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..presets import reading_preset

#: parameters that say where or with which seeds a run is, not at what scale; ``method_presets``
#: picks the presets a method runs under (a preset or reading never changes a size)
NOT_SCALE = frozenset({"device", "data_root", "cache_dir", "figures_dir", "seeds",
                       "method_presets"})


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


#: notebooks whose ``server`` configures exactly the methods that one of their parameters lists
#: (``main_tables``: ``configure_methods(methods, common=server_settings(server))``, its FedCVAE
#: methods configured without it); elsewhere every ``server`` size counts
SERVER_CONFIGURES = {"main_tables": "methods"}


def _fields(methods: Sequence[str]) -> set[str] | None:
    """The config fields of ``methods``; None when one of them is not a registered method."""
    from ..registry import METHODS  # the methods' modules import torch: only when needed

    if any(m not in METHODS for m in methods):
        return None
    return {f.name for m in methods for f in dataclasses.fields(METHODS[m].config)}


def relevant_sizes(params: Mapping[str, object], notebook: str | None = None) -> dict:
    """``params`` with the ``server`` sizes that no method of the run reads left out, in a
    notebook of :data:`SERVER_CONFIGURES` (e.g. FedLPA's ``newton_steps`` in a run without
    FedLPA, or any size in a ``main_tables`` run of FedCVAE's methods alone)."""
    server, key = params.get("server"), SERVER_CONFIGURES.get(notebook or "")
    methods = params.get(key) if key else None
    if not isinstance(server, dict) or not isinstance(methods, list):
        return dict(params)
    fields = _fields(methods)
    if fields is None:
        return dict(params)
    return {**params, "server": {k: v for k, v in server.items() if k in fields}}


def run_scale(params: dict, references: Sequence[dict], quick: bool = False,
              notebook: str | None = None) -> Scale:
    """The scale of a run of ``notebook`` with effective ``params`` against the effective
    parameters of the notebook's full-grid tasks (``references``). ``quick``: the run is the
    notebook's defaults."""
    best: tuple[list[str], dict] | None = None
    params = relevant_sizes(params, notebook)
    for ref in references:
        ref = relevant_sizes(ref, notebook)
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
