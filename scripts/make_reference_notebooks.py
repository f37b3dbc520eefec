"""Re-make the executed reference notebooks that nbval checks (tests/reference/*.ipynb).

Each notebook is executed with papermill at tiny parameters; nbval later re-runs it and compares
the cells marked ``# NBVAL_CHECK_OUTPUT`` (rounded, deterministic summaries) with these outputs.

    TQDM_DISABLE=1 python scripts/make_reference_notebooks.py
"""

from __future__ import annotations

import os
from pathlib import Path

import papermill

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "reference"

#: notebook -> tiny parameters (figures go to a git-ignored folder beside the references)
TINY = {
    "partitions": {"alphas": [0.1, 0.5], "fedcvae_alphas": [0.01]},
    "main_tables": {"local_epochs": 1},
}


def main() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    for nb, params in TINY.items():
        out = REF / f"{nb}.ipynb"
        papermill.execute_notebook(
            str(ROOT / "notebooks" / f"{nb}.ipynb"), str(out),
            parameters={**params, "figures_dir": f"_figures/{nb}"},
            cwd=str(REF), progress_bar=False,
        )
        print("wrote", out.relative_to(ROOT))


if __name__ == "__main__":
    main()
