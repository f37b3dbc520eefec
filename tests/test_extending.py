"""docs/extending.md's worked example, built exactly as the guide says: the method module is
taken from the guide's code block into a temporary module, registered as the registry does,
checked on hand-made tensors and run through ``run_tables`` to a record on the report."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from ofl_core import registry
from ofl_core.batch.report import build_report
from ofl_core.clients import LocalTrainConfig, init_model
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.server import ServerContext
from ofl_core.tables import Run, Serves, run_tables
from ofl_core.uploads import ClientUpload

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def guide_module() -> str:
    """The first Python block of the guide's "Add a server method" section."""
    text = GUIDE.read_text().split("## Add a server method", 1)[1]
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


@pytest.fixture()
def median(tmp_path, monkeypatch):
    (tmp_path / "toy_median.py").write_text(guide_module())
    monkeypatch.syspath_prepend(str(tmp_path))
    # the modules holding the dict, imported before it is swapped: one first imported under the
    # swap would bind the copy, and undoing the patch would leave it the copy, median and all
    holders = [importlib.import_module(m) for m in ("ofl_core.experiment", "ofl_core.taxonomy")]
    monkeypatch.setattr(registry, "METHODS", dict(registry.METHODS))  # undone after the test
    for mod in holders:
        monkeypatch.setattr(mod, "METHODS", registry.METHODS, raising=False)
    yield registry.load(["toy_median"])[0]
    sys.modules.pop("toy_median", None)


def test_the_guides_method_is_registered_and_computes_the_median(median):
    assert median.name == "median" and registry.METHODS["median"] is median
    assert median.homogeneous and median.kind.source == "Yin et al. 2018"
    net = init_model("cnn_mnist", 3, 1, 28, seed=0)
    states = []
    for k in range(3):  # three clients: every weight k, 5k, 2k → median 2k
        states.append({n: (v.clone().fill_([1.0, 5.0, 2.0][k]) if v.is_floating_point() else v)
                       for n, v in net.state_dict().items()})
    ups = [ClientUpload(client_id=k, arch="cnn_mnist", state_dict=s, num_classes=3,
                        in_channels=1, image_size=28, num_samples=10)
           for k, s in enumerate(states)]
    ctx = ServerContext(num_classes=3, in_channels=1, image_size=28)
    res = registry.run_method("median", ups, registry.method_config("median"), ctx)
    assert res.method == "median"
    for n, v in res.model.state_dict().items():
        if v.is_floating_point():
            assert torch.equal(v, torch.full_like(v, 2.0)), n


def test_the_guides_method_runs_through_tables_to_the_report(median, tiny_dataset, tmp_path):
    exp = ExperimentConfig(dataset="tiny", partition="iid", alpha=None, num_clients=3,
                           local=LocalTrainConfig(epochs=1), cache_dir=str(tmp_path / "c"),
                           progress=False, workers=1, experiment="main_tables")
    run = Run(exp, tuple(configure_methods(["fedavg", "median"])), (Serves("dense", "T1"),))
    tables = run_tables([run], verbose=False, dataset=tiny_dataset)
    recs = {r.method: r for r in tables.records}
    assert set(recs) == {"fedavg", "median"} and 0 <= recs["median"].last_acc <= 100
    # the notebook's sidecar, as run_all.py writes it, and the report built from it
    d = tmp_path / "out" / "runs" / "main_tables"
    d.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), d / "toy.ipynb")
    (d / "toy.json").write_text(json.dumps({
        "status": "done", "notebook": "main_tables", "run_id": "toy", "parameters": {},
        "effective_parameters": {}, "seconds": 1.0,
        "records": [r.to_dict() for r in tables.records]}))
    html = build_report(tmp_path / "out", results=None).read_text()
    assert re.search(r">\s*median\s*<", html), "the toy method's record is not on the report"
