"""Result records: round trips through a notebook and a JSON file; paper comparison."""

from __future__ import annotations

import json

import nbformat
import pytest

from ofl_core.hardware import cpu_info
from ofl_core.results import (
    RECORDS_MIME,
    ResultRecord,
    compare_with_paper,
    machine,
    paper_results,
    read_records,
    record,
)


def _rec(method="fedavg", seed=1, acc=40.0, alpha=0.1):
    return ResultRecord(
        experiment="t", paper="dense", table="T1", dataset="fmnist", partition="dirichlet",
        alpha=alpha, num_clients=5, seed=seed, method=method, preset="paper", last_acc=acc,
        best_acc=acc + 1, ensemble_acc=50.0, wall_time_s=1.0, config_hash="x", version="0",
    )


def test_paper_results_ship_with_the_package():
    df = paper_results()
    assert len(df) == 867
    cell = paper_results("dense", "T1")
    row = cell[(cell.dataset == "fmnist") & (cell.method == "dense") & (cell.alpha == 0.1)]
    assert row.accuracy.tolist() == [50.29]


def test_records_round_trip_through_json_and_notebook(tmp_path):
    recs = [_rec(), _rec("ensemble")]
    record(recs, tmp_path / "r.json")
    assert read_records(tmp_path / "r.json") == recs
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("record(...)")
    cell.outputs = [nbformat.v4.new_output(
        "display_data", data={RECORDS_MIME: [r.to_dict() for r in recs], "text/plain": "x"})]
    nb.cells.append(cell)
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert read_records(path) == recs
    json.loads(path.read_text())


def test_record_shows_nothing_in_the_notebook_or_its_html(monkeypatch, tmp_path):
    import warnings

    import IPython.display
    from nbconvert import HTMLExporter

    shown = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False: shown.append((obj, raw)))
    recs = [_rec(), _rec("ensemble")]
    record(recs)
    [(data, raw)] = shown
    assert raw and data["text/plain"] == "" and len(data[RECORDS_MIME]) == 2
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("record(tables.records)")
    cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
    nb.cells.append(cell)
    nbformat.write(nb, tmp_path / "nb.ipynb")
    assert read_records(tmp_path / "nb.ipynb") == recs
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nbconvert warns about outputs it cannot represent
        html, _ = HTMLExporter(exclude_input=True).from_notebook_node(nb)
    body = html[html.index("<body"):]
    assert "record" not in body and "fedavg" not in body


def test_compare_with_paper_puts_the_cell_beside_the_seed_mean():
    recs = [_rec(seed=1, acc=40.0), _rec(seed=2, acc=44.0), _rec("ensemble")]
    t = compare_with_paper(recs, "dense", "T1")
    fedavg = t[t.method == "fedavg"].iloc[0]
    assert fedavg.paper == pytest.approx(41.69)
    assert fedavg.ours_last == pytest.approx(42.0) and fedavg.n_seeds == 2
    assert fedavg.diff_last == pytest.approx(0.31)
    assert t[t.method == "ensemble"].paper.isna().all()
    other = compare_with_paper([_rec(alpha=0.3)], "dense", "T1")
    assert other.paper.iloc[0] == pytest.approx(82.96)


XEON = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n"
        "flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile\n\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n"
        "flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile\n")
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n"


@pytest.mark.parametrize("text, cpu, features", [
    (XEON, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "avx2,avx512f,avx512_bf16,amx_bf16"),
    (EPYC, "AMD EPYC", "avx2"),
])
def test_cpu_info_names_the_model_and_the_features_that_pick_the_kernels(text, cpu, features):
    assert cpu_info(text) == {"cpu": cpu, "cpu_features": features}


def test_a_runs_machine_names_its_cpu():
    """Records made on CPUs with and without native bfloat16 differ in speed and rounding, so
    a run's sidecar says which CPU it ran on."""
    m = machine()
    assert m["cpu"] and isinstance(m["cpu_features"], str)
    assert {"host", "cores", "threads", "gpus"} <= set(m)
