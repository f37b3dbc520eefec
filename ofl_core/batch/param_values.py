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

from collections.abc import Mapping
from typing import Any

from ..presets import split_reading
from ..validation import check_device

SEED_MAX = 2**32 - 1  # NumPy's seed range

#: counts: each value (or each of a list's values) an int ≥ 1, or None (epochs: ≥ 0)
AT_LEAST_ONE = ("num_clients", "fedcvae_num_clients", "fedcvae_clients", "rounds", "num_images",
                "num_samples", "kd_samples", "fedcvae_num_samples", "fedcvae_samples",
                "baseline_test_images", "classes_per_client", "grid_per_class")
#: Dirichlet concentrations and other scales: each value > 0
POSITIVE = ("alpha", "alphas", "fedcvae_alpha", "fedcvae_alphas", "dense_alphas",
            "fedhydra_alphas", "fig8_alphas", "security_alpha", "mean_scale")
#: fractions of a training set: each value in (0, 1]
FRACTIONS = ("subsets", "fedcvae_subset")
SEEDS = ("seeds", "seed", "partition_seed", "partition_seeds", "fedcvae_seed",
         "fedcvae_partition_seed")
#: lists a task cannot run without (an empty list of α or methods skips that part on purpose)
NON_EMPTY = ("seeds",)
#: method-name lists → the preset list the notebook runs them under (None: the paper's)
METHOD_LISTS: dict[str, str | None] = {
    "methods": "presets", "fedcvae_methods": "presets", "dense_methods": None,
    "fedhydra_methods": None, "fig3_methods": None, "fig9_methods": None,
    "noise_methods": "noise_presets", "t6_methods": "t6_presets", "grid_methods": None,
    "t7_methods": "t7_presets"}
PRESET_LISTS = ("presets", "baseline_presets", "noise_presets", "t6_presets", "t7_presets")
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
        elif name in FRACTIONS and not 0 < v <= 1:
            raise ValueError(f"must be a fraction in (0, 1], got {v}")
        elif name in SEEDS and not 0 <= v <= SEED_MAX:
            raise ValueError(f"seeds must be in 0 … 2**32 - 1 (NumPy's range), got {v}")


def _check_names(name: str, value: Any) -> None:
    """Method, preset, dataset and model names (imports the registries: torch)."""
    if name in METHOD_LISTS:
        from ..registry import METHODS

        bad = [m for m in _each(value) if m not in METHODS]
        if bad:
            raise ValueError(f"unknown method(s) {bad}; choose from: {', '.join(METHODS)}")
    elif name in PRESET_LISTS:
        for label in _each(value):
            split_reading(label)
    elif name == "method_presets":
        for labels in value.values():
            for label in _each(labels):
                split_reading(label)
    elif name in DATASETS:
        from ..data.datasets import DATASET_NAMES

        bad = [d for d in _each(value) if d not in DATASET_NAMES]
        if bad:
            raise ValueError(f"unknown dataset(s) {bad}; choose from: {', '.join(DATASET_NAMES)}")
    elif name in ARCHS:
        from ..models.registry import MODEL_NAMES

        bad = [a for a in _each(value) if a not in MODEL_NAMES]
        if bad:
            raise ValueError(f"unknown model(s) {bad}; choose from: {', '.join(MODEL_NAMES)}")


_NAMED = (*METHOD_LISTS, *PRESET_LISTS, "method_presets", *DATASETS, *ARCHS)
_CONFIGS = ("server", "local_options", "method_presets", *METHOD_LISTS, *PRESET_LISTS)


def _check_configs(notebook: str, effective: Mapping[str, Any]) -> None:
    """Build the method configs (each method list under its presets, the ``server`` sizes as
    common fields) and ``LocalTrainConfig`` the way the notebooks do, without data."""
    from ..experiment import configure_methods
    from ..tables import server_settings

    common = server_settings(effective.get("server"))
    every = [m for lst in METHOD_LISTS for m in _each(effective.get(lst)) if lst in effective]
    try:
        configure_methods(list(dict.fromkeys(every)), ["paper"], common=common)
    except ValueError as e:
        raise ValueError(f"{notebook}: parameter 'server': {e}") from None
    for lst, presets in METHOD_LISTS.items():
        if lst not in effective or presets not in effective:
            continue
        labels = [*_each(effective[presets]), *(_each(effective.get("baseline_presets"))
                                                if lst == "fedcvae_methods" else [])]
        try:
            configure_methods(_each(effective[lst]), labels or ["paper"], common=common,
                              method_presets=(effective.get("method_presets")
                                              if lst == "methods" else None))
        except ValueError as e:
            raise ValueError(f"{notebook}: parameters {lst!r} under {presets!r}: {e}") from None
    if "local_options" in effective:
        from ..clients import LocalTrainConfig

        try:
            LocalTrainConfig(arch=effective.get("arch", "cnn_mnist"),
                             epochs=effective.get("local_epochs", 1),
                             **effective["local_options"])
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
            _check_names(name, value)
        except ValueError as e:
            raise ValueError(f"{notebook}: parameter {name!r} {e}"
                             if str(e).startswith("is empty") else
                             f"{notebook}: parameter {name!r}: {e}") from None
    if any(k in given for k in _CONFIGS):
        _check_configs(notebook, effective)

