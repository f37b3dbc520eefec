"""The report's "beyond the papers" table: the one-shot methods that no reproduced paper prints
(those with server work of their own and no cell in ``paper_results.csv``: today Co-Boosting,
FedLPA and IntactOFL) beside every other method that ran on **the same trained clients**.

A client set is one run's clients: the dataset and its source, the architecture, the local
epochs and options, the partition, α, m, the seed, the clients' code version, and the clients'
logit-ensemble accuracy (a fingerprint: two client sets that differ anywhere give another
ensemble). Only client sets that hold a record of such a method count, so a method's number
here is always on the clients its neighbours used; a column is one setting (everything but the
seed) from one origin (the shipped grids, whichever of their files holds a run's task, else the
runs' scale), each cell the mean over its client sets' seeds.

A method's ``notes`` (its spec's ``recorded`` extras) add rows and lines: an ``acc_*`` note is
a second model's accuracy (FedLPA's closed form ``acc_biased``, shown as its own row); the
others (IntactOFL's ``params`` and ``flops_per_image`` beside one expert's) are the deployed
model's cost, said under the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from ..results import paper_results
from .scoreboard import DATASET_NAMES, annotated_frame, ensemble_fingerprint

#: the client set's identity, beyond the record's own keys (from the run's parameters)
RUN_KEYS = ("arch", "local_epochs", "local_options")
#: the origin of every record from a grid file shipped in ``results/grids``
SHIPPED = "shipped grids"
SETTING = ("dataset", "data_source", "arch", "local_epochs", "local_options", "partition",
           "akey", "num_clients", "client_code", "origin")


def _methods() -> dict:
    """The registry, imported when a table is made: it imports every method (and torch), which
    run_all.py need not load to start."""
    from ..registry import METHODS

    return METHODS


def later_methods() -> tuple[str, ...]:
    """Registry methods with server work of their own that print in no paper table here."""
    methods = _methods()
    printed = set(paper_results()["method"])
    return tuple(name for name, spec in methods.items()
                 if name not in printed and spec.kind is not None
                 and not spec.kind.stages.startswith("none"))


@dataclass(frozen=True)
class BeyondTable:
    """``columns``: one label per setting; ``rows``: (method label, one cell text per column);
    ``costs``: one line per (method, setting) with a deployed model's size."""

    columns: list[str]
    rows: list[tuple[str, list[str]]]
    costs: list[str]


def _frame(runs: Iterable[dict]) -> pd.DataFrame:
    runs = list(runs)
    df = annotated_frame(runs)
    if df.empty:
        return df
    per_run = {r["run_id"]: r.get("effective", {}) for r in runs}
    for key in RUN_KEYS:
        df[key] = [_text(per_run.get(rid, {}).get(key, "")) for rid in df["run_id"]]
    # where a run comes from: the shipped grids (one origin, whichever grid file holds the
    # task: the records of two shipped grids on the very same clients share a column), else
    # its scale (a setting no paper prints has no paper scale to be judged by)
    grid = {r["run_id"]: (r.get("reproduce") or {}).get("grid") or "" for r in runs}
    df["grid"] = [grid.get(rid, "") for rid in df["run_id"]]
    df["origin"] = [SHIPPED if g else scale for g, scale in zip(df["grid"], df["scale"],
                                                                strict=True)]
    # as object first: a column of only missing values is float64, which a str fill would not
    # keep in a later pandas
    text = ["data_source", "client_code"]
    df[text] = df[text].astype(object).fillna("").astype(str)
    df["fingerprint"] = ensemble_fingerprint(df)
    # records older than the clients' code version carry none: where the records of the same
    # setting, seed and clients' ensemble name one code version, they are the same clients
    same = df[[k for k in SETTING if k not in ("client_code", "origin")]
              + ["seed", "fingerprint"]].astype(str).agg("|".join, axis=1)
    named = df.loc[df["client_code"] != ""].groupby(same)["client_code"].unique()
    df["client_code"] = [code or (named[k][0] if k in named and len(named[k]) == 1 else "")
                         for code, k in zip(df["client_code"], same, strict=True)]
    return df


