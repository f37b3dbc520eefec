"""The cluster executors' optional dependencies (``pip install -e '.[cluster]'``)."""

from __future__ import annotations

from collections.abc import Sequence

INSTALL_HINT = "pip install -e '.[cluster]'"


class MissingDependencyError(ImportError):
    """An executor's optional dependency is not installed (the message says how to get it)."""


def require(modules: Sequence[str], executor: str) -> None:
    """Import ``modules`` or raise :class:`MissingDependencyError` naming the extra."""
    import importlib

    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError:
            raise MissingDependencyError(
                f"--executor {executor} needs the optional package {m!r}: {INSTALL_HINT}"
            ) from None
