"""FedHydra's 2c/c notebook (``notebooks/two_classes_per_client.py``): Fig. 6b (the
stratified weights Ū_r), Fig. 7 (accuracy over distillation epochs), Fig. 8 (the averaging vs
the stratified-aggregation ensemble) and the Table 2 verdicts, from a
:class:`~ofl_core.tables.Tables`; the stratification diagnostics and the teacher ×
regime table (:mod:`ofl_core.sections.teacher_regime`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ..distill.config import TeacherConfig
from ..distill.stratification import Stratification, block_structure, stratify
from ..distill.stratified_aggregation import SAEnsemble
from ..experiment import Setup
from ..fedhydra.diagnostics import loss_curves_frame, own_class_ratios, stratification_frame
from ..plots import plot_curves, plot_grouped_bars, plot_heatmap, save_figure
from ..project import results_dir
from ..tables import Tables
from ..uploads import build_from_upload
from . import teacher_regime as tr


def hydra_label(rescale: bool) -> str:
    """FedHydra's preset label in Table 2 (FedHydra T2): ``"paper"`` (Eqs. 8–11 literally)
    or ``"paper+sa_rescale"`` (SA logits × C)."""
    return "paper+sa_rescale" if rescale else "paper"


def hydra_key(tables: Tables) -> str | None:
    """The record name (with its preset label) of the first FedHydra result, or None when
    FedHydra did not run (FedHydra Figs. 6b and 8 need its extras)."""
    return next((k for _, k in tables.results if k.startswith("fedhydra")), None)


def fig6b_block_check(tables: Tables, setup: Setup, figures_dir: str | os.PathLike,
                      title: str) -> dict | None:
    """FedHydra Fig. 6b: draw Ū_r (classes × clients) of the first FedHydra run on ``setup``'s
    2c/c clients (``fedhydra_fig6b_U_r.png``) and print the block check — for every client,
    are its largest weights its own classes? Returns :func:`block_structure`'s dict (None
    without FedHydra)."""
    key = hydra_key(tables)
    if key is None:
        print("FedHydra did not run: no Ū_r")
        return None
    U_r = tables.result(key).extras["U_r"]
    fig = plot_heatmap(U_r, title, "client", "class",
                       yticklabels=list(setup.dataset.classes) or None)
    save_figure(fig, figures_dir, "fedhydra_fig6b_U_r")
    counts = setup.partition.counts
    check = block_structure(U_r, counts)
    m = len(counts)
    owners = {k: [j for j in range(len(U_r)) if counts[k][j] > 0] for k in range(m)}
    print("client → its classes:", owners)
    print("per client, its top weights are its own classes:", check["client_top_are_own"])
    print("per class, the largest weight is on its owner:", check["class_argmax_is_owner"])
    print("weight on the owner per class:", [round(w, 3) for w in check["owner_weight"]])
    print(f"Ū_r BLOCK-STRUCTURED: {check['block_structured']} "
          f"({sum(check['client_top_are_own'])}/{m} clients, "
          f"{sum(check['class_argmax_is_owner'])}/{len(U_r)} classes)")
    return check


def fig7_curves(tables: Tables, figures_dir: str | os.PathLike, title: str) -> dict:
    """FedHydra Fig. 7: the server model's test accuracy per distillation epoch of every method
    of the first run (FedAvg has none), saved as ``fig7_curves.png``; returns the curves."""
    curves = {k: v.curve for (i, k), v in tables.results.items() if i == 0 and v.curve}
    save_figure(plot_curves(curves, title), figures_dir, "fig7_curves")
    return curves


def fig8_ae_vs_sa(tables: Tables, *, server: Mapping[str, Any], classes_per_client: int,
                  figures_dir: str | os.PathLike, title: str) -> pd.DataFrame:
    """FedHydra Fig. 8: the averaging ensemble (AE, mean logits) vs the stratified-aggregation
    ensemble (SA) on real test data. Every Dirichlet setup of ``tables`` is stratified here
    with FedHydra's sizes from the notebook's ``server`` (``strat_steps``, ``strat_batch_size``;
    a missing one: FedHydra's paper default), seed = the setup's; the 2c/c cells come from
    FedHydra's own result extras (one per 2c/c run). Prints and returns the mean over seeds per
    setting (with ``SA − AE``) and saves ``fig8_ae_vs_sa.png``."""
    steps = server.get("strat_steps") or TeacherConfig.strat_steps
    batch = server.get("strat_batch_size") or TeacherConfig.strat_batch_size
    rows = []
    for s in tables.setups:
        if not s.cfg.partition.startswith("dirichlet"):
            continue
        models = [build_from_upload(u, s.device) for u in s.uploads]
        ds = s.dataset
        st = stratify(models, ds.num_classes, ds.channels, ds.image_size, steps=steps,
                      batch_size=batch, seed=s.cfg.seed, device=s.device)
        sa = s.context().evaluate(SAEnsemble(models, st.U_r, st.U_c))
        rows.append({"setting": f"α={s.cfg.alpha}", "seed": s.cfg.seed, "AE": s.ensemble_acc,
                     "SA": sa})
    key = hydra_key(tables)
    if key is not None:
        rows += [{"setting": f"{classes_per_client}c/c", "AE": res.extras["mean_ensemble_acc"],
                  "SA": res.extras["sa_ensemble_acc"]}
                 for (_, k), res in tables.results.items() if k == key]
    fig8 = pd.DataFrame(rows).groupby("setting", sort=False)[["AE", "SA"]].mean()
    fig8["SA − AE"] = fig8["SA"] - fig8["AE"]
    print(fig8.round(2).to_string())
    save_figure(plot_grouped_bars(fig8[["AE", "SA"]].to_dict("index"), title), figures_dir,
                "fig8_ae_vs_sa")
    return fig8


def verdicts(tables: Tables, fig8: pd.DataFrame, sa_rescale: Sequence[bool]) -> pd.DataFrame:
    """The notebook's printed verdicts: does SA beat AE (FedHydra Fig. 8), and does FedHydra
    (each ``sa_rescale``) beat DENSE on the same 2c/c clients (FedHydra Table 2)? Returns the
    mean last/best accuracy per (method, preset)."""
    wins = int((fig8["SA − AE"] > 0).sum())
    print(f"SA ensemble beats the mean (AE) ensemble in {wins}/{len(fig8)} settings: "
          + "; ".join(f"{k}: SA {r.SA:.2f} vs AE {r.AE:.2f} ({r['SA − AE']:+.2f})"
                      for k, r in fig8.iterrows()))
    summary = tables.frame().groupby(["method", "preset"])[["last_acc", "best_acc"]].mean()
    print(summary.round(2).to_string())
    if ("dense", "paper") not in summary.index:
        return summary
    d = summary.loc[("dense", "paper")]
    for rescale in sa_rescale:
        if ("fedhydra", hydra_label(rescale)) not in summary.index:
            continue
        h = summary.loc[("fedhydra", hydra_label(rescale))]
        verdict = "BEATS" if h.last_acc > d.last_acc else "does NOT beat"
        print(f"FedHydra (sa_rescale={rescale}) {verdict} DENSE on the same 2c/c clients: "
              f"last {h.last_acc:.2f} vs {d.last_acc:.2f} ({h.last_acc - d.last_acc:+.2f}), "
              f"best {h.best_acc:.2f} vs {d.best_acc:.2f} ({h.best_acc - d.best_acc:+.2f})")
    return summary


def plot_stratification(curves: pd.DataFrame, frame: pd.DataFrame, title: str) -> Figure:
    """Alg. 2's loss curves L_kj, one panel per client (log scale; solid = a class the client
    holds, dashed = the others), three panels a row, and Ū_c (classes × clients) in the last
    panel; one legend for all, outside the panels."""
    m = int(curves.client.max()) + 1
    cols = min(m + 1, 3)
    rows = -(-(m + 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols + 1.6, 2.9 * rows),
                             squeeze=False, layout="constrained")
    flat = axes.ravel()
    for k, ax in enumerate(flat[:m]):
        sub = curves[curves.client == k]
        sns.lineplot(sub, x="step", y="loss", hue="class", style="owned", palette="tab10",
                     style_order=[True, False], legend=k == 0, ax=ax)
        ax.set_yscale("log")
        ax.set_title(f"client {k}", fontsize=10)
    if flat[0].get_legend() is not None:
        handles, labels = flat[0].get_legend_handles_labels()
        flat[0].get_legend().remove()
        labels = [{"owned": "client holds the class", "True": "yes (solid)",
                   "False": "no (dashed)"}.get(lab, lab) for lab in labels]
        fig.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False)
    U_c = frame.pivot(index="class", columns="client", values="U_c")
    sns.heatmap(U_c, annot=True, fmt=".2f", annot_kws={"fontsize": 7}, cbar=False,
                ax=flat[m])
    flat[m].set_title("Ū_c (classes × clients)", fontsize=10)
    for ax in flat[m + 1:]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    return fig


def stratification_diagnostics(tables: Tables, setup: Setup, figures_dir: str | os.PathLike,
                               title: str) -> pd.DataFrame | None:
    """What model stratification (Alg. 2) measured on ``setup``'s clients, from the
    first FedHydra run's loss curves: the curves and Ū_c (``fedhydra_stratification.png``), and
    per client the Ū_c ratio between the classes it owns (Eq. 2's u grows like 1/min L, so
    Ū_c can keep one own class and silence the other). Returns the (client, class) frame of
    :func:`~ofl_core.fedhydra.diagnostics.stratification_frame` (None without FedHydra)."""
    key = hydra_key(tables)
    if key is None:
        print("FedHydra did not run: no stratification")
        return None
    strat = Stratification.from_losses(tables.result(key).extras["strat_losses"])
    counts = setup.partition.counts
    frame = stratification_frame(strat, counts)
    fig = plot_stratification(loss_curves_frame(strat, counts), frame, title)
    save_figure(fig, figures_dir, "fedhydra_stratification")
    ratios = own_class_ratios(frame)
    print("Ū_c between each client's own classes (max / min; 1 = equal weight):")
    print(ratios.round(3).to_string(index=False))
    print("owner's share of Ū_r per class:", frame[frame.owned].groupby("class").U_r.sum()
          .round(3).tolist())
    return frame


def teacher_regime_report(path: str | os.PathLike | None, figures_dir: str | os.PathLike,
                          title: str, name: str = "teacher_regime_2cc",
                          default: str = tr.RESULTS,
                          command: str = "scripts/evidence/fedhydra_teacher_regime.py"
                          ) -> pd.DataFrame | None:
    """FedHydra's teacher × regime table from a results file of
    ``scripts/evidence/fedhydra_teacher_regime.py`` (``path``; None = ``default``, a file of
    the checkout's ``results/``: the committed quick table): its scale and wall time when
    recorded, the table per setting (mean ± std over seeds of the last and best accuracy), the
    teacher panel, the verdict (non-diagnostic FedHydra variants vs DENSE on 2c/c) and
    ``<name>.png``. Returns the table (None when the file does not exist: then it names the
    ``command`` that writes it)."""
    p = results_dir() / default if path is None else Path(path)
    if not os.path.exists(p):
        print(f"no results at {p}: run {command}")
        return None
    data = tr.load_results(p)
    table = tr.summarise(data)
    if data.get("scale"):
        print("scale:", data["scale"])
    print("server:", data["server"], "| clients' precision:",
          data.get("clients", {}).get("precision", "?"), "| wall time:", tr.wall_time(data))
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        print(table[["setting", "variant", "n", "last", "best"]].to_string(index=False))
        print("teacher panel (no distillation; true_label_leaky uses the test labels):")
        print(tr.panel_summary(data).to_string(index=False))
    v = tr.verdict(data)
    if not v.empty:
        top = v.iloc[0]
        print(f"{int(v.beats_dense.sum())}/{len(v)} FedHydra variants beat DENSE on 2c/c "
              f"(mean last); best: {top.variant} {top['last']:.2f} vs DENSE "
              f"{top.dense_last:.2f} over {top.n} seeds")
    save_figure(plot_variant_bars(table[table.setting == "2c/c"], title), figures_dir, name)
    return table


def plot_variant_bars(table: pd.DataFrame, title: str) -> Figure:
    """Mean last accuracy ± std over seeds per variant (rows of :func:`summarise`), as
    horizontal bars: DENSE dark, the paper preset red, diagnostics (the oracle) hatched; the
    mean best accuracy as a tick, DENSE's mean last as a dashed line; a legend says which is
    which."""
    from matplotlib.patches import Patch

    t = table.iloc[::-1]
    fig, ax = plt.subplots(figsize=(8.5, 1.0 + 0.3 * len(t)), layout="constrained")
    colour = ["0.25" if v == tr.DENSE.label else "C3" if v == tr.PAPER.label else "C0"
              for v in t.variant]
    bars = ax.barh(t.variant, t.last_mean, xerr=t.last_std.fillna(0), color=colour,
                   error_kw={"elinewidth": 0.7})
    for b, diag in zip(bars, t.diagnostic, strict=True):
        if diag:
            b.set_hatch("//")
    ax.plot(t.best_mean, t.variant, "k|", markersize=8)
    dense = t[t.variant == tr.DENSE.label]
    if not dense.empty:
        ax.axvline(float(dense.last_mean.iloc[0]), color="0.25", lw=0.8, ls="--")
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("test accuracy (%), mean last epoch ± std over seeds")
    handles = [Patch(color="0.25", label=f"DENSE ({tr.DENSE.label}); dashed: its mean"),
               Patch(color="C3", label=f"FedHydra, the paper's reading ({tr.PAPER.label})"),
               Patch(color="C0", label="FedHydra, other teacher / regime"),
               Patch(facecolor="white", edgecolor="k", hatch="//",
                     label="diagnostic only (oracle: the clients' label counts)"),
               plt.Line2D([], [], color="k", marker="|", ls="", markersize=8,
                          label="mean best epoch")]
    # the longest bars are at the top: the legend sits over the short ones
    ax.legend(handles=handles, fontsize=8, loc="lower right", framealpha=0.95)
    ax.set_title(title, fontsize=10)
    return fig


__all__ = ["fig6b_block_check", "fig7_curves", "fig8_ae_vs_sa", "hydra_key", "hydra_label",
           "plot_stratification", "plot_variant_bars", "stratification_diagnostics",
           "teacher_regime_report",
           "verdicts"]