def _text(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _label(s: pd.Series, grids: list[str]) -> str:
    parts = [DATASET_NAMES.get(s["dataset"], s["dataset"]), s["arch"], f"m={s['num_clients']}"]
    parts.append(f"α={s['akey']}" if s["akey"] != "" else str(s["partition"]))
    parts.append(f"{s['local_epochs']} local ep.")
    if s["local_options"]:
        parts.append(s["local_options"])
    origin = ", ".join(grids) if grids else f"{s['origin']} scale, not a shipped grid's task"
    return " · ".join(parts) + " · " + origin


def _cell(g: pd.DataFrame, column_seeds: set) -> str:
    """Mean ± std over the cell's seeds; the seeds are named when they are not all of its
    column's, as the cells beside it may then average other client sets."""
    v = g["last_acc"].astype(float)
    if v.empty:
        return ""
    seeds = sorted(set(g["seed"]))
    which = (f": seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
             if set(seeds) != column_seeds else "")
    return f"{v.mean():.2f}" + (f" ± {v.std(ddof=1):.2f}" if len(v) > 1 else "") + \
        f" (n={len(v)}{which})"


def _method_rows(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, its records): the ensemble, then every method and preset, then each ``acc_*``
    note as a row of its own; the paper methods before the later ones, registry order."""
    methods = _methods()
    order = {name: i for i, name in enumerate(methods)}
    later = set(later_methods())
    out = []
    if not any(methods[m].kind.stages.startswith("none") for m in df["method"].unique()
               if m in methods and methods[m].kind is not None):  # no reference row ran
        sets = df.drop_duplicates(["set", "seed"])
        out.append(("ensemble (the clients' mean logits)",
                    sets.assign(last_acc=sets["ensemble_acc"])))
    keyed = sorted(df.groupby(["method", "preset", "setting"], sort=False),
                   key=lambda kv: (kv[0][0] in later, order.get(kv[0][0], len(order)),
                                   kv[0][1] != "paper", kv[0][2]))
    for (method, preset, setting), g in keyed:
        name = method if preset == "paper" else f"{method} ({preset})"
        name += f" [{setting}]" if setting else ""
        out.append((name, g))
        notes = g["notes"].map(lambda n: n if isinstance(n, dict) else {})
        for key in sorted({k for n in notes for k in n if k.startswith("acc_")}):
            vals = notes.map(lambda n, k=key: n.get(k))
            if (vals.astype(float) - g["last_acc"].astype(float)).abs().max() < 5e-3:
                continue  # the method's own number again
            out.append((f"{name}: {key[4:]} model", g.assign(last_acc=vals)[vals.notna()]))
    return out


def _costs(df: pd.DataFrame, labels: dict) -> list[str]:
    lines = []
    for (method, setting), g in df.groupby(["method", "setting_key"], sort=False):
        notes = [n for n in g["notes"] if isinstance(n, dict) and "params" in n]
        if not notes:
            continue
        n = notes[0]
        text = f"{method} on {labels[setting]}: deploys {n['params']:,} parameters"
        if "flops_per_image" in n:
            text += f", {n['flops_per_image']:,} FLOPs per image"
        if "params_one_expert" in n:
            text += (f" (one client model: {n['params_one_expert']:,} parameters"
                     + (f", {n['flops_one_expert']:,} FLOPs" if "flops_one_expert" in n else "")
                     + "; the single-model methods deploy one such model)")
        lines.append(text)
    return lines


def beyond_table(runs: Iterable[dict]) -> BeyondTable | None:
    """The table over ``runs`` (prepared runs: records, ``effective`` parameters, ``scale``),
    or None when no later method ran."""
    df = _frame(runs)
    later = set(later_methods())
    if df.empty or not df["method"].isin(later).any():
        return None
    df["setting_key"] = df[list(SETTING)].astype(str).agg("|".join, axis=1)
    df["set"] = df["setting_key"] + "|" + df["seed"].astype(str) + "|" + df["fingerprint"]
    df = df[df["set"].isin(set(df.loc[df["method"].isin(later), "set"]))]
    # one measurement per (client set, method, preset): a shipped record made again counts once
    df = df.drop_duplicates(["set", "method", "preset", "setting"], keep="first")
    settings = df.drop_duplicates("setting_key").sort_values(
        ["origin", "dataset", "arch", "num_clients", "local_epochs", "akey"], kind="stable")
    keys = list(settings["setting_key"])
    grids = {k: sorted(set(g) - {""}) for k, g in df.groupby("setting_key")["grid"]}
    labels = {s["setting_key"]: _label(s, grids[s["setting_key"]]) for _, s in settings.iterrows()}
    column_seeds = {k: set(g) for k, g in df.groupby("setting_key")["seed"]}
    rows = []
    for name, g in _method_rows(df):
        rows.append((name, [_cell(g.loc[g["setting_key"] == k], column_seeds[k]) for k in keys]))
    return BeyondTable([labels[k] for k in keys], rows, _costs(df, labels))


__all__ = ["BeyondTable", "beyond_table", "later_methods"]
