"""Progress bars: ``tqdm.auto`` (widgets in JupyterLab, text in a terminal) that the environment
can silence.

``progress_bar(..., show=False)`` never shows a bar; with ``show=True`` a bar shows unless
``TQDM_DISABLE`` is set (to anything but ``""``, ``0``, ``false`` or ``no``), read when the bar
is made. ``run_all.py`` runs every notebook kernel with ``TQDM_DISABLE=1`` (an executed
notebook keeps no progress bars), and so do the tests. tqdm's own reading of the variable is
not used: it happens once, at import, ``tqdm.notebook`` ignores it, and it reads "0" as true.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm


def disabled_by_environment() -> bool:
    """Whether ``TQDM_DISABLE`` asks for no progress bars."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no")


def progress_bar(iterable: Iterable[Any] | None = None, *, show: bool = True, **kwargs: Any
                 ) -> tqdm:
    """A ``tqdm.auto`` bar over ``iterable`` (or a manual one with ``total=``); hidden when
    ``show`` is false or ``TQDM_DISABLE`` is set."""
    kwargs["disable"] = not show or disabled_by_environment()
    return tqdm(iterable, **kwargs)


__all__ = ["disabled_by_environment", "progress_bar"]
