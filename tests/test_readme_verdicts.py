"""The README's verdict per paper table: counted as the report's summary counts, per table, and
current with the records shipped in results/."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ofl_core.batch.report import RESULTS_DIR
from ofl_core.batch.scoreboard import (
    DATASET_NAMES,
    dataset_summaries,
    entries,
    split,
    table_summaries,
)
from ofl_core.batch.verdicts import shipped_entries, verdicts_markdown, write_readme
from ofl_core.readme import replace_block
from ofl_core.results import paper_results

ROOT = Path(__file__).resolve().parents[1]


def _paper(method: str, alpha: float) -> float:
    pr = paper_results("dense", "T1")
    cell = pr[(pr["dataset"] == "fmnist") & (pr["method"] == method) & (pr["alpha"] == alpha)]
    return float(cell["accuracy"].iloc[0])


def _row(method: str, alpha: float, last: float, seed: int = 1, preset: str = "paper") -> dict:
    return {"experiment": "main_tables", "paper": "dense", "table": "T1", "dataset": "fmnist",
            "partition": "dirichlet", "alpha": alpha, "num_clients": 5, "seed": seed,
            "method": method, "preset": preset, "last_acc": last, "best_acc": last,
            "setting": "", "data_source": "fmnist", "run_id": "r", "notebook": "main_tables",
            "href": None, "paper_scale": True, "scale_reason": "", "scale": "paper",
            "precision": "", "akey": str(alpha), "code_version": ""}


def test_a_tables_row_counts_each_cell_once_by_its_paper_preset() -> None:
    """Three cells of DENSE Table 1: one reproduced (two seeds), one below on one seed whose
    `authors_code` entry reproduces, one above on one seed; no explanations given."""
    fedavg, dense = _paper("fedavg", 0.1), _paper("dense", 0.1)
    rows = [_row("fedavg", 0.1, fedavg + 0.5), _row("fedavg", 0.1, fedavg - 0.5, seed=2),
            _row("dense", 0.1, dense - 10), _row("dense", 0.1, dense, preset="authors_code"),
            _row("fedavg", 0.5, _paper("fedavg", 0.5) + 10)]
    matched, _ = split(pd.DataFrame(rows))
    md = verdicts_markdown(entries(matched)).splitlines()
    n = len(paper_results("dense", "T1").query("dataset == 'fmnist'"))
    assert md[2] == f"| DENSE | Table 1 (FMNIST) | 3 of {n} | 1 | 1 | 1 | 0 of 2 | 1 | 2 |"
    assert md[3].startswith("| **all, FMNIST** |  | 3 of ") and md[3].endswith(
        "| 1 | 1 | 1 | 0 of 2 | 1 | 2 |")
    assert len(md) == 4


@pytest.fixture(scope="module")
def shipped() -> pd.DataFrame:
    return shipped_entries(RESULTS_DIR)


def test_the_tables_add_up_to_the_reports_summary(shipped) -> None:
    per_table = table_summaries(shipped)
    assert per_table, "the shipped records judge no paper table"
    for name, s in dataset_summaries(shipped):
        mine = [t for _, _, d, t in per_table if DATASET_NAMES.get(d, d) == name]
        assert sum(t.paper_scale for t in mine) == s.paper_scale
        for v in ("reproduced", "above", "below"):
            assert sum(t.verdicts[v] for t in mine) == s.verdicts[v]
        assert sum(t.explained for t in mine) == s.explained
        assert sum(t.one_seed for t in mine) == s.one_seed


def test_the_readme_shows_the_shipped_records_verdicts(shipped, tmp_path) -> None:
    """After a record is shipped, `python -m ofl_core.batch.verdicts` rewrites the table."""
    readme = (ROOT / "README.md").read_text()
    assert verdicts_markdown(shipped) in readme
    copy = tmp_path / "README.md"
    copy.write_text(readme)
    assert not write_readme(copy)  # already current: left as it is
    assert copy.read_text() == readme


def test_a_readme_without_the_markers_is_named() -> None:
    with pytest.raises(ValueError, match="no '<!-- v:start ... <!-- v:end -->' block for the x"):
        replace_block(ROOT / "pyproject.toml", "<!-- v:start", "<!-- v:end -->", "", "the x")
