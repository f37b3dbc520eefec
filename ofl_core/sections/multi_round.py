"""The multi-round notebook (``notebooks/multi_round.py``): DENSE Table 5 and FedHydra Tables
5 and 8–11 — which FedHydra table a partition fills, the per-table comparisons, the
accuracy-vs-round figure and the printed round-1 → round-T trends."""

from __future__ import annotations

import os
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from ..plots import accuracy_panels, figure_legend, plot_accuracy_vs, save_figure
from ..results import paper_results
from ..tables import Serves, Tables

PAPER_NAMES = {"dense": "DENSE", "fedhydra": "FedHydra"}
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


def _paper_columns(paper: str, table: str, t: pd.DataFrame) -> pd.DataFrame:
    """The paper's own cells for a table where ours has none (they print CIFAR10, SVHN,
    CIFAR100 only): at our partition, for our methods, one column ``paper_<dataset>`` each."""
    cells = paper_results(paper, table)
    cells = cells[cells.method.isin(t["method"])
                  & (cells.alpha.map(lambda a: "" if pd.isna(a) else f"{a:g}")
                     .isin(t["alpha"].astype(str)))]
    return (cells.assign(round=_round(cells["setting"]), column="paper_" + cells["dataset"])
            .pivot_table(index=["round", "method"], columns="column", values="accuracy")
            .reset_index())


def plot_accuracy_vs_round(compared: dict[tuple[str, str], pd.DataFrame], dataset: str,
                           figures_dir: str | os.PathLike) -> plt.Figure:
    """DENSE Table 5 / FedHydra Tables 5, 8–11 as curves: accuracy vs round, ours (solid) and
    the paper (dashed) — the paper's own datasets at our partition when ours has no cell (the
    tables print CIFAR10, SVHN, CIFAR100 only; one line style per dataset). One panel per
    table, one colour per method in every panel; ``accuracy_vs_round.png``."""
    fig, axes = accuracy_panels(len(compared))
    order = list(dict.fromkeys(m for t in compared.values() for m in t["method"]))
    for ax, ((paper, table), t) in zip(axes, compared.items(), strict=True):
        t = t.assign(round=_round(t["setting"]))
        frame = t[["round", "method", "ours_last", "paper"]]
        ys = {"ours_last": "ours", "paper": "paper"}
        if t["paper"].isna().all():
            frame = frame.drop(columns="paper").merge(_paper_columns(paper, table, t),
                                                      on=["round", "method"], how="outer")
            ys = {"ours_last": "ours", **{c: f"paper, {c.removeprefix('paper_').upper()}"
                                          for c in frame.columns if c.startswith("paper_")}}
        plot_accuracy_vs(frame, "round", ys, group="method", ax=ax, xlabel="round",
                         order=order, legend=False,
                         title=f"{PAPER_NAMES.get(paper, paper)} Table {table.removeprefix('T')}\n"
                               f"ours ({dataset}) vs paper")
        ax.set_xticks(sorted(frame["round"].unique()))
    figure_legend(fig)
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
