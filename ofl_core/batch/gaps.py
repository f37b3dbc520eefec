"""Why a paper-scale cell does not reproduce: the explanations shipped in ``results/gaps.yaml``.

Each entry names one cell of a paper's table (``paper``, ``table``, ``dataset``, ``method``,
``alpha``; ``partition``, ``num_clients`` and ``setting`` where the table has several), and
optionally the ``presets`` it is about (all when left out); ``why`` is the gap's best
explanation in a sentence or two, ``see`` where its evidence is (a section of
docs/decisions.md). The scoreboard prints it under each paper-scale entry of that cell that is
above or below the paper's number, and says so where a gap has no explanation yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..results import alpha_key, paper_results

REQUIRED = ("paper", "table", "dataset", "method", "why")
OPTIONAL = ("alpha", "partition", "num_clients", "setting", "presets", "see")


@dataclass(frozen=True)
class Gap:
    """The explanation of one cell's gap (for some or all of its presets)."""

    paper: str
    table: str
    dataset: str
    method: str
    akey: str  # α as :func:`~ofl_core.results.alpha_key` writes it ('' for none)
    why: str
    see: str = ""
    presets: tuple[str, ...] = ()  # () = every preset
    partition: str | None = None
    num_clients: int | None = None
    setting: str | None = None

    def explains(self, cell: dict, preset: str) -> bool:
        """Whether this is the explanation of ``cell`` (a scoreboard key row) under ``preset``."""
        if (self.paper, self.table, self.dataset, self.method, self.akey) != (
                cell["paper"], cell["table"], cell["dataset"], cell["method"], cell["akey"]):
            return False
        for k in ("partition", "num_clients", "setting"):
            v = getattr(self, k)
            if v is not None and str(v) != str(cell[k]):
                return False
        return not self.presets or preset in self.presets


def _gap(i: int, item: object, where: str) -> Gap:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: entry {i} must be a mapping with keys {', '.join(REQUIRED)}")
    missing = [k for k in REQUIRED if not item.get(k)]
    unknown = sorted(set(item) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise ValueError(f"{where}: entry {i}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"unknown key(s) {', '.join(unknown)} (known: "
                f"{', '.join(REQUIRED + OPTIONAL)})"] if unknown else [])))
    presets = item.get("presets") or ()
    if isinstance(presets, str):
        presets = (presets,)
    return Gap(paper=str(item["paper"]), table=str(item["table"]),
               dataset=str(item["dataset"]), method=str(item["method"]),
               akey=alpha_key(item.get("alpha")), why=" ".join(str(item["why"]).split()),
               see=str(item.get("see") or ""), presets=tuple(str(p) for p in presets),
               partition=item.get("partition"), num_clients=item.get("num_clients"),
               setting=item.get("setting"))


def load_gaps(path: str | Path) -> list[Gap]:
    """The explanations of ``path`` (a YAML list), each checked to name a cell of the papers'
    tables; a missing file is no explanations."""
    import yaml

    path = Path(path)
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: must be a YAML list of entries (- paper: ..., why: ...)")
    gaps = [_gap(i, item, str(path)) for i, item in enumerate(data, 1)]
    cells = paper_results()
    cells = cells.assign(akey=cells["alpha"].map(alpha_key))
    for i, g in enumerate(gaps, 1):
        c = cells[(cells["paper"] == g.paper) & (cells["table"] == g.table)
                  & (cells["dataset"] == g.dataset) & (cells["method"] == g.method)
                  & (cells["akey"] == g.akey)]
        for k in ("partition", "num_clients", "setting"):
            v = getattr(g, k)
            if v is not None:
                c = c[c[k].astype(str) == str(v)]
        if c.empty:
            raise ValueError(
                f"{path}: entry {i} ({g.paper} {g.table} {g.dataset} {g.method} α={g.akey or '-'})"
                " names no cell of the papers' tables; check its keys against "
                "ofl_core/paper_results.csv")
    return gaps


def find_gap(gaps: Sequence[Gap], cell: dict, preset: str) -> Gap | None:
    """The first explanation of ``cell`` under ``preset``, or None."""
    return next((g for g in gaps if g.explains(cell, preset)), None)
