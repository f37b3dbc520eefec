"""The notebooks' figures (seaborn on matplotlib axes; no global style changes)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure


def save_figure(fig: Figure, figures_dir: str | os.PathLike, name: str) -> Path:
    """Save ``fig`` as ``<figures_dir>/<name>.png`` (folders created) and return the path."""
    d = Path(figures_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def plot_partition(counts: np.ndarray, title: str = "", ax: plt.Axes | None = None,
                   class_names: Sequence[str] | None = None) -> plt.Axes:
    """Bubble chart of a client×class count matrix (DENSE Figs. 4–5 right, FedCVAE Fig. 3):
    one column per client, one row per class, dot area ∝ samples."""
    counts = np.asarray(counts)
    m, C = counts.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.5 * m, 0.4 * C + 1))
    cc, kk = np.meshgrid(np.arange(C), np.arange(m))
    size = counts / max(counts.max(), 1) * 300
    ax.scatter(kk.ravel(), cc.ravel(), s=size.ravel(), c="tab:red", alpha=0.7)
    ax.set_xticks(range(m))
    ax.set_yticks(range(C))
    if class_names is not None and len(class_names) == C and C <= 20:
        ax.set_yticklabels(class_names, fontsize=7)
    ax.set_xlim(-0.6, m - 0.4)
    ax.set_ylim(-0.6, C - 0.4)
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return ax


def plot_partitions(partitions: Mapping[str, np.ndarray],
                    class_names: Sequence[str] | None = None) -> Figure:
    """Side-by-side bubble charts of several count matrices, keyed by a title."""
    n = len(partitions)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 4), squeeze=False)
    for i, (ax, (title, counts)) in enumerate(zip(axes[0], partitions.items(), strict=True)):
        plot_partition(counts, title, ax, class_names)
        if i:
            ax.set_ylabel("")
            ax.tick_params(labelleft=False)
    fig.tight_layout()
    return fig


def _legend_outside(ax: plt.Axes) -> None:
    """The legend to the right of the axes, where it covers no data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def _bars(ax: plt.Axes, long: pd.DataFrame, x: str, order: Sequence[str],
          hue_order: Sequence[str], palette: Mapping[str, str] | None = None) -> None:
    """Grouped bars (seaborn) of a long frame with columns ``x``, ``series`` and ``value``:
    one bar per ``x`` × series, a missing value drawn as an empty bar marked "n/a"; the legend
    to the right of the axes, where it covers no bar."""
    full = pd.MultiIndex.from_product([order, hue_order], names=[x, "series"])
    long = long.set_index([x, "series"])["value"].reindex(full).reset_index()
    missing = long["value"].isna().to_numpy()
    sns.barplot(long.fillna({"value": 0.0}), x=x, y="value", hue="series", order=order,
                hue_order=hue_order, palette=palette, errorbar=None, legend=False, ax=ax)
    for container, name in zip(ax.containers, hue_order, strict=True):
        container.set_label(name)
        for bar, pos in zip(container, np.arange(len(order)), strict=True):
            if missing[pos * len(hue_order) + hue_order.index(name)]:
                ax.text(bar.get_x() + bar.get_width() / 2, 1, "n/a", ha="center",
                        va="bottom", fontsize=7, rotation=90)
    _legend_outside(ax)


def method_labels(table: pd.DataFrame) -> pd.Series:
    """Each row's method, with its preset in brackets unless it is the paper's."""
    return table["method"] + np.where(table["preset"] != "paper",
                                      " (" + table["preset"] + ")", "")


