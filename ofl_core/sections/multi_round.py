"""The multi-round notebook (``notebooks/multi_round.py``): DENSE Table 5 and FedHydra Tables
5 and 8–11 — which FedHydra table a partition fills, the per-table comparisons, the
accuracy-vs-round figure and the printed round-1 → round-T trends."""

from __future__ import annotations

import os
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from ..plots import plot_accuracy_vs, save_figure
from ..results import paper_results
from ..tables import Serves, Tables

#: FedHydra's multi-round table for each partition (α, or "2c/c"): Tables 5, 8, 9, 10, 11
FEDHYDRA_TABLE: dict[float | str, str] = {0.1: "T5", 0.5: "T8", 0.3: "T9", 0.01: "T10",
                                          "2c/c": "T11"}


def partition_fields(p: float | str) -> dict[str, Any]:
    """:class:`~ofl_core.experiment.ExperimentConfig` fields of a partition as the multi-round
    tables name it (DENSE Table 5, FedHydra Tables 5, 8–11): a Dirichlet α, or ``"2c/c"``."""
    if p == "2c/c":
        return {"partition": "classes_per_client", "alpha": None, "classes_per_client": 2}
    return {"partition": "dirichlet", "alpha": float(p)}


def fedhydra_serves(p: float | str) -> Serves:
    """The FedHydra table a partition's multi-round records fill: Table 5 (α = 0.1; setting
    ``rounds=T;local_epochs=E``), 8/9/10 (α = 0.5/0.3/0.01) or 11 (2c/c) — Tables 8–11 do not
    restate E, so their setting is the round only (``rounds=T``)."""
    key = p if p == "2c/c" else float(p)
    if key not in FEDHYDRA_TABLE:
        raise ValueError(f"fedhydra_partitions: FedHydra has no multi-round table for {p!r}; "
                         f"choose from {list(FEDHYDRA_TABLE)}")
    table = FEDHYDRA_TABLE[key]
    return Serves("fedhydra", table, setting=None if table == "T5" else "rounds={rounds}")


def comparisons(tables: Tables) -> dict[tuple[str, str], pd.DataFrame]:
    """Ours beside the paper for every multi-round table with records (DENSE Table 5, FedHydra
    Tables 5, 8–11), in the order they were declared; each printed plainly."""
    out = {}
    for paper, table in dict.fromkeys((r.paper, r.table) for r in tables.records):
        out[(paper, table)] = tables.compare(paper, table)
        print(f"\n{paper} {table}")
        print(out[(paper, table)].drop(columns=["data_source", "n_seeds"]).to_string(index=False))
    return out


def _round(setting: pd.Series) -> pd.Series:
    return setting.str.extract(r"rounds=(\d+)")[0].astype(int)


def plot_accuracy_vs_round(compared: dict[tuple[str, str], pd.DataFrame], dataset: str,
                           figures_dir: str | os.PathLike) -> plt.Figure:
    """DENSE Table 5 / FedHydra Tables 5, 8–11 as curves: accuracy vs round, ours (solid) and
    the paper (dashed) — the paper's own datasets at our partition when ours has no cell (the
    tables print CIFAR10, SVHN, CIFAR100 only). One panel per table; ``accuracy_vs_round.png``."""
    fig, axes = plt.subplots(1, len(compared), figsize=(5.4 * len(compared), 3.8),
                             squeeze=False)
    for ax, ((paper, table), t) in zip(axes[0], compared.items(), strict=True):
        t = t.assign(round=_round(t["setting"]))
        rows = [t[["round", "method", "ours_last", "paper"]]]
        if t["paper"].isna().all():  # the paper's own datasets at our partition, same methods
            cells = paper_results(paper, table)
            cells = cells[cells.method.isin(t["method"])
                          & (cells.alpha.map(lambda a: "" if pd.isna(a) else f"{a:g}")
                             .isin(t["alpha"].astype(str)))]
            cells = cells.assign(round=_round(cells["setting"]),
                                 method=cells["method"] + " [" + cells["dataset"] + "]")
            rows.append(cells[["round", "method", "accuracy"]].rename(
                columns={"accuracy": "paper"}))
        frame = pd.concat(rows, ignore_index=True)
        plot_accuracy_vs(frame, "round", group="method", ax=ax, xlabel="round",
                         title=f"{paper} {table}: ours ({dataset}) vs paper")
        ax.set_xticks(sorted(frame["round"].unique()))
    fig.tight_layout()
    save_figure(fig, figures_dir, "accuracy_vs_round")
    return fig


def round_trends(tables: Tables) -> pd.DataFrame:
    """Does accuracy grow with rounds (DENSE Table 5, FedHydra Tables 5, 8–11)? Prints the
    mean over seeds per (paper, table, method, round) — global model last/best, teacher
    ensemble and mean client accuracy — and, per method, round 1 → T; returns the means."""
    df = tables.frame()
    df["round"] = _round(df["setting"])
    summary = df.groupby(["paper", "table", "method", "round"])[
        ["last_acc", "best_acc", "ensemble_acc", "mean_client_acc"]].mean()
    print(summary.round(2).to_string())
    for (paper, table, method), g in summary.groupby(level=[0, 1, 2]):
        accs = g["last_acc"].tolist()
        trend = "improves" if accs[-1] > accs[0] else "does NOT improve"
        print(f"{paper} {table} {method}: round 1 → {len(accs)}: {accs[0]:.2f} → "
              f"{accs[-1]:.2f} ({trend})")
    return summary


__all__ = ["FEDHYDRA_TABLE", "comparisons", "fedhydra_serves", "partition_fields",
           "plot_accuracy_vs_round", "round_trends"]
