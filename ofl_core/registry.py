"""The server methods by name, collected from their declarations.

Every method module declares ``SPEC = MethodSpec(...)`` (or ``SPECS = (...)`` for a module with
several) once; :data:`METHOD_MODULES` lists those modules, and :data:`METHODS` maps each
method's name to its spec. The taxonomy table, the records' method names and the checks of
mixed architectures derive from the specs. A method defined outside this package is added
with :func:`register`, or by naming its module in ``$OFL_METHODS`` (comma-separated module
names, imported with the built-in ones, so notebook kernels and batch tasks see it too);
``docs/extending.md`` shows both.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Sequence
from typing import Any

import torch

from .cpu_memory import large_blocks_from_heap
from .server import MethodSpec, ServerContext, ServerResult
from .uploads import ClientUpload, check_upload_header

#: the modules that declare the library's methods, in the taxonomy's order
METHOD_MODULES: tuple[str, ...] = (
    "ofl_core.methods.fedavg", "ofl_core.methods.ot_fusion", "ofl_core.fedlpa.server",
    "ofl_core.methods.fedoneshot",
    "ofl_core.methods.ensemble", "ofl_core.methods.feddf", "ofl_core.methods.dafl",
    "ofl_core.methods.adi", "ofl_core.dense.server", "ofl_core.fedhydra.server",
    "ofl_core.coboosting.server", "ofl_core.intactofl.server", "ofl_core.fedcvae.server",
)


def _declared(module: str) -> tuple[MethodSpec, ...]:
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"method module {module!r} (from ofl_core.registry.METHOD_MODULES or "
                          f"${ENV}) cannot be imported: {e}") from e
    specs = getattr(mod, "SPECS", None) or (getattr(mod, "SPEC", None),)
    if not all(isinstance(s, MethodSpec) for s in specs):
        raise TypeError(f"{module} declares no MethodSpec: give it SPEC = MethodSpec(...)")
    return tuple(specs)


#: the environment variable naming extra method modules (a user's own, outside this package)
ENV = "OFL_METHODS"

#: method name → its declaration
METHODS: dict[str, MethodSpec] = {}


def load(modules: Sequence[str]) -> list[MethodSpec]:
    """Import ``modules`` and register the methods each declares (``SPEC`` or ``SPECS``)."""
    specs = [s for m in modules for s in _declared(m)]
    for s in specs:
        register(s)
    return specs


def register(spec: MethodSpec, *, replace: bool = False) -> MethodSpec:
    """Add a method declared outside :data:`METHOD_MODULES` (a user's own module) under
    ``spec.name``; from then on it runs everywhere a built-in method does. ``replace=True``
    lets a name be registered again (e.g. when a notebook cell is re-run)."""
    if not isinstance(spec, MethodSpec):
        raise TypeError(f"register() takes a MethodSpec, got {type(spec).__name__}")
    if spec.name in METHODS and not replace and METHODS[spec.name] is not spec:
        raise ValueError(f"a method named {spec.name!r} is already registered; pick another "
                         "name or pass replace=True")
    METHODS[spec.name] = spec
    return spec


def method_spec(name: str) -> MethodSpec:
    """The declaration of method ``name``, or a clear error naming the known methods."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)}")
    return METHODS[name]


def method_config(name: str, preset: str = "paper", **overrides: Any) -> Any:
    """The config of method ``name`` for ``preset``, with field overrides."""
    cfg = method_spec(name).config.for_preset(preset)
    fields = {f.name for f in dataclasses.fields(cfg)}
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ValueError(f"{name}: unknown config field(s) {bad}; fields: {sorted(fields)}")
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


def record_name(name: str, cfg: Any) -> str:
    """The method name a run's records carry: the registry's ``name``, or the variant the
    config names (DENSE Table 6's ablations, a ``label``) where it names one."""
    variant = getattr(cfg, "method_name", None)
    return variant if isinstance(variant, str) and variant else name


def run_method(name: str, uploads: list, cfg: Any, ctx: ServerContext) -> ServerResult:
    """Run server method ``name``; on the CPU inside
    :func:`~ofl_core.cpu_memory.large_blocks_from_heap` (same values, fewer page faults). The
    result's method name is :func:`record_name`'s, whatever the method's own code wrote."""
    spec = method_spec(name)
    if not isinstance(cfg, spec.config):
        raise TypeError(f"{name} needs a {spec.config.__name__} (method_config({name!r}, "
                        f"preset)), got {type(cfg).__name__}")
    bad = [type(u).__name__ for u in uploads if not isinstance(u, ClientUpload)]
    if bad:
        raise TypeError(f"{name}: uploads must be ofl_core.uploads.ClientUpload objects, got "
                        f"{sorted(set(bad))}")
    for u in uploads:  # untrusted: the header against the task, before any model is built
        check_upload_header(u, ctx.num_classes, ctx.in_channels, ctx.image_size)
    with large_blocks_from_heap(enabled=torch.device(ctx.device).type == "cpu"):
        result = spec.run(uploads, cfg, ctx)
    result.method = record_name(name, cfg)
    return result


load(METHOD_MODULES + tuple(m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()))


__all__ = ["ENV", "METHODS", "METHOD_MODULES", "load", "method_config", "method_spec",
           "record_name", "register", "run_method"]
