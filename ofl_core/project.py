"""Where the project's data files are: the notebooks with their grids (``notebooks/``) and the
shipped results (``results/``), both in a checkout of the repository, not in the package.

One setting finds them: ``$OFL_PROJECT_DIR``, the checkout's root. Unset, the checkout is the
folder above this package when that holds ``notebooks/`` (an editable install, or the package
imported from a checkout), else the current folder or the nearest of its parents that holds
``notebooks/`` and ``results/`` (a plain ``pip install .`` run from inside a checkout).
``run_all.py`` sets it to its own folder, so the batch runner works from any install.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "OFL_PROJECT_DIR"
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def _is_checkout(path: Path) -> bool:
    return (path / "notebooks").is_dir() and (path / "results").is_dir()


def project_dir() -> Path:
    """The checkout's root (see the module's docstring for the order it is looked up in); a
    clear error when none is found."""
    env = os.environ.get(ENV)
    if env:
        root = Path(env).expanduser().resolve()
        if not (root / "notebooks").is_dir():
            raise FileNotFoundError(f"${ENV}={env} has no notebooks/ folder; set it to the root "
                                    "of a checkout of the ofl repository")
        return root
    if (_PACKAGE_PARENT / "notebooks").is_dir():
        return _PACKAGE_PARENT
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if _is_checkout(folder):
            return folder
    raise FileNotFoundError(f"the ofl notebooks and results were not found: run from a checkout "
                            f"of the repository or set ${ENV} to its root")


def notebook_dir() -> Path:
    """``notebooks/`` of the checkout (the parameterized notebooks and ``grids/``)."""
    return project_dir() / "notebooks"


def results_dir() -> Path:
    """``results/`` of the checkout (shipped records, ``gaps.yaml``, grids of shipped runs)."""
    return project_dir() / "results"


__all__ = ["ENV", "notebook_dir", "project_dir", "results_dir"]
