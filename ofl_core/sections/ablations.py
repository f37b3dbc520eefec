"""The ablations notebook's server variants and figures: DENSE Tables 4 and 6 (and the paper
vs authors'-code server variants), FedCVAE Tables 6 and 7.

The notebook declares its runs (:class:`~ofl_core.tables.Run`); :func:`dense_methods` builds
the DENSE server variants those runs take, as ``(name, config, preset label)`` triples.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..dense.server import ABLATIONS, DenseConfig
from ..experiment import configure_methods
from ..plots import method_labels, plot_accuracy_vs, plot_grouped_bars, save_figure
from ..results import paper_results
from ..tables import MethodEntry, Tables

#: groups of DENSE server variants (see :func:`dense_methods`)
Methods = tuple[MethodEntry, ...]


def preset_label(cfg: DenseConfig) -> str:
    """Our preset label for a DENSE server variant: its preset, plus ``+kd_data=<mode>`` when
    the KD data is not the pool (e.g. ``"paper+kd_data=fresh"``: Algorithm 1 read literally)."""
    return cfg.preset + ("" if cfg.kd_data == "pool" else f"+kd_data={cfg.kd_data}")


def shared_init_label(preset: str) -> str:
    """The preset label of a FedCVAE Table 6 run on clients that all start from one
    initialisation: ``"shared_init=true"`` under ``paper`` (the label its records have always
    carried), ``"<preset>+shared_init=true"`` under any other preset (e.g. ``authors_code``)."""
    return "shared_init=true" if preset == "paper" else f"{preset}+shared_init=true"


def dense_methods(variants: Sequence[str], presets: Sequence[str], kd_data: Sequence[str],
                  server: Mapping[str, Any]) -> tuple[Methods, Methods, Methods]:
    """DENSE's server variants as ``(name, config, preset label)`` triples, three groups:

    - every variant run on the cross-entropy clients: DENSE Table 6's loss ablations
      (``variants``: ``dense``, ``dense-ce-only``, ``dense-no-bn``, ``dense-no-div``, record
      names from :attr:`DenseConfig.method_name`) at the paper preset, each other preset of
      ``presets`` (``authors_code``: every ⚑ field of DENSE's code) and each ``kd_data`` mode
      other than the paper preset's (``fresh``: Algorithm 1 read literally);
    - DENSE Table 4's "DENSE" row: the plain paper DENSE (the same run as Table 6's; empty when
      ``variants`` lacks ``dense``);
    - DENSE Table 4's "DENSE+LDAM" row: the plain paper DENSE labelled ``dense+ldam`` (to run
      on LDAM-trained clients).

    ``server``: the quick server sizes (``configure_methods`` common fields)."""
    ablation_of = {DenseConfig(ablation=a).method_name: a for a in ABLATIONS}
    unknown = sorted(set(variants) - set(ablation_of))
    if unknown:
        raise ValueError(f"dense_variants: unknown {unknown}; choose from {sorted(ablation_of)}")
    base = {p: cfg for p, (_, cfg) in zip(presets, configure_methods(["dense"], presets, server),
                                          strict=True)}
    paper = base.get("paper", DenseConfig.for_preset("paper", **server))
    cfgs = [dataclasses.replace(paper, ablation=ablation_of[v]) for v in variants]
    cfgs += [cfg for p, cfg in base.items() if p != "paper"]
    cfgs += [dataclasses.replace(paper, kd_data=k) for k in kd_data if k != paper.kd_data]
    every = tuple(("dense", c, preset_label(c)) for c in cfgs)
    t4 = tuple(m for m in every if m[1].method_name == "dense" and m[2] == "paper")
    ldam = (("dense", dataclasses.replace(paper, label="dense+ldam"), "paper"),)
    return every, t4, ldam


def _paper_bars(row: pd.Series, cells: pd.DataFrame) -> dict[str, float]:
    """The paper's bars for one of our rows: its cell for our dataset, else (no cell, e.g.
    FMNIST) the paper's numbers on its own datasets at the same α."""
    if pd.notna(row["paper"]):
        return {f"paper ({row['dataset']})": row["paper"]}
    ref = cells[(cells.method == row["method"])
                & (cells.alpha.map(lambda a: f"{a:g}") == str(row["alpha"]))]
    ref = ref.drop_duplicates("dataset")
    return {f"paper ({c.dataset})": c.accuracy for _, c in ref.iterrows()}


def save_dense_variants_figure(tables: Tables, dataset: str, figures_dir: str | os.PathLike
                               ) -> Path | None:
    """DENSE Tables 4/6: one group of bars per server variant (Table 6's rows, the presets, and
    Table 4's DENSE+LDAM): ours (last, best) beside the paper's numbers. Saved as
    ``dense_t4_t6_variants.png``; None when there is nothing to draw."""
    t6, t4 = tables.compare("dense", "T6"), tables.compare("dense", "T4")
    ours = pd.concat([t6, t4[t4.method == "dense+ldam"]], ignore_index=True)
    if ours.empty:
        return None
    ours["label"] = method_labels(ours)
    cells = pd.concat([paper_results("dense", "T6"), paper_results("dense", "T4")])
    bars = {label: {"ours (last)": g["ours_last"].mean(), "ours (best)": g["ours_best"].mean(),
                    **_paper_bars(g.iloc[0], cells)}
            for label, g in ours.groupby("label", sort=False)}
    fig = plot_grouped_bars(bars, f"DENSE Tables 4/6 variants: ours ({dataset}) vs paper")
    return save_figure(fig, figures_dir, "dense_t4_t6_variants")


def save_subsets_figure(tables: Tables, dataset: str, figures_dir: str | os.PathLike
                        ) -> Path | None:
    """FedCVAE Table 7: accuracy against the percentage of the training set given to the
    clients (ours and the paper's). Saved as ``fedcvae_t7_subsets.png``; None when empty."""
    ft7 = tables.compare("fedcvae", "T7")
    if ft7.empty:
        return None
    ft7["percent"] = ft7["setting"].str.extract(r"subset=([\d.]+)%")[0].astype(float)
    fig = plot_accuracy_vs(ft7, "percent", xlabel="% of the training set given to clients",
                           title=f"FedCVAE Table 7, {dataset}: accuracy vs subset")
    return save_figure(fig, figures_dir, "fedcvae_t7_subsets")


__all__ = ["dense_methods", "preset_label", "save_dense_variants_figure", "save_subsets_figure",
           "shared_init_label"]
