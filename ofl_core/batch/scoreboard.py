"""The scoreboard: every paper table any run touched, in the paper's own layout, each cell the
paper's number beside ours with a verdict; the records that match no paper cell apart.

Verdict of a cell (ours = mean over seeds of the last-epoch accuracy, the number a data-free
server can report without peeking at the test set; the best epoch is shown beside it):

- *reproduced*: within ``max(2 points, the paper's std)`` of the paper's number;
- *above* / *below*: further away, up or down;
- *not comparable*: the run was at reduced scale (quick defaults, embedded data, fewer
  epochs; :mod:`ofl_core.batch.scale`) — its number is shown, never judged.

An entry above or below the paper carries its gap's explanation where ``results/gaps.yaml``
has one (:mod:`ofl_core.batch.gaps`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ..results import alpha_key, paper_results, records_frame
from .coverage import table_order
from .gaps import Gap, find_gap

TOLERANCE = 2.0
KEYS = ["paper", "table", "dataset", "method", "akey", "partition", "num_clients", "setting"]
COLUMN_KEYS = ["dataset", "akey", "partition", "num_clients", "setting"]
DATASET_NAMES = {"mnist": "MNIST", "fmnist": "FMNIST", "svhn": "SVHN", "cifar10": "CIFAR-10",
                 "cifar100": "CIFAR-100", "tinyimagenet": "Tiny-ImageNet"}
MARKS = {"reproduced": "✓", "above": "▲", "below": "▼", "not comparable": "○"}
#: a judged gap within this many points of the threshold is marked borderline
BORDERLINE = 0.5
#: each paper's own methods (the verdict line says when none of them ran at paper scale)
OWN_METHODS = {"dense": ("dense",), "fedhydra": ("fedhydra",),
               "fedcvae": ("fedcvae-ens", "fedcvae-kd")}
PAPER_NAMES = {"dense": "DENSE", "fedhydra": "FedHydra", "fedcvae": "FedCVAE"}


def verdict(ours: float, paper: float, paper_std: float | None, comparable: bool) -> str:
    """reproduced / above / below (ours vs the paper's number), or not comparable."""
    if not comparable:
        return "not comparable"
    tol = max(TOLERANCE, paper_std if paper_std is not None and math.isfinite(paper_std) else 0)
    if abs(ours - paper) <= tol:
        return "reproduced"
    return "above" if ours > paper else "below"


@dataclass
class Entry:
    """Ours in one paper cell: one preset at one scale, over seeds."""

    preset: str
    precision: str  # "local=bf16;server=fp32", "" for records made before precision was kept
    paper_scale: bool
    scale_reason: str
    last: float
    std: float | None
    best: float
    n_seeds: int
    verdict: str
    scale: str  # paper / quick / reduced
    links: list[tuple[str, str]]  # (run id, notebook)
    gap: Gap | None = None  # the explanation when the verdict is above / below
    paper: float | None = None  # the paper's number
    paper_std: float | None = None  # the paper's std, where it prints one
    code_versions: tuple[str, ...] = ()  # the runs' "ofl_core <version>, git <commit>"

    @property
    def mark(self) -> str:
        return MARKS[self.verdict]

    @property
    def tolerance(self) -> float:
        """The verdict's threshold: max(2 points, the paper's std)."""
        return max(TOLERANCE, self.paper_std or 0.0)

    @property
    def gap_points(self) -> float | None:
        """Ours − paper (last epoch), where the paper's number is known."""
        return None if self.paper is None else self.last - self.paper

    @property
    def borderline(self) -> bool:
        """A judged entry whose gap is within 0.5 points of the threshold: one more seed or
        a rounding could flip its verdict."""
        g = self.gap_points
        return (self.paper_scale and g is not None
                and abs(abs(g) - self.tolerance) <= BORDERLINE)


@dataclass
class BoardCell:
    paper: str  # the paper's number as printed (± its std when given)
    entries: list[Entry] = field(default_factory=list)


@dataclass
class Board:
    """One paper table: rows = methods (paper's order), columns = the paper's settings."""

    paper: str
    table: str
    columns: list[str]
    rows: list[tuple[str, list[BoardCell | None]]]
    #: our other methods run at these columns' settings (no paper cell): (label, texts)
    extras: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"{self.paper}-{self.table}"


@dataclass(frozen=True)
class Summary:
    """Counts over every cell of the papers' tables."""

    total: int
    paper_scale: int
    reduced_only: int
    not_run: int
    verdicts: dict[str, int]
    explained: int = 0  # of the judged cells above / below, those with an explanation
    #: of the judged cells above / below, those that another preset (the authors' code's
    #: reading) reproduces at paper scale
    reproduced_by_other_preset: int = 0
    #: of the cells run at paper scale, those whose counted entry rests on one seed
    one_seed: int = 0


def annotated_frame(runs: Iterable[dict]) -> pd.DataFrame:
    """Every record of ``runs`` (finished-run sidecars with ``scale`` and ``href`` added), one
    row each, with the run's scale and link."""
    rows = []
    for run in runs:
        for rec in run.get("records", []):
            rows.append({**rec, "run_id": run["run_id"], "notebook": run["notebook"],
                         "href": run["href"], "paper_scale": run["scale"].paper,
                         "scale_reason": run["scale"].reason, "scale": run["scale"].short,
                         "code_version": run.get("code_version", "")})
    frame = records_frame(rows)
    for col in ("run_id", "notebook", "href", "paper_scale", "scale_reason", "scale",
                "code_version"):
        frame[col] = [r[col] for r in rows] if rows else pd.Series(dtype=object)
    frame["akey"] = frame["alpha"].map(alpha_key)
    frame["setting"] = frame["setting"].fillna("")
    return frame


def _paper_cells() -> pd.DataFrame:
    pr = paper_results()
    pr["akey"] = pr["alpha"].map(alpha_key)
    return pr


def split(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records that are cells of a paper table, with the paper's number; the others)."""
    pr = _paper_cells()
    merged = frame.merge(pr[KEYS + ["accuracy", "std", "accuracy_text"]], on=KEYS, how="left")
    hit = merged["accuracy"].notna()
    return merged[hit].reset_index(drop=True), merged[~hit].reset_index(drop=True)


def entries(matched: pd.DataFrame, gaps: Sequence[Gap] = ()) -> pd.DataFrame:
    """One row per (cell, preset, scale): ours over seeds, the verdict and, for a gap, its
    explanation from ``gaps``."""
    cols = KEYS + ["preset", "precision", "paper_scale", "scale_reason", "scale"]
    if matched.empty:
        return pd.DataFrame(columns=[*cols, "entry"])
    out = []
    matched = matched.assign(precision=matched["precision"].astype(object).fillna(""))
    # one seed counts once: the same cell, preset and seed in two runs (a run in two tasks of a
    # grid, a record made again, e.g. on another CPU whose arithmetic trains other clients) is
    # one measurement, the mean of its distinct records (equal ones, the same computation made
    # twice on one machine, count once); every run stays linked
    for key, g in matched.groupby(cols, dropna=False, sort=False):
        seeds = (g.drop_duplicates(subset=["seed", "last_acc", "best_acc"])
                 .groupby("seed", sort=False)[["last_acc", "best_acc"]].mean())
        last = seeds["last_acc"].astype(float)
        std = float(last.std(ddof=1)) if len(last) > 1 else None
        paper_std = g["std"].iloc[0]
        links = list(dict.fromkeys(zip(g["run_id"], g["notebook"], strict=True)))
        e = Entry(preset=key[-5], precision=key[-4] or "", paper_scale=bool(key[-3]),
                  scale_reason=key[-2], scale=key[-1],
                  last=float(last.mean()), std=std, best=float(seeds["best_acc"].mean()),
                  n_seeds=int(g["seed"].nunique()),
                  verdict=verdict(float(last.mean()), float(g["accuracy"].iloc[0]),
                                  None if pd.isna(paper_std) else float(paper_std),
                                  bool(key[-3])),
                  links=links, paper=float(g["accuracy"].iloc[0]),
                  paper_std=None if pd.isna(paper_std) else float(paper_std),
                  code_versions=tuple(dict.fromkeys(g["code_version"].fillna("")
                                                    if "code_version" in g else ())))
        row = dict(zip(cols, key, strict=True))
        if e.verdict in ("above", "below"):
            e.gap = find_gap(gaps, row, e.preset)
        out.append({**row, "entry": e})
    return pd.DataFrame(out)


def _column_label(row: pd.Series, varying: list[str]) -> str:
    parts = []
    for k in varying:
        v = row[k]
        if k == "dataset":
            parts.append(DATASET_NAMES.get(str(v), str(v)))
        elif k == "akey" and v != "":
            parts.append(f"α={v}")
        elif k == "partition" and v != "dirichlet":
            parts.append(str(v))
        elif k == "num_clients":
            parts.append(f"m={v}")
        elif k == "setting" and v:
            parts.append(str(v))
    return " ".join(parts)


def boards(ent: pd.DataFrame, unmatched: pd.DataFrame | None = None,
           matched: pd.DataFrame | None = None) -> list[Board]:
    """A :class:`Board` per paper table with at least one entry, in the papers' order;
    ``unmatched`` records labelled for a board's table at one of its columns become its
    extras (e.g. the ensemble or Co-Boosting beside DENSE Table 1) — given ``matched`` (the
    board's records), only those made on the clients of one of its records (same seed, same
    clients' ensemble accuracy), so that "also on these clients" is true."""
    pr = _paper_cells()
    if ent.empty:
        return []
    out = []
    for paper, table in table_order(ent):
        cells = pr[(pr["paper"] == paper) & (pr["table"] == table)]
        mine = ent[(ent["paper"] == paper) & (ent["table"] == table)]
        varying = [k for k in COLUMN_KEYS if cells[k].nunique() > 1] or ["dataset"]
        touched = mine[COLUMN_KEYS].drop_duplicates()
        shown = cells.merge(touched, on=COLUMN_KEYS)[COLUMN_KEYS].drop_duplicates()
        col_keys = [tuple(r) for r in shown.itertuples(index=False)]
        labels = [_column_label(r, varying) for _, r in shown.iterrows()]
        rows = []
        for method in dict.fromkeys(cells["method"]):
            row: list[BoardCell | None] = []
            for ck in col_keys:
                c = cells[(cells["method"] == method)
                          & (cells[COLUMN_KEYS].apply(tuple, axis=1) == ck)]
                if c.empty:
                    row.append(None)
                    continue
                std = c["std"].iloc[0]
                text = c["accuracy_text"].iloc[0] + ("" if pd.isna(std) else f" ± {std:g}")
                es = mine[(mine["method"] == method)
                          & (mine[COLUMN_KEYS].apply(tuple, axis=1) == ck)]["entry"]
                row.append(BoardCell(text, sorted(es, key=lambda e: (not e.paper_scale,
                                                                       e.preset != "paper"))))
            if any(c is not None for c in row):
                rows.append((method, row))
        out.append(Board(paper, table, labels, rows,
                         _extras(unmatched, paper, table, col_keys, matched)))
    return out


def ensemble_fingerprint(df: pd.DataFrame) -> pd.Series:
    """The clients' ensemble accuracy as text ("" for none): other clients of the same setting
    give another ensemble, so records with equal settings, seeds and fingerprints share clients."""
    return df["ensemble_acc"].map(lambda v: "" if v is None or pd.isna(v) else f"{float(v):.2f}")


def clients_key(df: pd.DataFrame) -> pd.Series:
    """Which clients a record was made on, as far as records tell: its column, its seed and
    its :func:`ensemble_fingerprint`."""
    return df[COLUMN_KEYS].astype(str).agg("|".join, axis=1) + "|" + df["seed"].astype(str) \
        + "|" + ensemble_fingerprint(df)


def _extras(unmatched: pd.DataFrame | None, paper: str, table: str,
            col_keys: list[tuple], matched: pd.DataFrame | None = None
            ) -> list[tuple[str, list[str]]]:
    if unmatched is None or unmatched.empty:
        return []
    df = unmatched[(unmatched["paper"] == paper) & (unmatched["table"] == table)]
    df = df[df[COLUMN_KEYS].apply(tuple, axis=1).isin(col_keys)]
    if matched is not None and not df.empty:
        mine = matched[(matched["paper"] == paper) & (matched["table"] == table)]
        df = df[clients_key(df).isin(set(clients_key(mine)))]
    out = []
    # one row per scale: a paper-scale record and a quick one ran on different clients, and
    # their mean would be no measurement of anything
    for (method, preset, _scale), g in df.groupby(["method", "preset", "scale"], sort=False):
        texts = []
        for ck in col_keys:
            c = g[g[COLUMN_KEYS].apply(tuple, axis=1) == ck]
            last = c["last_acc"].astype(float)
            texts.append("" if c.empty else f"{last.mean():.2f}" + (
                f" ± {last.std(ddof=1):.2f}" if len(last) > 1 else "")
                + f" (n={c['seed'].nunique()}, {'/'.join(sorted(set(c['scale'])))})")
        out.append((method if preset == "paper" else f"{method} ({preset})", texts))
    return out


#: the columns of the scoreboard's export (report/scoreboard.csv and .json), in order
EXPORT_COLUMNS = ("paper", "table", "dataset", "method", "alpha", "partition", "num_clients",
                  "setting", "preset", "scale", "paper_scale", "paper_acc", "paper_std",
                  "ours_last",
                  "ours_std", "ours_best", "n_seeds", "verdict", "gap", "precision", "run_ids",
                  "code_versions", "why")


def export_rows(ent: pd.DataFrame) -> list[dict]:
    """The scoreboard as rows, one per paper cell × preset × scale: the paper's number, ours
    (last-epoch mean, std, best-epoch mean, seeds), the verdict, the gap ours − paper, and
    where it came from (run ids, code versions), in :data:`EXPORT_COLUMNS`' order."""
    out = []
    for _, r in ent.iterrows():
        e: Entry = r["entry"]
        out.append({
            "paper": r["paper"], "table": r["table"], "dataset": r["dataset"],
            "method": r["method"], "alpha": r["akey"], "partition": r["partition"],
            "num_clients": int(r["num_clients"]), "setting": r["setting"], "preset": e.preset,
            "scale": e.scale, "paper_scale": e.paper_scale, "paper_acc": e.paper,
            "paper_std": e.paper_std,
            "ours_last": round(e.last, 4), "ours_std": None if e.std is None else round(e.std, 4),
            "ours_best": round(e.best, 4), "n_seeds": e.n_seeds, "verdict": e.verdict,
            "gap": None if e.paper is None else round(e.last - e.paper, 4),
            "precision": e.precision, "run_ids": ";".join(run for run, _ in e.links),
            "code_versions": ";".join(v for v in e.code_versions if v),
            "why": "" if e.gap is None else
                   e.gap.why if e.gap.explained else f"not explained yet — {e.gap.why}"})
    return out


def paper_verdicts(ent: pd.DataFrame) -> list[str]:
    """One line per paper: per table, of its cells judged at paper scale how many reproduce
    under the paper preset and under either preset, and whether the paper's own method ran
    at paper scale at all."""
    pr = _paper_cells()
    lines = []
    for paper in dict.fromkeys(pr["paper"]):
        name = PAPER_NAMES.get(paper, paper)
        parts = []
        own_run = False
        for table in dict.fromkeys(pr[pr["paper"] == paper]["table"]):
            n_cells = len(pr[(pr["paper"] == paper) & (pr["table"] == table)])
            mine = ent[(ent["paper"] == paper) & (ent["table"] == table)] if not ent.empty \
                else ent
            judged = {}
            for key, g in (mine.groupby(KEYS, sort=False) if not mine.empty else []):
                at = [e for e in g["entry"] if e.paper_scale]
                if at:
                    judged[key] = at
                    own_run |= key[3] in OWN_METHODS.get(paper, ())
            if not judged:
                continue
            by_paper = sum(any(e.preset == "paper" and e.verdict == "reproduced" for e in at)
                           for at in judged.values())
            by_any = sum(any(e.verdict == "reproduced" for e in at) for at in judged.values())
            either = f" ({by_any} under either preset)" if by_any != by_paper else ""
            parts.append(f"Table {table[1:]}: {by_paper} of {len(judged)} judged cells "
                         f"reproduced under the paper preset{either}; {n_cells} cells in all")
        if not parts:
            lines.append(f"{name}: no cell run at paper scale yet")
            continue
        own = "" if own_run else (f"; its own method ({', '.join(OWN_METHODS[paper])}) not run "
                                  f"at paper scale" if paper in OWN_METHODS else "")
        lines.append(f"{name} — " + "; ".join(parts) + own)
    return lines


def summary(ent: pd.DataFrame, dataset: str | None = None) -> Summary:
    """How many of the papers' cells (of ``dataset``'s only, if given) were run at paper scale,
    at reduced scale only, not at all, and the verdicts of the paper-scale ones (the ``paper``
    preset where there is one; a gap that another preset reproduces is counted as such too)."""
    cells = _paper_cells()
    if dataset is None:
        return _summary(ent, len(cells))
    return _summary(ent[ent["dataset"] == dataset] if not ent.empty else ent,
                    int((cells["dataset"] == dataset).sum()))


def _summary(ent: pd.DataFrame, total: int) -> Summary:
    verdicts = dict.fromkeys(("reproduced", "above", "below"), 0)
    paper_scale = reduced = explained = other = one_seed = 0
    if not ent.empty:
        for _, g in ent.groupby(KEYS, sort=False):
            at_paper = [e for e in g["entry"] if e.paper_scale]
            if not at_paper:
                reduced += 1
                continue
            paper_scale += 1
            e = next((e for e in at_paper if e.preset == "paper"), at_paper[0])
            verdicts[e.verdict] += 1
            explained += e.gap is not None and e.gap.explained
            other += e.verdict != "reproduced" and any(
                o.verdict == "reproduced" for o in at_paper if o.preset != e.preset)
            one_seed += e.n_seeds == 1
    return Summary(total, paper_scale, reduced, total - paper_scale - reduced, verdicts,
                   explained, other, one_seed)


def table_summaries(ent: pd.DataFrame) -> list[tuple[str, str, str, Summary]]:
    """:func:`summary` per paper table and dataset that has a cell run at any scale, as
    (paper, table, dataset, summary) in the papers' order; ``total`` is that table's cells of
    that dataset. Summed over the tables they give :func:`summary`'s counts."""
    if ent.empty:
        return []
    cells = _paper_cells()
    sizes = cells.groupby(["paper", "table", "dataset"], sort=False).size()
    out = []
    for (paper, table, dataset), n in sizes.items():
        mine = ent[(ent["paper"] == paper) & (ent["table"] == table)
                   & (ent["dataset"] == dataset)]
        s = _summary(mine, int(n))
        if s.paper_scale + s.reduced_only:
            out.append((paper, table, dataset, s))
    return out


def dataset_summaries(ent: pd.DataFrame) -> list[tuple[str, Summary]]:
    """:func:`summary` per dataset of the papers' tables that has a cell run at any scale,
    named for readers (``FMNIST``, ``CIFAR-10``, ...), the most-run first."""
    sizes = _paper_cells()["dataset"].value_counts(sort=False)  # one read of the paper's cells
    out = [(DATASET_NAMES.get(d, d),
            _summary(ent[ent["dataset"] == d] if not ent.empty else ent, int(n)))
           for d, n in sizes.items()]
    out = [(name, s) for name, s in out if s.paper_scale + s.reduced_only]
    return sorted(out, key=lambda item: -item[1].paper_scale)


def further(unmatched: pd.DataFrame) -> pd.DataFrame:
    """Records with no paper cell (figures, our extra methods, settings the papers do not
    print), as mean over seeds per setting."""
    cols = ["notebook", "paper", "table", "dataset", "data_source", "method", "preset", "akey",
            "partition", "num_clients", "setting"]
    if unmatched.empty:
        return pd.DataFrame(columns=[*cols, "last", "best", "seeds", "scale"])
    df = unmatched.assign(data_source=unmatched["data_source"].fillna(""))
    g = (df.groupby(cols + ["scale"], dropna=False, sort=False)
         .agg(last=("last_acc", "mean"), best=("best_acc", "mean"), seeds=("seed", "nunique"))
         .reset_index())
    g.insert(1, "of", g.pop("paper") + " " + g.pop("table"))
    g = g.drop(columns=["dataset"]).rename(columns={"akey": "α", "num_clients": "m",
                                                    "data_source": "data"})
    return g.round(2)
