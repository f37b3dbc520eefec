"""The heterogeneous-models notebook (``notebooks/heterogeneous_models.py``): which FedHydra
table a partition fills (Tables 3/6/7), FedCVAE Fig. 4's homogeneous-vs-heterogeneous CVAE
runs, the "FedAvg and OT fusion refuse heterogeneous clients" check, the papers' cells printed
for comparison and the figures."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..experiment import ExperimentConfig, Setup, configure_methods, run_methods
from ..fedcvae.clients import heterogeneous_variants
from ..heterogeneous import paper_arch_name
from ..plots import plot_grouped_bars, save_figure, save_paper_vs_ours
from ..registry import METHODS
from ..results import paper_results
from ..tables import Run, Serves, Tables
from .fedcvae_runs import client_config

#: the heterogeneous-model tables whose cells the notebook prints
PAPER_TABLES = (("dense", "T2"), ("fedhydra", "T3"), ("fedhydra", "T6"), ("fedhydra", "T7"))


def fedhydra_partitions(alphas: Sequence[float], two_classes: bool, dataset: str
                        ) -> list[tuple[dict[str, Any], str]]:
    """(ExperimentConfig partition fields, FedHydra table) per heterogeneous FedHydra cell:
    Table 3 (CIFAR10) or Table 6 (SVHN) for each Dirichlet α, Table 7 for 2c/c."""
    table = "T6" if dataset.startswith("svhn") else "T3"
    out = [({"partition": "dirichlet", "alpha": a}, table) for a in alphas]
    if two_classes:
        out.append(({"partition": "classes_per_client", "alpha": None}, "T7"))
    return out


def fedcvae_fig4_runs(experiment: ExperimentConfig, methods: Sequence[tuple[str, Any]], *,
                      cvae: dict[str, Any] | None = None) -> list[Run]:
    """FedCVAE Fig. 4 as runs: per method, all clients on the standard CVAE (homogeneous: the
    FedCVAE Table 1 setting, so those records fill ``T1``) and each client's variant drawn at
    random between ``cvae`` and ``cvae_small`` (seeded by the experiment's seed; records
    ``Fig4``, the experiment's setting ``models=heterogeneous``), on the same partition.
    Prints the drawn variants."""
    variants = heterogeneous_variants(experiment.num_clients, experiment.seed)
    print(f"{experiment.dataset} seed {experiment.seed}: heterogeneous client variants "
          f"{variants}")
    runs = []
    for name, cfg in methods:
        base = client_config(name, experiment.dataset, getattr(cfg, "preset", "paper"), cvae)
        runs.append(Run(experiment, ((name, cfg),), (Serves("fedcvae", "T1"),), clients=base))
        runs.append(Run(dataclasses.replace(experiment, setting="models=heterogeneous"),
                        ((name, cfg),), (Serves("fedcvae", "Fig4"),),
                        clients=[dataclasses.replace(base, variant=v) for v in variants]))
    return runs


def refuse_heterogeneous(tables: Tables, methods: Sequence[str] | None = None) -> None:
    """DENSE Table 2 / FedHydra Table 3's premise: the methods that average parameters tensor by
    tensor (``methods``; None = every method declared ``homogeneous``: FedAvg, OT fusion) must
    raise a clear ``ValueError`` on the first heterogeneous-classifier setup; prints what each
    did."""
    if methods is None:
        methods = [n for n, s in METHODS.items() if s.homogeneous]
    setup: Setup | None = next((s for s in tables.setups if s.cfg.archs is not None), None)
    if setup is None:
        print("no heterogeneous classifier clients: nothing to refuse")
        return
    for m in methods:
        try:
            run_methods(setup, configure_methods([m]))
            print(f"{m}: UNEXPECTEDLY accepted heterogeneous clients")
        except ValueError as e:
            print(f"{m} refused, as it must: {e}")


def comparisons(tables: Tables, dataset: str, server_arch: str,
                figures_dir: str | os.PathLike) -> dict[tuple[str, str], pd.DataFrame]:
    """Ours beside DENSE Table 2 and FedHydra Tables 3/6/7 for every such table with records;
    each saved as ``<paper>_<table>_paper_vs_ours.png``. DENSE Table 2 is returned (shown by
    the notebook), the FedHydra tables are printed."""
    out = {}
    for paper, table in dict.fromkeys((r.paper, r.table) for r in tables.records):
        if paper == "fedcvae":
            continue
        out[(paper, table)] = t = tables.compare(paper, table)
        save_paper_vs_ours(t, f"{paper} {table} (heterogeneous models), {dataset}, server "
                           f"{server_arch}: ours vs paper", figures_dir,
                           f"{paper}_{table.lower()}_paper_vs_ours")
        if paper != "dense":
            print(f"{paper} {table}:")
            print(t.to_string())
    return out


def print_paper_cells(archs: Sequence[str]) -> None:
    """The papers' cells of DENSE Table 2 and FedHydra Tables 3, 6, 7 (method × dataset, α),
    and our architecture names → the papers'."""
    for paper, table in PAPER_TABLES:
        cells = paper_results(paper, table)
        cells = cells.assign(alpha=cells.alpha.fillna(-1).map(lambda a: "2c/c" if a < 0 else a))
        print(f"paper {paper} {table} ({', '.join(sorted(set(cells.dataset)))}):")
        print(cells.pivot_table(index="method", columns=["dataset", "alpha"],
                                values="accuracy", sort=False).to_string())
    print("our architecture names → the papers':",
          {a: paper_arch_name(a) for a in dict.fromkeys(archs)})


def fedcvae_fig4(tables: Tables, figures_dir: str | os.PathLike) -> pd.DataFrame | None:
    """FedCVAE Fig. 4: mean last accuracy of FedCVAE-Ens/-KD with homogeneous vs heterogeneous
    CVAEs (per method and data source), printed and drawn as ``fedcvae_fig4.png``; None
    without FedCVAE records."""
    frame = tables.frame()
    frame = frame[frame.paper == "fedcvae"].copy()
    if frame.empty:
        return None
    frame["models"] = frame.setting.map(lambda s: "heterogeneous" if s else "homogeneous")
    sources = frame.data_source.unique()
    frame["group"] = (frame.method if len(sources) == 1
                      else frame.method + "\n(" + frame.data_source + ")")
    fig4 = frame.groupby(["group", "models"]).last_acc.mean().unstack()
    fig4 = fig4[[c for c in ("homogeneous", "heterogeneous") if c in fig4]]
    print(fig4.round(2).to_string())
    on = f"\n(clients on {sources[0]})" if len(sources) == 1 else ""
    fig = plot_grouped_bars(fig4.to_dict("index"),
                            f"FedCVAE Fig. 4: homogeneous vs heterogeneous local CVAEs{on}")
    save_figure(fig, figures_dir, "fedcvae_fig4")
    return fig4


__all__ = ["PAPER_TABLES", "comparisons", "fedcvae_fig4", "fedcvae_fig4_runs",
           "fedhydra_partitions", "print_paper_cells", "refuse_heterogeneous"]
