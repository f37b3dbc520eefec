"""The notebooks' figures (seaborn on matplotlib axes; no global style changes)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D


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


def _legend_outside(ax: plt.Axes, handles: Sequence[Artist] | None = None) -> None:
    """The legend to the right of the axes, where it covers no data."""
    kw = {} if handles is None else {"handles": list(handles)}
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **kw)


def _tick_labels(ax: plt.Axes, labels: Sequence[str]) -> None:
    """Category labels under the bars, turned when they would run into each other."""
    ax.set_xticks(range(len(labels)))
    longest = max((len(ln) for lab in labels for ln in str(lab).split("\n")), default=0)
    room = 0.75 * ax.figure.get_size_inches()[0] / max(len(labels), 1)  # inches per label
    if len(labels) > 12:
        ax.set_xticklabels(labels, rotation=90, fontsize=7)
    elif longest * 0.065 > 0.9 * room:  # ~0.065 in per character at 8 pt
        ax.set_xticklabels(labels, rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
    else:
        ax.set_xticklabels(labels, fontsize=8)


def _bar_width(groups: int, bars_per_group: int) -> float:
    """Figure width (inches) for grouped bars: wide enough per bar, at most 10 (the report
    shows figures at most 1100 px wide: 10 in at 120 dpi is shrunk by a tenth)."""
    return min(10.0, max(4.0, 0.3 * groups * bars_per_group + 0.4 * groups + 1.5))


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
    """Grouped bars per method: the paper's number and ours (last and best epoch).

    Only rows with a paper cell are drawn (the table shows the others); when no row has one
    (e.g. a dataset the paper never ran), ours alone, with a note saying so."""
    t = table.copy()
    t["label"] = method_labels(t)
    if t["alpha"].nunique() > 1:
        t["label"] = t["label"] + " α=" + t["alpha"].astype(str)
    series = {"paper": "paper", "ours_last": "ours (last)", "ours_best": "ours (best)"}
    has_paper = t["paper"].notna()
    if not has_paper.any():
        del series["paper"]
        title += "\n(the paper has no cell for this setting: ours only)"
    elif not has_paper.all():
        title += f"\n({int((~has_paper).sum())} of our rows have no paper cell: in the table only)"
        t = t[has_paper].reset_index(drop=True)
    rows = [str(i) for i in range(len(t))]  # one group per row, even where labels repeat
    long = pd.DataFrame([(r, name, v) for col, name in series.items()
                         for r, v in zip(rows, t[col], strict=True)],
                        columns=["row", "series", "value"])
    fig, ax = plt.subplots(figsize=(_bar_width(len(t), len(series)), 3.4))
    _bars(ax, long, "row", rows, list(series.values()),
          {"paper": "0.6", "ours (last)": "tab:blue", "ours (best)": "tab:cyan"})
    _tick_labels(ax, list(t["label"]))
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


def plot_image_rows(blocks: Mapping[str, np.ndarray], ncol: int, title: str = "",
                    col_labels: Sequence[str] | None = None, size: float = 0.75) -> Figure:
    """Labelled blocks of images (float (N, C, H, W) in [0, 1]): each block fills rows of
    ``ncol`` images and its label sits left of them; ``col_labels`` head the columns. FedCVAE
    Figs. 7–8: a block per sampler or decoder, a column per class; DENSE Fig. 6: a block per
    class. An empty block is left out."""
    shown = [(label, np.asarray(imgs)) for label, imgs in blocks.items() if len(imgs)]
    size = min(size, 8.0 / ncol)  # at most ~10 in wide with the labels
    heights = [-(-len(imgs) // ncol) for _, imgs in shown]
    rows, label_in, top_in = max(sum(heights), 1), 1.9, 0.35 + 0.25 * bool(col_labels)
    w, h = ncol * size + label_in, rows * size + top_in
    fig, axes = plt.subplots(rows, ncol, figsize=(w, h), squeeze=False)
    fig.subplots_adjust(left=label_in / w, right=0.995, bottom=0.005, top=1 - top_in / h,
                        wspace=0.06, hspace=0.06)
    for ax in axes.ravel():
        ax.axis("off")
    r = 0
    for (label, imgs), n_rows in zip(shown, heights, strict=True):
        for i, img in enumerate(imgs.transpose(0, 2, 3, 1)):
            ax = axes[r + i // ncol, i % ncol]
            if img.shape[-1] == 1:
                ax.imshow(img[..., 0], cmap="gray", vmin=0, vmax=1)
            else:
                ax.imshow(np.clip(img, 0, 1))
        first, last = axes[r, 0].get_position(), axes[r + n_rows - 1, 0].get_position()
        fig.text(first.x0 - 0.08 / w, (first.y1 + last.y0) / 2, label, ha="right",
                 va="center", fontsize=8)
        r += n_rows
    for ax, label in zip(axes[0], col_labels or [], strict=False):
        ax.set_title(label, fontsize=7)
    fig.suptitle(title, fontsize=9, y=1 - 0.05 / h, va="top")
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


def plot_grouped_bars(values: Mapping[str, Mapping[str, float]], title: str = "",
                      ylabel: str = "test accuracy (%)", ylim: tuple[float, float] | None = (0, 100)
                      ) -> Figure:
    """Grouped bars: ``values[group][series]`` (e.g. FedHydra Fig. 8: per data distribution,
    the averaging ensemble vs stratified aggregation); a missing value is an empty bar, "n/a"."""
    groups = [str(g) for g in values]
    series = [str(s) for s in dict.fromkeys(s for g in values for s in values[g])]
    long = pd.DataFrame([(str(g), str(s), float(v)) for g in values for s, v in values[g].items()],
                        columns=["group", "series", "value"])
    fig, ax = plt.subplots(figsize=(_bar_width(len(groups), max(len(series), 1)), 3.4))
    if series:
        _bars(ax, long, "group", groups, series)
    _tick_labels(ax, groups)
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
    legend: bool = True,
) -> Figure:
    """Accuracy against a varied setting (number of clients m, the attacker's bound b, ...).

    ``frame`` has a column ``x``, a ``group`` column (one colour per value, e.g. the method) and
    the accuracy columns named in ``ys`` (column → legend suffix; one line style each; default
    ``{"ours_last": "ours", "paper": "paper"}``, i.e. a :func:`compare_with_paper` table).
    Points with a missing value are skipped; a column with no value at all draws nothing.
    ``order`` fixes each group's colour (its position), so panels drawn from different frames
    use the same colour for the same method. ``styles``: matplotlib format strings, one per
    column of ``ys`` (default solid, dashed, dotted, dash-dot). The legend (right of the axes;
    ``legend=False``: none, e.g. for :func:`figure_legend`) has one colour per group and one
    line style per column.
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
    if legend and ax.get_lines():
        _legend_outside(ax, legend_handles(ax.get_lines()))
    return ax.figure


def legend_handles(lines: Sequence[Line2D]) -> list[Line2D]:
    """A compact legend for :func:`plot_accuracy_vs` lines (labelled ``"<group> (<column>)"``):
    one colour per group, then — when the lines use several columns — one grey line per column
    in its style ("ours", "paper", ...)."""
    groups: dict[str, str] = {}
    styles: dict[str, tuple[str, str]] = {}
    for line in lines:
        name, sep, col = str(line.get_label()).rpartition(" (")
        if sep:
            groups.setdefault(name, line.get_color())
            styles.setdefault(col.removesuffix(")"), (line.get_linestyle(), line.get_marker()))
    if len(styles) == 1:  # one style: the colour entries carry it
        ls, marker = next(iter(styles.values()))
        return [Line2D([], [], color=c, linestyle=ls, marker=marker, markersize=4, label=n)
                for n, c in groups.items()]
    return ([Line2D([], [], color=c, lw=2.5, label=n) for n, c in groups.items()]
            + [Line2D([], [], color="0.35", linestyle=ls, marker=marker, markersize=4, label=col)
               for col, (ls, marker) in styles.items()])


def accuracy_panels(n: int, width: float = 3.9, height: float = 3.0) -> tuple[Figure, list]:
    """A figure of ``n`` panels, two per row, with room on the right for one
    :func:`figure_legend` (at most 10 in wide: readable at the report's 1100 px)."""
    cols = min(max(n, 1), 2)
    rows = -(-max(n, 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols + 2.0, height * rows),
                             squeeze=False, layout="constrained")
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    return fig, list(axes.ravel()[:n])


def figure_legend(fig: Figure) -> None:
    """One legend for every :func:`plot_accuracy_vs` panel of ``fig``, right of the panels (the
    same colour is the same group in every panel)."""
    lines = [line for ax in fig.axes for line in ax.get_lines()]
    if lines:
        fig.legend(handles=legend_handles(lines), loc="outside right upper", fontsize=7,
                   frameon=False)


def save_paper_vs_ours(table: pd.DataFrame, title: str, figures_dir: str | os.PathLike,
                       name: str) -> Path | None:
    """:func:`plot_paper_vs_ours` saved as ``<figures_dir>/<name>.png`` (and left open, so a
    notebook shows it under the cell); None (no figure) for an empty comparison."""
    if table.empty:
        return None
    return save_figure(plot_paper_vs_ours(table, title), figures_dir, name)


#: the scoreboard's verdict colours (the report's marks)
VERDICT_COLOURS = {"reproduced": "#1a7f37", "above": "#0969da", "below": "#cf222e",
                   "not comparable": "0.6"}


def plot_scoreboard(rows: pd.DataFrame, title: str = "") -> Figure:
    """One paper table's judged cells (rows of the report's ``scoreboard.csv``): per cell and
    preset the paper's number (grey diamond, its std as a bar where printed) and ours (a dot
    coloured by verdict, ± our std over seeds), the ±2-point band around the paper's number
    shaded; one line per cell so that long labels stay readable."""
    varying = [k for k in ("dataset", "alpha", "partition", "num_clients", "setting")
               if rows[k].astype(str).nunique() > 1]
    t = rows.sort_values([*varying, "method", "preset"], kind="stable").reset_index(drop=True)
    labels = t["method"].astype(str) + np.where(t["preset"] != "paper",
                                                " (" + t["preset"].astype(str) + ")", "")
    for k in varying:
        labels = labels + f" · {'m' if k == 'num_clients' else k}=" + t[k].astype(str)
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.26 * len(t)), layout="constrained")
    y = np.arange(len(t))[::-1]
    std = t["paper_std"].astype(float).fillna(0.0)
    tol = np.maximum(2.0, std)
    ax.barh(y, 2 * tol, left=t["paper_acc"] - tol, height=0.7, color="0.92", zorder=0)
    ax.errorbar(t["paper_acc"], y, xerr=std, fmt="D", color="0.45", ms=4, lw=1, label="paper")
    for v, colour in VERDICT_COLOURS.items():
        m = (t["verdict"] == v).to_numpy()
        if m.any():
            ax.errorbar(t["ours_last"][m], y[m], xerr=t["ours_std"][m].fillna(0.0), fmt="o",
                        color=colour, ms=5, lw=1, label=f"ours: {v}")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("test accuracy (%), last epoch; shaded: the paper's number ± the threshold")
    ax.set_xlim(max(0.0, min(t["paper_acc"].min(), t["ours_last"].min()) - 8),
                min(100.0, max(t["paper_acc"].max(), t["ours_last"].max()) + 8))
    ax.grid(axis="x", color="0.9")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(title, fontsize=10)
    return fig