def plot_paper_vs_ours(table: pd.DataFrame, title: str = "") -> Figure:
    """Grouped bars per method: the paper's number and ours (last and best epoch)."""
    t = table.copy()
    t["label"] = method_labels(t)
    if t["alpha"].nunique() > 1:
        t["label"] = t["label"] + " α=" + t["alpha"].astype(str)
    rows = [str(i) for i in range(len(t))]  # one group per row, even where labels repeat
    series = {"paper": "paper", "ours_last": "ours (last)", "ours_best": "ours (best)"}
    long = pd.DataFrame([(r, name, v) for col, name in series.items()
                         for r, v in zip(rows, t[col], strict=True)],
                        columns=["row", "series", "value"])
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(t)), 3.4))
    _bars(ax, long, "row", rows, list(series.values()),
          {"paper": "0.6", "ours (last)": "tab:blue", "ours (best)": "tab:cyan"})
    ax.set_xticks(range(len(t)))
    ax.set_xticklabels(t["label"], rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_curves(curves: Mapping[str, Sequence[float]], title: str = "",
                ylabel: str = "test accuracy (%)") -> Figure:
    """Test-accuracy curves over server epochs, one line per label."""
    long = pd.DataFrame([(label, e, float(v)) for label, c in curves.items()
                         for e, v in enumerate(c, 1)], columns=["label", "epoch", "value"])
    fig, ax = plt.subplots(figsize=(5, 3.4))
    if not long.empty:
        sns.lineplot(long, x="epoch", y="value", hue="label", hue_order=list(curves),
                     estimator=None, ax=ax)
        _legend_outside(ax)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_image_grid(images: np.ndarray, nrow: int = 8, title: str = "") -> Figure:
    """A grid of images given as float (N, C, H, W) in [0, 1]."""
    imgs = np.asarray(images)
    n = len(imgs)
    ncol = min(nrow, n)
    rows = int(np.ceil(n / ncol))
    fig, axes = plt.subplots(rows, ncol, figsize=(ncol * 0.9, rows * 0.9), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for i in range(n):
        img = imgs[i].transpose(1, 2, 0)
        ax = axes.ravel()[i]
        if img.shape[-1] == 1:
            ax.imshow(img[..., 0], cmap="gray", vmin=0, vmax=1)
        else:
            ax.imshow(np.clip(img, 0, 1))
    fig.suptitle(title, fontsize=9)
    return fig


def plot_heatmap(matrix: np.ndarray, title: str = "", xlabel: str = "", ylabel: str = "",
                 xticklabels: Sequence[str] | None = None,
                 yticklabels: Sequence[str] | None = None, annotate: bool = True,
                 cmap: str = "viridis") -> Figure:
    """A matrix as a heat map with a colour bar (e.g. FedHydra Fig. 6b: Ū_r, classes ×
    clients), each cell annotated with its value when ``annotate``."""
    a = np.asarray(matrix, dtype=float)
    rows, cols = a.shape
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * cols, 0.8 + 0.4 * rows))
    sns.heatmap(a, cmap=cmap, annot=annotate and a.size <= 400, fmt=".2f",
                annot_kws={"fontsize": 6}, cbar_kws={"fraction": 0.05}, ax=ax,
                xticklabels=list(xticklabels) if xticklabels is not None else True,
                yticklabels=list(yticklabels) if yticklabels is not None else True)
    ax.tick_params(labelsize=8)
    ax.tick_params(axis="y", labelrotation=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_histograms(values: Mapping[str, Sequence[float]], title: str = "", xlabel: str = "",
                    bins: int = 30) -> Figure:
    """Overlaid density histograms on shared bins, one per label (e.g. nearest-neighbour
    distances of synthetic images vs real test images)."""
    arrays = {k: np.asarray(v, dtype=float).ravel() for k, v in values.items()}
    allv = np.concatenate([a for a in arrays.values() if a.size] or [np.zeros(1)])
    edges = np.histogram_bin_edges(allv, bins=bins)
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for label, a in arrays.items():
        if a.size:
            sns.histplot(a, bins=edges, stat="density", alpha=0.5, linewidth=0,
                         color=f"C{list(arrays).index(label) % 10}",
                         label=f"{label} (n={a.size})", ax=ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.set_title(title, fontsize=9)
    _legend_outside(ax)
    fig.tight_layout()
    return fig


def plot_grouped_bars(values: Mapping[str, Mapping[str, float]], title: str = "",
                      ylabel: str = "test accuracy (%)", ylim: tuple[float, float] | None = (0, 100)
                      ) -> Figure:
    """Grouped bars: ``values[group][series]`` (e.g. FedHydra Fig. 8: per data distribution,
    the averaging ensemble vs stratified aggregation); a missing value is an empty bar, "n/a"."""
    groups = [str(g) for g in values]
    series = [str(s) for s in dict.fromkeys(s for g in values for s in values[g])]
    long = pd.DataFrame([(str(g), str(s), float(v)) for g in values for s, v in values[g].items()],
                        columns=["group", "series", "value"])
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(groups) * max(len(series), 1) / 2 + 2),
                                    3.4))
    if series:
        _bars(ax, long, "group", groups, series)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("")
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def _line_style(fmt: str) -> dict[str, str]:
    """``linestyle`` and ``marker`` of a matplotlib format string such as ``"--s"``."""
    style = next((ls for ls in ("--", "-.", "-", ":") if ls in fmt), "")
    marker = fmt.replace(style, "", 1)
    return {"linestyle": style or "none", "marker": marker or ""}


def plot_accuracy_vs(
    frame: pd.DataFrame, x: str, ys: Mapping[str, str] | None = None, *, group: str = "method",
    title: str = "", xlabel: str | None = None, logx: bool = False, ax: plt.Axes | None = None,
    order: Sequence[str] | None = None, styles: Sequence[str] | None = None,
) -> Figure:
    """Accuracy against a varied setting (number of clients m, the attacker's bound b, ...).

    ``frame`` has a column ``x``, a ``group`` column (one colour per value, e.g. the method) and
    the accuracy columns named in ``ys`` (column → legend suffix; one line style each; default
    ``{"ours_last": "ours", "paper": "paper"}``, i.e. a :func:`compare_with_paper` table).
    Points with a missing value are skipped; a column with no value at all draws nothing.
    ``order`` fixes each group's colour (its position), so panels drawn from different frames
    use the same colour for the same method. ``styles``: matplotlib format strings, one per
    column of ``ys`` (default solid, dashed, dotted, dash-dot).
    """
    ys = dict(ys or {"ours_last": "ours", "paper": "paper"})
    styles = list(styles or ["-o", "--s", ":^", "-.d"])
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 3.6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = list(order) if order is not None else []
    for name in frame[group].drop_duplicates():
        if name not in names:
            names.append(name)
    for name, part in frame.groupby(group, sort=False):
        i = names.index(name)
        part = part.sort_values(x)
        for j, (col, suffix) in enumerate(ys.items()):
            if col not in part:
                continue
            pts = part[[x, col]].dropna()
            if pts.empty:
                continue
            sns.lineplot(x=pts[x].astype(float).to_numpy(), y=pts[col].astype(float).to_numpy(),
                         color=colours[i % len(colours)], label=f"{name} ({suffix})",
                         markersize=4, estimator=None, sort=False, legend=False, ax=ax,
                         **_line_style(styles[j % len(styles)]))
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, ncol=2)
    return ax.figure


def save_paper_vs_ours(table: pd.DataFrame, title: str, figures_dir: str | os.PathLike,
                       name: str) -> Path | None:
    """:func:`plot_paper_vs_ours` saved as ``<figures_dir>/<name>.png``; None (no figure) for
    an empty comparison."""
    if table.empty:
        return None
    fig = plot_paper_vs_ours(table, title)
    path = save_figure(fig, figures_dir, name)
    plt.close(fig)
    return path
