"""A gap entry marked ``explained: false`` says what was tried: the report shows it in red as
still open, the summary does not count it as explained, and the export says so."""

from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup
from test_batch_report import _rec, _shipped

from ofl_core.batch.gaps import load_gaps
from ofl_core.batch.report import build_report


def test_an_open_gap_shows_what_was_tried_and_is_not_counted(tmp_path) -> None:
    _shipped(tmp_path, [_rec("fed-dafl", 30.0), _rec("fed-adi", 30.0)])
    (tmp_path / "results" / "gaps.yaml").write_text(
        "- {paper: dense, table: T1, dataset: fmnist, method: fed-dafl, alpha: 0.1,\n"
        "   explained: false, why: 'tried the pool reading',\n"
        "   see: [paper-gaps.md#dense-t1-dafl-pool]}\n"
        "- {paper: dense, table: T1, dataset: fmnist, method: fed-adi, alpha: 0.1, why: known}\n")
    out = tmp_path / "out"
    soup = BeautifulSoup(build_report(out, results=tmp_path / "results").read_text(),
                         "html.parser")
    rows = {tr.find("th").text: tr.find("td")
            for tr in soup.find(id="dense-T1").find_next("table").find_all("tr")[1:]}
    open_ = rows["fed-dafl"].find(class_="why")
    assert "unexplained" in open_["class"] and open_.name == "details"
    assert "not explained yet" in open_.find("summary").text
    assert "tried the pool reading" in open_.text and open_.find("a") is not None
    assert rows["fed-adi"].find(class_="why").find("summary").text == "why?"
    summary = " ".join(soup.find(class_="summary").text.split())
    assert "1 of these 2 gaps explained" in summary
    export = {r["method"]: r["why"] for r in
              json.loads((out / "report" / "scoreboard.json").read_text())}
    assert export["fed-dafl"] == "not explained yet — tried the pool reading"
    assert export["fed-adi"] == "known"


def test_explained_must_be_a_boolean(tmp_path) -> None:
    f = tmp_path / "gaps.yaml"
    f.write_text("- {paper: dense, table: T1, dataset: fmnist, method: fed-adi, alpha: 0.1,\n"
                 "   explained: 'no', why: x}\n")
    with pytest.raises(ValueError, match="explained must be true or false"):
        load_gaps(f, docs=None)

