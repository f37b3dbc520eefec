"""The figures' readability rules: paper bars only where the paper has a number, compact
legends off the data, labelled image grids, widths the report can show."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from ofl_core.plots import (  # noqa: E402
    accuracy_panels,
    figure_legend,
    plot_accuracy_vs,
    plot_grouped_bars,
    plot_image_rows,
    plot_paper_vs_ours,
    save_paper_vs_ours,
)

#: the report shows figures at most 1100 px wide; saved at 120 dpi, ~11 in is the most that
#: stays readable
MAX_WIDTH_IN = 11.0


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def compare_table(papers: list[float | None]) -> pd.DataFrame:
    n = len(papers)
    return pd.DataFrame({
        "dataset": "fmnist", "data_source": "fmnist_embedded", "partition": "dirichlet",
        "alpha": "0.1", "num_clients": 5, "setting": "", "method": [f"m{i}" for i in range(n)],
        "preset": "paper", "paper": [np.nan if p is None else p for p in papers],
        "ours_last": 40.0, "ours_best": 45.0, "diff_last": np.nan, "diff_best": np.nan,
        "ensemble": 50.0, "n_seeds": 1})


def _bar_heights(fig) -> dict[str, list[float]]:
    ax = fig.axes[0]
    return {c.get_label(): [b.get_height() for b in c] for c in ax.containers}


def test_paper_vs_ours_draws_only_rows_with_a_paper_number():
    fig = plot_paper_vs_ours(compare_table([30.0, None, 60.0]), "T")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["m0", "m2"]
    assert _bar_heights(fig)["paper"] == [30.0, 60.0]
    assert "no paper cell" in ax.get_title()
    assert not [t for t in ax.texts if t.get_text() == "n/a"]


def test_paper_vs_ours_without_any_paper_number_draws_ours_alone_with_a_note():
    fig = plot_paper_vs_ours(compare_table([None, None]), "T")
    assert set(_bar_heights(fig)) == {"ours (last)", "ours (best)"}
    assert "ours only" in fig.axes[0].get_title()


def test_paper_vs_ours_stays_readable_with_many_rows(tmp_path):
    path = save_paper_vs_ours(compare_table([50.0] * 30), "T", tmp_path, "many")
    assert path is not None and path.is_file()
    fig = plt.gcf()
    assert fig.get_size_inches()[0] <= MAX_WIDTH_IN
    assert fig.axes[0].get_xticklabels()[0].get_rotation() == 90
    assert save_paper_vs_ours(compare_table([]), "T", tmp_path, "none") is None


def test_grouped_bar_labels_turn_when_long():
    fig = plot_grouped_bars({"fedcvae-ens (fmnist_embedded@32)": {"a": 1.0, "b": 2.0},
                             "fedcvae-kd (fmnist_embedded@32)": {"a": 1.0, "b": 2.0}})
    assert fig.axes[0].get_xticklabels()[0].get_rotation() == 30
    wide = plot_grouped_bars({f"variant {i}": {f"s{j}": 1.0 for j in range(5)}
                              for i in range(7)})
    assert wide.get_size_inches()[0] <= MAX_WIDTH_IN


def test_accuracy_legend_is_one_colour_per_group_and_one_style_per_column():
    frame = pd.DataFrame({"m": [5, 10, 5, 10], "method": ["a", "a", "b", "b"],
                          "ours_last": [50.0, 40.0, 30.0, 35.0], "paper": [60.0, 55.0, 40, 38]})
    fig = plot_accuracy_vs(frame, "m")
    legend = fig.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b", "ours", "paper"]
    anchor = legend.get_bbox_to_anchor().transformed(fig.axes[0].transAxes.inverted())
    assert anchor.x0 > 1.0  # right of the axes, off the data


def test_panels_share_one_figure_legend_and_fit_the_report():
    fig, axes = accuracy_panels(3)
    assert len(axes) == 3 and fig.get_size_inches()[0] <= MAX_WIDTH_IN
    for i, ax in enumerate(axes):
        frame = pd.DataFrame({"m": [5, 10], "method": ["a", "a"], "ours_last": [i, i + 1.0]})
        plot_accuracy_vs(frame, "m", {"ours_last": "ours"}, ax=ax, legend=False)
    figure_legend(fig)
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a"]


def test_image_rows_label_each_block_and_head_each_column():
    imgs = np.random.default_rng(0).random((6, 1, 8, 8))
    fig = plot_image_rows({"server": imgs[:4], "attacker": imgs[4:], "empty": imgs[:0]}, ncol=2,
                          title="grid", col_labels=["class 0", "class 1"])
    texts = [t.get_text() for t in fig.texts]
    assert "server" in texts and "attacker" in texts and "empty" not in texts
    assert [ax.get_title() for ax in fig.axes[:2]] == ["class 0", "class 1"]
    assert sum(1 for ax in fig.axes if ax.images) == 6
    server, attacker = (next(t for t in fig.texts if t.get_text() == k) for k in
                        ("server", "attacker"))
    assert server.get_position()[1] > attacker.get_position()[1]  # blocks top to bottom
