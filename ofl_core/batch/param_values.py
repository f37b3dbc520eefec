"""The values a task's parameters must have, checked before any task runs.

:func:`~ofl_core.batch.tasks.check_parameters` checks a grid's parameter names and types against
each notebook's ``parameters`` cell; this module checks their values, by the parameter names
the notebooks share (one name per concept across notebooks): counts at least 1, epochs 0 or more,
Dirichlet concentrations above 0, seeds in NumPy's range, a device name, and — importing the
library's registries, so only where a grid sets such a parameter — the method, preset, dataset
and model names, the ``server`` sizes and ``local_options`` the notebook will build configs
from. A bad value is refused by ``run_all.py`` (``--dry-run`` included) with the parameter's
name, instead of failing inside each task's kernel or, for ``seeds: []``, finishing with no
records.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from ..presets import PRESETS, split_reading
from ..validation import SEED, check_device

#: counts: each value (or each of a list's values) an int ≥ 1, or None (epochs: ≥ 0)
AT_LEAST_ONE = ("num_clients", "fedcvae_num_clients", "fedcvae_clients", "rounds", "num_images",
                "num_samples", "kd_samples", "fedcvae_num_samples", "fedcvae_samples",
                "baseline_test_images", "classes_per_client", "grid_per_class")
#: Dirichlet concentrations and other scales: each value > 0
POSITIVE = ("alpha", "alphas", "fedcvae_alpha", "fedcvae_alphas", "dense_alphas",
            "fedhydra_alphas", "fig8_alphas", "security_alpha", "bounds")
#: each value ≥ 0
NON_NEGATIVE = ("mean_scale", "gammas")
#: fractions of a training set: each value in (0, 1]
FRACTIONS = ("subsets", "fedcvae_subset")
SEEDS = ("seeds", "seed", "partition_seed", "partition_seeds", "fedcvae_seed",
         "fedcvae_partition_seed")
#: lists a task cannot run without (an empty list of α or methods skips that part on purpose)
NON_EMPTY = ("seeds",)
METHOD_LISTS = ("methods", "fedcvae_methods", "dense_methods", "fedhydra_methods",
                "fig3_methods", "fig9_methods", "noise_methods", "t6_methods", "t7_methods",
                "grid_methods")
PRESET_LISTS = ("presets", "baseline_presets", "noise_presets", "t6_presets", "t7_presets")
#: (notebook, preset list) whose sections take a plain preset only, no reading
PLAIN_PRESETS = {("ablations", "presets"), ("cvae_security_shift", "presets"),
                 ("cvae_security_shift", "noise_presets")}
#: the decoder servers Table 6's aggregation grid compares
DECODER_METHODS = ("kd", "param-avg", "fedcvae-kd")
DATASETS = ("dataset", "fedcvae_dataset", "fedcvae_datasets")
ARCHS = ("arch", "dense_archs", "fedhydra_archs", "server_arch")


def _each(value: Any) -> list:
    """A parameter's values: a list's elements, a scalar itself; None (a default) is none."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _check_numbers(name: str, value: Any) -> None:
    for v in _each(value):
        if name in AT_LEAST_ONE and v < 1:
            raise ValueError(f"must be at least 1, got {v}")
        elif name.endswith("epochs") and v < 0:
            raise ValueError(f"must be at least 0 (0 = untrained), got {v}")
        elif name in POSITIVE and not v > 0:
            raise ValueError(f"must be above 0, got {v}")
        elif name in NON_NEGATIVE and not v >= 0:
            raise ValueError(f"must be 0 or more, got {v}")
        elif name in FRACTIONS and not 0 < v <= 1:
            raise ValueError(f"must be a fraction in (0, 1], got {v}")
        elif name in SEEDS and not SEED.holds(v):
            raise ValueError(f"seeds must be in 0 … 2**32 - 1 (NumPy's range), got {v}")


def _check_names(notebook: str, name: str, value: Any) -> None:
    """Method, preset, dataset and model names (imports the registries: torch)."""
    if name in METHOD_LISTS:
        from ..registry import METHODS

        known = DECODER_METHODS if name == "grid_methods" else tuple(METHODS)
        bad = [m for m in _each(value) if m not in known]
        if bad:
            raise ValueError(f"unknown method(s) {bad}; choose from: {', '.join(known)}")
    elif name in PRESET_LISTS:
        for label in _each(value):
            if (notebook, name) in PLAIN_PRESETS and label not in PRESETS:
                raise ValueError(f"a preset, one of {PRESETS}, not a reading (got {label!r})")
            split_reading(label)
    elif name == "method_presets":
        for labels in value.values():
            for label in _each(labels):
                split_reading(label)
    elif name in DATASETS:
        from ..data.datasets import canonical_dataset

        for d in _each(value):
            canonical_dataset(d)
    elif name in ARCHS:
        from ..models.registry import MODEL_NAMES

        bad = [a for a in _each(value) if a not in MODEL_NAMES]
        if bad:
            raise ValueError(f"unknown model(s) {bad}; choose from: {', '.join(MODEL_NAMES)}")


