"""Re-make the executed reference notebooks that nbval checks (tests/reference/*.ipynb).

Each notebook is executed with papermill at tiny parameters (main_tables with FedAvg only:
``REFERENCE_OVERRIDES``); nbval later re-runs it and compares the cells marked
``# NBVAL_CHECK_OUTPUT`` (rounded, deterministic summaries) with these outputs.

    TQDM_DISABLE=1 python scripts/make_reference_notebooks.py
"""

from __future__ import annotations

import os
from pathlib import Path

import papermill

from ofl_core.batch.tasks import load_grid

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "reference"

#: notebooks with reference copies; their parameters are the tiny grid's
#: (notebooks/grids/tiny/<nb>.yaml); figures go to a git-ignored folder beside the references
REFERENCE_NOTEBOOKS = ("partitions", "main_tables")
#: changes to the tiny grid's parameters: main_tables' checked cell (the paper's Table 1 cells)
#: does not depend on the runs, and the smoke test (tests/test_notebooks.py) runs every method
#: at the tiny settings, so its reference runs only FedAvg: each table still gets our rows
REFERENCE_OVERRIDES = {
    "main_tables": {"methods": ["fedavg"], "fedcvae_methods": ["fedavg"],
                    "baseline_presets": ["paper"]},
}


def main() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    tiny = {t.notebook: t.parameters for t in load_grid(ROOT / "notebooks" / "grids" / "tiny")}
    for nb in REFERENCE_NOTEBOOKS:
        params = {**tiny[nb], **REFERENCE_OVERRIDES.get(nb, {})}
        out = REF / f"{nb}.ipynb"
        papermill.execute_notebook(
            str(ROOT / "notebooks" / f"{nb}.ipynb"), str(out),
            parameters={**params, "figures_dir": f"_figures/{nb}"},
            cwd=str(REF), progress_bar=False,
        )
        print("wrote", out.relative_to(ROOT))


if __name__ == "__main__":
    main()
