"""Why a paper-scale cell does not reproduce: the explanations shipped in ``results/gaps.yaml``.

Each entry names one cell of a paper's table (``paper``, ``table``, ``dataset``, ``method``,
``alpha``; ``partition``, ``num_clients`` and ``setting`` where the table has several), and
optionally the ``presets`` it is about (all when left out); ``why`` is the gap's best
explanation in a sentence or two — or, with ``explained: false``, what was tried and what part
is known while the gap stays open (the report still counts it as not explained); ``see``
where its evidence is: one or a list of sections of the decisions documents, each
``<file>.md#<anchor>`` relative to ``docs/decisions/`` (an ``<a id="<anchor>"></a>`` there; a
reference to a file or anchor that does not exist is refused).
The scoreboard prints it under each paper-scale entry of that cell that is above or below the
paper's number, with a link to each section, and says so where a gap has no explanation yet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..results import alpha_key, paper_results
from .yamlfile import load_yaml

REQUIRED = ("paper", "table", "dataset", "method", "why")
OPTIONAL = ("alpha", "partition", "num_clients", "setting", "presets", "see", "explained")
#: the decisions documents a gap's ``see`` points into (``<file>.md#<anchor>``)
DECISIONS_DIR = Path(__file__).resolve().parents[2] / "docs" / "decisions"
_ANCHOR = re.compile(r'^<a id="([^"]+)"></a>[ \t]*$(?:\s*^#+ (.+)$)?', re.MULTILINE)
_REF = re.compile(r"^([\w.-]+\.md)#([\w-]+)$")


def _sections(docs: Path) -> dict[str, str]:
    """``{"<file>.md#<anchor>": section title}`` of every anchor in ``docs``' Markdown files
    (the title is the heading right after the anchor, else the reference itself)."""
    found: dict[str, str] = {}
    for md in sorted(Path(docs).glob("*.md")):
        for anchor, title in _ANCHOR.findall(md.read_text(encoding="utf-8")):
            ref = f"{md.name}#{anchor}"
            found[ref] = title.strip() or ref
    return found


def doc_sections(docs: str | Path = DECISIONS_DIR) -> dict[str, str]:
    """Every section a gap may name: ``{"<file>.md#<anchor>": its title}``."""
    return _sections(Path(docs).resolve())


@dataclass(frozen=True)
class Gap:
    """The explanation of one cell's gap (for some or all of its presets)."""

    paper: str
    table: str
    dataset: str
    method: str
    akey: str  # α as :func:`~ofl_core.results.alpha_key` writes it ('' for none)
    why: str
    see: tuple[str, ...] = ()  # "<file>.md#<anchor>" under docs/decisions/
    presets: tuple[str, ...] = ()  # () = every preset
    partition: str | None = None
    num_clients: int | None = None
    setting: str | None = None
    explained: bool = True  # False: ``why`` says what was tried; the gap is still open

    @property
    def label(self) -> str:
        """The cell it names, as messages print it (``dense T1 fmnist fedavg α=0.1``)."""
        return " ".join(x for x in (self.paper, self.table, self.dataset, self.method,
                                    f"α={self.akey}" if self.akey else "", self.setting or "",
                                    f"m={self.num_clients}" if self.num_clients else "",
                                    self.partition or "") if x)

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
    see = item.get("see") or ()
    if isinstance(see, str):
        see = (see,)
    if not isinstance(see, (list, tuple)) or not all(isinstance(s, str) for s in see):
        raise ValueError(f"{where}: entry {i}: see must be '<file>.md#<anchor>' or a list of them"
                         f" (relative to docs/decisions/), got {see!r}")
    bad = [s for s in see if not _REF.match(s.strip())]
    if bad:
        raise ValueError(f"{where}: entry {i}: see {bad[0]!r} is not '<file>.md#<anchor>' (a "
                         "section of docs/decisions/, e.g. 'paper-gaps.md#dense-t1-a05-dense')")
    explained = item.get("explained", True)
    if not isinstance(explained, bool):
        raise ValueError(f"{where}: entry {i}: explained must be true or false (false: the "
                         f"entry says what was tried, the gap stays open), got {explained!r}")
    return Gap(paper=str(item["paper"]), table=str(item["table"]),
               dataset=str(item["dataset"]), method=str(item["method"]),
               akey=alpha_key(item.get("alpha")), why=" ".join(str(item["why"]).split()),
               see=tuple(s.strip() for s in see), presets=tuple(str(p) for p in presets),
               partition=item.get("partition"), num_clients=item.get("num_clients"),
               setting=item.get("setting"), explained=explained)


def load_gaps(path: str | Path, docs: str | Path | None = DECISIONS_DIR) -> list[Gap]:
    """The explanations of ``path`` (a YAML list), each checked to name a cell of the papers'
    tables and, unless ``docs`` is None, sections (anchors) that exist in ``docs``; a missing
    file is no explanations."""
    import yaml

    path = Path(path)
    if not path.is_file():
        return []
    try:
        data = load_yaml(path) or []
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
                f"{path}: entry {i} ({g.label}) names no cell of the papers' tables; check "
                "its keys against ofl_core/paper_results.csv")
    if docs is not None:
        sections = doc_sections(docs)
        for i, g in enumerate(gaps, 1):
            for ref in g.see:
                if ref not in sections:
                    name = ref.split("#")[0]
                    known = sorted(a.split("#")[1] for a in sections if a.startswith(name + "#"))
                    raise ValueError(
                        f"{path}: entry {i} ({g.label}): see "
                        f"{ref!r} names no section of {docs}: "
                        + (f"{name} has the anchors {', '.join(known)}" if known
                           else f"there is no {name} with anchors"))
    return gaps


def find_gap(gaps: Sequence[Gap], cell: dict, preset: str) -> Gap | None:
    """The first explanation of ``cell`` under ``preset``, or None."""
    return next((g for g in gaps if g.explains(cell, preset)), None)


def unused_gaps(gaps: Sequence[Gap], shown: Iterable[Gap | None]) -> list[str]:
    """One line for each entry of ``gaps`` that is not among ``shown`` (the explanations the
    scoreboard gives its ▲/▼ entries): a stale entry, whose cell now reproduces or was never
    run under its presets, or one shadowed by an earlier entry for the same cell."""
    used = {id(g) for g in shown if g is not None}
    out = []
    for i, g in enumerate(gaps, 1):
        if id(g) in used:
            continue
        presets = f" under {', '.join(g.presets)}" if g.presets else ""
        out.append(f"entry {i} ({g.label}{presets}) explains no cell the scoreboard shows above "
                   "or below the paper: the cell reproduces now, has no record under these "
                   "presets, or an earlier entry explains it; rewrite the entry or remove it")
    return out
