"""What a run's files must hold before the report believes them: the sidecar JSON of a finished
run (``<out>/runs/<notebook>/<run_id>.json``, or shipped in ``results/<notebook>/``), its
records, and a kept failure (``<run_id>.failed.json``).

Every field the report reads is checked for its type and range on load: the notebook must be one
of the project's notebooks and the folder the file lies in, the run id a plain name that is the
file's name (both build paths and links), each record's accuracies finite numbers in [0, 100],
its seed and client count integers, and so on. A file that fails is one listed problem naming
the file and the field; the rest of the report is built as usual.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .scale import current_names

#: a run id: a plain name (it becomes a file name and an HTML anchor)
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: largest client count and seed a record may name
MAX_CLIENTS = 1_000_000
MAX_SEED = 2**63 - 1
#: the longest string field of a record or sidecar
MAX_TEXT = 10_000

_TEXT = ("experiment", "paper", "table", "dataset", "partition", "method", "preset",
         "config_hash", "version")
_OPTIONAL_TEXT = ("setting", "data_source", "precision", "client_code", "aggregation")
_ACCURACY = ("last_acc", "best_acc")
_OPTIONAL_ACCURACY = ("ensemble_acc", "best_client_acc", "mean_client_acc")


class BadRunFile(ValueError):
    """A run file that the report does not believe (the message names the field)."""


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_TEXT


def _got(v: Any) -> str:
    return f"{json.dumps(v)[:60] if _jsonable(v) else repr(v)[:60]} ({type(v).__name__})"


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def check_record(rec: Any, where: str) -> None:
    """One result record: every field the scoreboard reads, typed and in range."""
    if not isinstance(rec, Mapping):
        raise BadRunFile(f"{where} must be a mapping, got {_got(rec)}")
    for k in _TEXT:
        if k not in rec:
            raise BadRunFile(f"{where}.{k} is missing")
        if not _text(rec[k]):
            raise BadRunFile(f"{where}.{k} must be a string, got {_got(rec[k])}")
    for k in _OPTIONAL_TEXT:
        if rec.get(k) is not None and not _text(rec[k]):
            raise BadRunFile(f"{where}.{k} must be a string, got {_got(rec[k])}")
    for k in _ACCURACY + _OPTIONAL_ACCURACY:
        if k not in rec:
            if k in _ACCURACY:
                raise BadRunFile(f"{where}.{k} is missing")
            continue
        v = rec[k]
        if v is None and k in _OPTIONAL_ACCURACY:
            continue
        if not (_number(v) and 0 <= v <= 100):
            raise BadRunFile(f"{where}.{k} must be an accuracy in [0, 100] (percent), got "
                             f"{_got(v)}")
    for k, lo, hi in (("seed", 0, MAX_SEED), ("num_clients", 1, MAX_CLIENTS)):
        if k not in rec:
            raise BadRunFile(f"{where}.{k} is missing")
        if not (_int(rec[k]) and lo <= rec[k] <= hi):
            raise BadRunFile(f"{where}.{k} must be an integer in {lo} … {hi}, got "
                             f"{_got(rec[k])}")
    a = rec.get("alpha")
    if a is not None and not (_number(a) and 0 < a <= 1e6):
        raise BadRunFile(f"{where}.alpha must be null or a number in (0, 1e6], got {_got(a)}")
    w = rec.get("wall_time_s", 0.0)
    if not (_number(w) and w >= 0):
        raise BadRunFile(f"{where}.wall_time_s must be a number ≥ 0, got {_got(w)}")


def _check_common(d: Any, path: Path, notebooks: set[str]) -> dict:
    if not isinstance(d, dict):
        raise BadRunFile(f"must be a JSON object, got {_got(d)}")
    nb, rid = d.get("notebook"), d.get("run_id")
    if not (isinstance(nb, str) and nb in notebooks):
        raise BadRunFile(f"notebook must be one of the project's notebooks "
                         f"({', '.join(sorted(notebooks))}), got {_got(nb)}")
    if nb != path.parent.name:
        raise BadRunFile(f"notebook {nb!r} is not the folder it lies in ({path.parent.name!r})")
    if not (isinstance(rid, str) and RUN_ID.match(rid)):
        raise BadRunFile(f"run_id must be a plain name (letters, digits, _ and -), got "
                         f"{_got(rid)}")
    stem = path.name.removesuffix(".failed.json").removesuffix(".json")
    if rid != stem:
        raise BadRunFile(f"run_id {rid!r} is not the file's name ({stem!r})")
    for k in ("parameters", "effective_parameters", "machine"):
        if k in d and not isinstance(d[k], dict):
            raise BadRunFile(f"{k} must be a mapping, got {_got(d[k])}")
    for k in ("parameters", "effective_parameters"):  # a run's old parameter names, as today's
        if k in d:
            d[k] = current_names(d[k])
    return d


def check_run(d: Any, path: Path, notebooks: set[str]) -> dict:
    """A finished run's sidecar (checked; ``parameters`` defaults to ``{}``)."""
    d = _check_common(d, path, notebooks)
    if d.get("status") != "done":
        raise BadRunFile(f"status must be \"done\", got {_got(d.get('status'))}")
    for k in ("code_version",):
        if d.get(k) is not None and not _text(d[k]):
            raise BadRunFile(f"{k} must be a string, got {_got(d[k])}")
    s = d.get("seconds")
    if s is not None and not (_number(s) and s >= 0):
        raise BadRunFile(f"seconds must be a number ≥ 0, got {_got(s)}")
    for k, v in (d.get("machine") or {}).items():
        if not (v is None or _text(v) or _number(v)):
            raise BadRunFile(f"machine.{k} must be a string or a number, got {_got(v)}")
    recs = d.get("records", [])
    if not isinstance(recs, list):
        raise BadRunFile(f"records must be a list, got {_got(recs)}")
    for i, rec in enumerate(recs):
        check_record(rec, f"records[{i}]")
    return {**d, "parameters": d.get("parameters", {}), "records": recs}


def check_failure(d: Any, path: Path, notebooks: set[str]) -> dict:
    """A kept failure (``<run_id>.failed.json``)."""
    d = _check_common(d, path, notebooks)
    for k in ("error", "detail"):
        if d.get(k) is not None and not _text(d[k]):
            raise BadRunFile(f"{k} must be a string, got {_got(d[k])}")
    return {**d, "error": d.get("error") or "", "detail": d.get("detail") or "",
            "parameters": d.get("parameters") or {}}


def read_json(path: Path) -> Any:
    """The file's JSON (NaN and ±Infinity refused: they are no JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadRunFile(f"cannot be read ({e})") from None

    def no_constant(name: str) -> Any:
        raise BadRunFile(f"holds {name}, which is no JSON number")

    try:
        return json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as e:
        raise BadRunFile(f"is not valid JSON ({e})") from None


__all__ = ["BadRunFile", "check_failure", "check_record", "check_run", "read_json"]