_CONFIGS = ("server", "local_options", "method_presets", *METHOD_LISTS, *PRESET_LISTS)
#: method lists the notebooks configure with the ``server`` sizes, under the paper's preset
#: unless a row of :func:`_configured` says otherwise
SERVER_SIZED = ("methods", "dense_methods", "fedhydra_methods", "fig3_methods", "fig9_methods")


def _configured(p: Mapping[str, Any]) -> list[tuple[tuple[str, ...], list, list, dict | None,
                                                    dict | None, bool]]:
    """What the notebooks build with ``configure_methods``: (the parameters it comes from,
    methods, presets, method_presets, overrides, with the server sizes), as notebooks/*.py
    build them."""
    presets, base = _each(p.get("presets")) or ["paper"], _each(p.get("baseline_presets"))
    out = []
    for lst in SERVER_SIZED:
        if lst in p:
            own = {"fedavg": [*presets, *base], **(p.get("method_presets") or {})} \
                if lst == "methods" and "baseline_presets" in p else p.get("method_presets")
            named = (lst, "presets", "baseline_presets", "method_presets", "server") \
                if lst == "methods" else (lst, "server")
            out.append((named, _each(p[lst]), presets if lst == "methods" else ["paper"],
                        own if lst == "methods" else None, None, True))
    if "fedcvae_methods" in p:  # main_tables, client_scaling, heterogeneous_models
        cvae = [m for m in _each(p["fedcvae_methods"]) if m.startswith("fedcvae")]
        rest = [m for m in _each(p["fedcvae_methods"]) if not m.startswith("fedcvae")]
        out += [(("fedcvae_methods", "presets"), cvae, presets, None, None, False),
                (("fedcvae_methods", "presets", "baseline_presets"), rest, [*presets, *base],
                 None, {"fedavg": {"weighted": True}}, False)]
    if "t7_methods" in p:  # ablations: Tables 6 and 7 configured together
        t6 = ["fedcvae-kd" if m == "kd" else m for m in _each(p.get("t6_methods"))]
        out.append((("t7_methods", "t6_methods", "t7_presets", "t6_presets"),
                    list(dict.fromkeys(_each(p["t7_methods"]) + t6)),
                    list(dict.fromkeys(["paper", *_each(p.get("t7_presets")),
                                        *_each(p.get("t6_presets"))])), None, None, False))
    return out


def _check_configs(notebook: str, effective: Mapping[str, Any]) -> None:
    """Build the method configs and ``LocalTrainConfig`` the way the notebooks do, without
    data; memoised per notebook and parameters (a grid's tasks share most of them)."""
    keep = {k: v for k, v in effective.items() if k in (*_CONFIGS, "arch", "local_epochs")}
    _check_configs_once(notebook, json.dumps(keep, sort_keys=True))


@functools.lru_cache(maxsize=1024)
def _check_configs_once(notebook: str, blob: str) -> None:
    from ..experiment import configure_methods
    from ..tables import server_settings

    p = json.loads(blob)
    common = server_settings(p.get("server"))
    for named, methods, presets, own, overrides, sized in _configured(p):
        try:
            configure_methods(methods, presets, common=common if sized else None,
                              method_presets=own, overrides=overrides)
        except ValueError as e:
            where = " / ".join(repr(n) for n in named if n in p)
            raise ValueError(f"{notebook}: parameters {where}: {e}") from None
    if "local_options" in p:
        from ..clients import LocalTrainConfig

        try:
            LocalTrainConfig(arch=p.get("arch", "cnn_mnist"), epochs=p.get("local_epochs", 1),
                             **p["local_options"])
        except (TypeError, ValueError) as e:
            raise ValueError(f"{notebook}: parameter 'local_options': {e}") from None


def check_values(notebook: str, given: Mapping[str, Any], effective: Mapping[str, Any]) -> None:
    """Refuse bad values among the parameters a task ``given``s (its notebook's defaults are
    right by construction); ``effective`` = defaults overridden by ``given``, for the checks
    that combine parameters (methods under presets, ``server`` sizes)."""
    for name, value in given.items():
        try:
            if name in NON_EMPTY and value == []:
                raise ValueError("is empty: the task would run no experiment; give at least "
                                 "one")
            _check_numbers(name, value)
            if name == "device":
                check_device(value, "the device")
            _check_names(notebook, name, value)
        except ValueError as e:
            raise ValueError(f"{notebook}: parameter {name!r} {e}"
                             if str(e).startswith("is empty") else
                             f"{notebook}: parameter {name!r}: {e}") from None
    if any(k in given for k in _CONFIGS):
        _check_configs(notebook, effective)

