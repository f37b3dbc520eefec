"""The verdict per paper table, from the records shipped in ``results/``: the README's table of
what reproduces (the same counts as the report's summary, per table), rewritten by
``python -m ofl_core.batch.verdicts`` after a record is shipped; a test checks that the README
holds the current one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ..readme import replace_block
from .report import RESULTS_DIR, shipped_entries
from .scoreboard import DATASET_NAMES, PAPER_NAMES, Summary, dataset_summaries, table_summaries

START, END = "<!-- verdicts:start", "<!-- verdicts:end -->"
HEAD = ("| paper | table | cells at paper scale | ✓ reproduced | ▲ above | ▼ below | "
        "gaps explained | gaps another reading reproduces | on one seed |")


def _row(paper: str, table: str, s: Summary) -> str:
    v = s.verdicts
    gaps = v["above"] + v["below"]
    return (f"| {paper} | {table} | {s.paper_scale} of {s.total} | {v['reproduced']} | "
            f"{v['above']} | {v['below']} | {s.explained} of {gaps} | "
            f"{s.reproduced_by_other_preset} | {s.one_seed} |")


def verdicts_markdown(ent: pd.DataFrame) -> str:
    """One row per paper table and dataset with a cell at paper scale, then one per dataset:
    of the table's cells, how many ran at paper scale and, for each (its ``paper`` preset's
    entry), whether it reproduces, lies above or below the paper, whether a gap has its
    explanation in ``results/gaps.yaml``, whether another reading (the authors' code's, or a
    named one) reproduces it, and how many rest on one seed."""
    lines = [HEAD, "|" + "---|" * 9]
    for paper, table, dataset, s in table_summaries(ent):
        if s.paper_scale:
            name = f"Table {table[1:]} ({DATASET_NAMES.get(dataset, dataset)})"
            lines.append(_row(PAPER_NAMES.get(paper, paper), name, s))
    lines += [_row(f"**all, {name}**", "", s) for name, s in dataset_summaries(ent)
              if s.paper_scale]
    return "\n".join(lines)


def write_readme(path: str | Path, results: Path = RESULTS_DIR) -> bool:
    """Put the verdicts of the records shipped in ``results`` between the README's markers;
    True when it changed."""
    return replace_block(path, START, END, verdicts_markdown(shipped_entries(results)),
                         "the verdicts table")


def main(argv: list[str] | None = None) -> None:
    """``python -m ofl_core.batch.verdicts [README]``: rewrite the README's verdicts table from
    the records shipped in results/."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("readme", nargs="?", default="README.md")
    changed = write_readme(ap.parse_args(argv).readme)
    print("verdicts table updated" if changed else "verdicts table already current")


__all__ = ["verdicts_markdown", "write_readme"]


if __name__ == "__main__":
    main()
