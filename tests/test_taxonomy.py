"""The method taxonomy: derived from the methods' declarations, one row per method, and the
README shows the current table."""

from __future__ import annotations

from pathlib import Path

from ofl_core.registry import METHODS
from ofl_core.taxonomy import taxonomy_frame, taxonomy_markdown, taxonomy_rows

ROOT = Path(__file__).resolve().parents[1]


def test_every_declared_method_has_one_row() -> None:
    names = [r["method"] for r in taxonomy_rows()]
    assert len(names) == len(set(names))
    assert names == [n for n, s in METHODS.items() if s.kind is not None]
    # the registry's names without a row are ablation variants (FedCVAE Table 6's servers)
    assert all(METHODS[n].client == "decoder" for n in set(METHODS) - set(names))
    frame = taxonomy_frame()
    assert list(frame.index) == names and not frame.loc["feddf", "data_free"]
    assert frame.loc["fedcvae-kd", "upload"] == "CVAE decoder + label counts"
    # "mixed archs" is the declaration's homogeneous flag, negated
    for n in names:
        assert bool(frame.loc[n, "heterogeneous"]) is (not METHODS[n].homogeneous)


def test_readme_shows_the_current_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert taxonomy_markdown() in readme
