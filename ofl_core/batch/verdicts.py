"""The verdict per paper table, from the records shipped in ``results/``: the README's table of
what reproduces (the same counts as the report's summary, per table), rewritten by
``python -m ofl_core.batch.verdicts`` after a record is shipped; a test checks that the README
holds the current one."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from ..readme import replace_block
from .gaps import load_gaps, unused_gaps
from .report import RESULTS_DIR, prepare_runs, shipped_compute, shipped_runs
from .scoreboard import (
    DATASET_NAMES,
    PAPER_NAMES,
    Summary,
    annotated_frame,
    dataset_summaries,
    entries,
    split,
    table_summaries,
)

START, END = "<!-- verdicts:start", "<!-- verdicts:end -->"
HEAD = ("| paper | table | cells at paper scale | ✓ reproduced | ▲ above | ▼ below | "
        "gaps explained | gaps another reading reproduces | on one seed |")


def shipped_entries(results: Path = RESULTS_DIR) -> pd.DataFrame:
    """The scoreboard's entries (:func:`~ofl_core.batch.scoreboard.entries`, one per cell,
    preset and scale) of the records shipped in ``results`` alone, with their gaps'
    explanations: what a report built without runs of its own judges. A file the report would
    list as a problem raises ``ValueError`` here."""
    problems: list[dict] = []
    with tempfile.TemporaryDirectory() as rep:
        runs = prepare_runs(shipped_runs(results, problems), Path(rep), problems,
                            results / "grids", shipped_compute(results, problems))
    gaps = load_gaps(results / "gaps.yaml")
    matched, _ = split(annotated_frame(runs))
    ent = entries(matched, gaps)
    problems += [{"file": "gaps.yaml", "error": e}
                 for e in unused_gaps(gaps, [x.gap for x in ent.get("entry", ())])]
    if problems:
        raise ValueError(f"{results}: " + "; ".join(
            f"{p.get('file') or p.get('run_id')}: {p['error']}" for p in problems))
    return ent


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


__all__ = ["shipped_entries", "verdicts_markdown", "write_readme"]


if __name__ == "__main__":
    main()
