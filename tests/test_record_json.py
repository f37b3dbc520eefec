"""record() publishes JSON-safe records: NaN (no client/ensemble accuracy, e.g. FedCVAE
experiments) becomes null instead of Jupyter's string "nan", so reports can average them."""

from __future__ import annotations

import json
import math

from ofl_core.results import ResultRecord, compare_with_paper, read_records, record


def test_nan_fields_are_published_as_null(tmp_path):
    rec = ResultRecord("x", "fedcvae", "T6", "fmnist", "dirichlet", 0.01, 10, 1, "kd", "paper",
                       50.0, 52.0, float("nan"), 1.0, "h", "v", "", "fmnist_embedded@32")
    path = tmp_path / "r.json"
    record([rec], path)
    raw = json.loads(path.read_text())
    assert raw[0]["ensemble_acc"] is None and raw[0]["last_acc"] == 50.0
    back = read_records(path)
    table = compare_with_paper(back, "fedcvae", "T6")
    assert table.loc[0, "paper"] == 69.97 and math.isnan(table.loc[0, "ensemble"])
