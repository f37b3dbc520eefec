"""The local-epochs notebook's bookkeeping: DENSE Fig. 3 and FedHydra Fig. 9 (accuracy of every
client, FedAvg and the distillation methods as the number of local epochs E varies).

The runs are one experiment per (α, seed, E) (setting ``local_epochs=<E>``), every method on
the same clients, labelled ``table="Fig3"`` (paper ``dense``) and ``"Fig9"`` (``fedhydra``).
These figures have no table cells, so everything here is ours only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from ..plots import accuracy_panels, save_figure
from ..tables import Tables

#: (paper, figure) → the methods it shows
Figures = Mapping[tuple[str, str], Sequence[str]]


def client_frame(tables: Tables) -> pd.DataFrame:
    """Each client's test accuracy per (α, seed, E), one row per client (the thin grey lines
    of DENSE Fig. 3 / FedHydra Fig. 9): columns alpha, seed, E, client, acc."""
    rows = [{"alpha": s.cfg.alpha, "seed": s.cfg.seed, "E": s.cfg.local.epochs, "client": k,
             "acc": a} for s in tables.setups for k, a in enumerate(s.client_accs)]
    return pd.DataFrame(rows, columns=["alpha", "seed", "E", "client", "acc"])


def records_by_e(tables: Tables) -> pd.DataFrame:
    """Our records (DENSE Fig. 3, FedHydra Fig. 9) as a frame with the local epochs ``E``
    parsed from the setting."""
    df = tables.frame()
    df["E"] = df["setting"].str.extract(r"local_epochs=(\d+)")[0].astype(int)
    return df


def figure_numbers(tables: Tables, figures: Figures) -> str:
    """Our numbers per E for DENSE Fig. 3 and FedHydra Fig. 9 (``paper`` is n/a: the figures
    have no table cells), as plain text."""
    cols = ["alpha", "setting", "method", "ours_last", "ours_best", "ensemble", "paper"]
    return "\n".join(f"\n{paper} {table}\n"
                     + tables.compare(paper, table)[cols].to_string(index=False)
                     for paper, table in figures)


def save_accuracy_vs_local_epochs(tables: Tables, figures: Figures, alphas: Sequence[float],
                                  dataset: str, figures_dir: str | os.PathLike) -> list[Path]:
    """DENSE Fig. 3 (left panel) and FedHydra Fig. 9: accuracy vs local epochs E, one panel
    per α (two per row) — each client (thin grey), each method's last-epoch accuracy, the
    teacher ensemble (dotted); one legend, right of the panels. Saved as
    ``<paper>_<fig>_accuracy_vs_local_epochs.png``; returns the paths."""
    df, cl = records_by_e(tables), client_frame(tables)
    cl = cl.groupby(["alpha", "E", "client"])["acc"].mean().reset_index()
    paths = []
    for (paper, table), names in figures.items():
        fig, axes = accuracy_panels(len(alphas))
        for ax, alpha in zip(axes, alphas, strict=True):
            for k, g in cl[cl.alpha == alpha].groupby("client"):
                ax.plot(g["E"], g["acc"], "-", color="0.65", lw=1,
                        label="clients" if k == 0 else None)
            d = df[(df.paper == paper) & (df.table == table) & (df.alpha == alpha)]
            for m in names:
                g = d[d.method == m].groupby("E")[["last_acc", "best_acc"]].mean()
                ax.plot(g.index, g["last_acc"], "-o", ms=4, label=f"{m} (last)")
            ens = d.groupby("E")["ensemble_acc"].mean()
            ax.plot(ens.index, ens.values, ":", color="k", label="ensemble (teacher)")
            ax.set_xlabel("local epochs E")
            ax.set_ylabel("test accuracy (%)")
            ax.set_ylim(0, 100)
            ax.set_xticks(sorted(df["E"].unique()))
            ax.set_title(f"{paper} {table}, {dataset}, α={alpha}", fontsize=9)
            ax.grid(alpha=0.3)
        fig.legend(handles=axes[0].get_legend_handles_labels()[0], loc="outside right upper",
                   fontsize=7, frameon=False)
        paths.append(save_figure(fig, figures_dir,
                                 f"{paper}_{table.lower()}_accuracy_vs_local_epochs"))
    return paths


def local_epochs_summary(tables: Tables, figures: Figures) -> str:
    """Our mean per (figure, α, method, E), then the papers' claims checked: does each
    distillation method beat the best client (DENSE Fig. 3, FedHydra Fig. 9), and at which E
    does FedAvg peak. Plain text."""
    df = records_by_e(tables)
    summary = df.groupby(["paper", "table", "alpha", "method", "E"])[["last_acc", "best_acc"]]
    lines = [summary.mean().round(2).to_string()]
    best_client = client_frame(tables).groupby(["alpha", "E"])["acc"].max()
    for (paper, table), names in figures.items():
        for m in names:
            if m == "fedavg":
                continue
            s = df[(df.paper == paper) & (df.table == table) & (df.method == m)]
            s = s.groupby(["alpha", "E"])["last_acc"].mean()
            beats = int((s > best_client.loc[s.index]).sum())
            lines.append(f"{paper} {table}: {m} beats the best client at {beats}/{len(s)} "
                         "(α, E) settings")
        fa = df[(df.paper == paper) & (df.table == table) & (df.method == "fedavg")]
        if len(fa):
            peak = fa.groupby("E")["last_acc"].mean()
            lines.append(f"{paper} {table}: FedAvg peaks at E = {peak.idxmax()} "
                         f"({peak.max():.2f})")
    return "\n".join(lines)


__all__ = ["client_frame", "figure_numbers", "local_epochs_summary", "records_by_e",
           "save_accuracy_vs_local_epochs"]
