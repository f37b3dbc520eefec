"""The method taxonomy: every registered paper method has a row, and the README shows the
current table."""

from __future__ import annotations

from pathlib import Path

from ofl_core.methods import METHODS
from ofl_core.taxonomy import TAXONOMY, taxonomy_frame, taxonomy_markdown

ROOT = Path(__file__).resolve().parents[1]
LISTED = {"fedavg", "fedoneshot", "ensemble", "feddf", "fed-dafl", "fed-adi", "dense",
          "fedhydra", "ot", "fedcvae-ens", "fedcvae-kd", "coboosting"}


def test_every_method_has_one_row() -> None:
    names = [k.method for k in TAXONOMY]
    assert len(names) == len(set(names)) and set(names) == LISTED
    # the registry's other names are FedCVAE's ablation servers (Table 6)
    assert set(METHODS) - LISTED == {"param-avg", "kd"}
    frame = taxonomy_frame()
    assert list(frame.index) == names and not frame.loc["feddf", "data_free"]
    assert frame.loc["fedcvae-kd", "upload"] == "CVAE decoder + label counts"
    assert not frame.loc["fedavg", "heterogeneous"] and frame.loc["coboosting", "heterogeneous"]


def test_readme_shows_the_current_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert taxonomy_markdown() in readme
