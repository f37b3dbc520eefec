"""The client-scaling notebook's figure and summaries: DENSE Table 3, FedHydra Table 4 and
FedCVAE Tables 2 and 5 (accuracy against the number of clients m).

The runs themselves are declared in the notebook (one experiment per m and seed for DENSE T3 /
FedHydra T4; :func:`~ofl_core.sections.fedcvae_runs.fedcvae_runs` for FedCVAE T2 and T5); these
functions only read the :class:`~ofl_core.tables.Tables` that ``run_tables`` returned.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ..plots import (
    accuracy_panels,
    figure_legend,
    method_labels,
    plot_accuracy_vs,
    save_figure,
)
from ..results import paper_results, records_frame
from ..tables import Tables

#: (title, paper, table) of the tables drawn and summarised against m
SCALING_TABLES = (("DENSE Table 3", "dense", "T3"), ("FedHydra Table 4", "fedhydra", "T4"),
                  ("FedCVAE Table 2", "fedcvae", "T2"))


def fedcvae_spread(tables: Tables) -> pd.DataFrame:
    """FedCVAE Tables 2 and 5: our mean ± std (and count) of the last-epoch accuracy per
    (table, dataset, m, method, preset) beside the paper's mean and ± (Table 2: over
    initialisation seeds on one partition; Table 5: over data partitions)."""
    frame = records_frame(r for r in tables.records if r.paper == "fedcvae")
    if frame.empty:
        return pd.DataFrame()
    ours = (frame.groupby(["table", "dataset", "num_clients", "method", "preset"])["last_acc"]
            .agg(["mean", "std", "count"]).round(2).reset_index())
    cells = paper_results("fedcvae")
    cells = cells[cells.table.isin(["T2", "T5"])][
        ["table", "dataset", "num_clients", "method", "accuracy", "std"]]
    return (ours.merge(cells, on=["table", "dataset", "num_clients", "method"], how="left",
                       suffixes=("", "_paper")).rename(columns={"accuracy": "paper"}))


def _panel(ax: plt.Axes, t: pd.DataFrame, title: str, paper: str, table: str,
           order: list[str]) -> None:
    """One table's panel: ours (solid) and the paper's cells (dashed); where the table has no
    cell for our dataset, the paper's CIFAR10 numbers (the trend only), dotted. ``order``: the
    method labels of every panel (one colour each)."""
    t = t.assign(label=method_labels(t))
    source = t["data_source"].iloc[0]
    if t["paper"].notna().any():
        plot_accuracy_vs(t, "num_clients", group="label", ax=ax, order=order, legend=False,
                         title=f"{title}\nours on {source} vs paper")
    else:
        ref = paper_results(paper, table)
        ref = ref[(ref.dataset == "cifar10") & ref.method.isin(t["method"])
                  & (ref.num_clients <= max(t["num_clients"]))]
        frame = pd.concat([t[["label", "num_clients", "ours_last"]],
                           ref.rename(columns={"method": "label", "accuracy": "paper_cifar10"})
                           [["label", "num_clients", "paper_cifar10"]]], ignore_index=True)
        plot_accuracy_vs(frame, "num_clients", {"ours_last": "ours",
                                                "paper_cifar10": "paper, CIFAR10"},
                         group="label", ax=ax, order=order, styles=["-o", ":^"], legend=False,
                         title=f"{title}\nours on {source}, paper on CIFAR10")
    ax.set_xticks(sorted(set(t["num_clients"])))
    ax.set_xlabel("number of clients m")


def save_accuracy_vs_clients(tables: Tables, figures_dir: str | os.PathLike) -> Path:
    """Accuracy against m, one panel per table of :data:`SCALING_TABLES` that has records
    (DENSE T3, FedHydra T4, FedCVAE T2), one legend for all (a method keeps its colour);
    saved as ``accuracy_vs_clients.png``."""
    panels = [(title, paper, table, tables.compare(paper, table))
              for title, paper, table in SCALING_TABLES]
    panels = [p for p in panels if not p[3].empty]
    order = list(dict.fromkeys(label for *_, t in panels for label in method_labels(t)))
    fig, axes = accuracy_panels(len(panels))
    for ax, (title, paper, table, t) in zip(axes, panels, strict=True):
        _panel(ax, t, title, paper, table, order)
    figure_legend(fig)
    return save_figure(fig, figures_dir, "accuracy_vs_clients")


def scaling_summary(tables: Tables) -> str:
    """The papers' claim checked per table (DENSE T3, FedHydra T4, FedCVAE T2): the best method
    at each m, and each method's last-epoch accuracy at the smallest and the largest m."""
    lines = []
    for _, paper, table in SCALING_TABLES:
        t = tables.compare(paper, table)
        if t.empty:
            continue
        ms = sorted(set(t["num_clients"]))
        lo = t[t.num_clients == ms[0]].set_index(["method", "preset"])["ours_last"]
        hi = t[t.num_clients == ms[-1]].set_index(["method", "preset"])["ours_last"]
        best = t.loc[t.groupby("num_clients")["ours_last"].idxmax(), ["num_clients", "method"]]
        name = {"dense": "DENSE", "fedhydra": "FedHydra", "fedcvae": "FedCVAE"}[paper]
        lines.append(f"{name} {table}: best method per m: "
                     + ", ".join(f"m={r.num_clients}: {r.method}" for r in best.itertuples()))
        lines += [f"  {key[0]:<12} ({key[1]}) m={ms[0]}: {lo[key]:6.2f}  "
                  f"m={ms[-1]}: {hi.get(key, float('nan')):6.2f}" for key in lo.index]
    return "\n".join(lines)


__all__ = ["SCALING_TABLES", "fedcvae_spread", "save_accuracy_vs_clients", "scaling_summary"]
