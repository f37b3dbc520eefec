"""Result records, how a notebook publishes them, and the papers' numbers beside ours.

A :class:`ResultRecord` is flat (one row of a table). A notebook calls :func:`record`, which
displays the records with a custom MIME type, so :func:`read_records` can read them back from the
executed notebook; ``run_all.py`` also writes them to a sidecar JSON. The papers' numbers ship
as package data (``ofl_core/paper_results.csv``, every cell of every table of the three papers).
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path

import pandas as pd

from .hardware import this_cpu

RECORDS_MIME = "application/vnd.ofl.records+json"
COMPARE_COLUMNS = ["dataset", "data_source", "partition", "alpha", "num_clients", "setting",
                   "method", "preset", "paper", "ours_last", "ours_best", "diff_last",
                   "diff_best", "ensemble", "n_seeds"]


@dataclass(frozen=True)
class ResultRecord:
    """One server method's result in one experiment (DESIGN "Interfaces")."""

    experiment: str
    paper: str
    table: str
    dataset: str
    partition: str
    alpha: float | None
    num_clients: int
    seed: int
    method: str
    preset: str
    last_acc: float
    best_acc: float
    ensemble_acc: float
    #: the server's wall seconds: this call's, plus the epochs that earlier, interrupted parts
    #: of the same run had done (kept in its checkpoint), so a resumed run's record holds its
    #: whole cost
    wall_time_s: float
    config_hash: str
    version: str
    setting: str = ""
    data_source: str = ""
    best_client_acc: float | None = None
    mean_client_acc: float | None = None
    precision: str = ""  # e.g. "local=bf16;server=fp32" ("" in records made before it)
    #: the clients' training code version (its source hash; a pin says so), "" before it
    client_code: str = ""
    #: robust aggregation when it was on (e.g. "median", "trimmed_mean(0.1)"), else ""
    aggregation: str = ""
    #: the method's own further measurements (its spec's ``recorded`` extras, e.g. FedLPA's
    #: closed-form accuracy, IntactOFL's deployed size); left out of the dict when empty
    notes: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        if not d["notes"]:
            del d["notes"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ResultRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def records_frame(records: Iterable[ResultRecord | dict]) -> pd.DataFrame:
    """Records as a DataFrame (one row each)."""
    rows = [r.to_dict() if isinstance(r, ResultRecord) else dict(r) for r in records]
    cols = [f.name for f in fields(ResultRecord)]
    return pd.DataFrame(rows, columns=cols)


def record(records: Sequence[ResultRecord], path: str | os.PathLike | None = None) -> None:
    """Publish a notebook's records: a display output with :data:`RECORDS_MIME` (read back by
    :func:`read_records` from the executed notebook) and, if ``path`` is given, a JSON file.

    The output shows nothing: its ``text/plain`` is empty (JupyterLab and nbconvert's HTML draw
    an empty line; without any text/plain nbconvert would warn that it cannot represent it).
    The tables the notebook displays are the readable form of the same records."""
    data = [_finite_or_none(r.to_dict()) for r in records]
    if path:
        write_json_atomic(Path(path), data)
    try:
        from IPython.display import display

        display({RECORDS_MIME: data, "text/plain": ""}, raw=True)
    except ImportError:  # plain Python: the JSON file is the record
        pass


def _finite_or_none(d: dict) -> dict:
    """NaN/inf floats → None: JSON has no NaN, and Jupyter would publish it as the string
    "nan" (e.g. the ensemble accuracy of FedCVAE experiments, which have no classifiers)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in d.items()}


def write_json_atomic(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = json.dumps(obj, indent=1, default=_json_default)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:  # disk full, read-only, interrupted: no temp file stays behind
        tmp.unlink(missing_ok=True)
        raise


def _json_default(o: object) -> object:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_records(path: str | os.PathLike) -> list[ResultRecord]:
    """Records from an executed notebook (its :data:`RECORDS_MIME` outputs) or a sidecar JSON."""
    p = Path(path)
    obj = json.loads(p.read_text())
    if p.suffix == ".ipynb":
        out: list[ResultRecord] = []
        for cell in obj.get("cells", []):
            for o in cell.get("outputs", []):
                data = o.get("data", {})
                if RECORDS_MIME in data:
                    payload = data[RECORDS_MIME]
                    if isinstance(payload, str):
                        payload = json.loads(payload)
                    out.extend(ResultRecord.from_dict(d) for d in payload)
        return out
    return [ResultRecord.from_dict(d) for d in obj]


def paper_results(paper: str | None = None, table: str | None = None) -> pd.DataFrame:
    """The papers' table cells (package data), optionally filtered by paper and table.

    Columns: paper, table, dataset, method, alpha (float or NaN), partition, num_clients,
    setting ('' when none), accuracy (float), std (float or NaN), accuracy_text (as printed).
    """
    ref = resources.files("ofl_core") / "paper_results.csv"
    with resources.as_file(ref) as f:
        df = pd.read_csv(f, dtype={"accuracy": str, "setting": str})
    df["accuracy_text"] = df["accuracy"]
    df["accuracy"] = df["accuracy"].astype(float)
    df["setting"] = df["setting"].fillna("")
    if paper is not None:
        df = df[df["paper"] == paper]
    if table is not None:
        df = df[df["table"] == table]
    return df.reset_index(drop=True)


def alpha_key(a: object) -> str:
    """α as a join key: '' for none (2c/c, iid), else its shortest decimal form."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return ""
    return f"{float(a):g}"


def compare_with_paper(
    records: Iterable[ResultRecord | dict],
    paper: str,
    table: str,
    method_names: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Our results (mean over seeds) beside the paper's cells for the same setting.

    Rows are matched on (dataset, method, alpha, partition, num_clients, setting); the embedded
    FMNIST subset counts as FMNIST (``dataset`` holds the paper's name, ``data_source`` the
    data actually used). Our rows without a paper
    cell are kept with ``paper`` = NaN (e.g. the ensemble, which no table prints).
    ``method_names`` maps our method names to the paper's where they differ.
    """
    df = records_frame(records)
    if df.empty:
        return pd.DataFrame(columns=COMPARE_COLUMNS)
    names = method_names or {}
    df["paper_method"] = df["method"].map(lambda m: names.get(m, m))
    df["alpha_key"] = df["alpha"].map(alpha_key)
    df["data_source"] = df["data_source"].fillna("").replace("", None).fillna(df["dataset"])
    keys = ["dataset", "data_source", "partition", "alpha_key", "num_clients", "setting",
            "paper_method", "preset"]
    ours = (
        df.groupby(keys, dropna=False, sort=False)
        .agg(ours_last=("last_acc", "mean"), ours_best=("best_acc", "mean"),
             ensemble=("ensemble_acc", "mean"), n_seeds=("seed", "nunique"))
        .reset_index()
    )
    pr = paper_results(paper, table).copy()
    pr["alpha_key"] = pr["alpha"].map(alpha_key)
    pr = pr.drop(columns=["paper"]).rename(columns={"method": "paper_method",
                                                     "accuracy": "paper"})
    merged = ours.merge(
        pr[["dataset", "partition", "alpha_key", "num_clients", "setting", "paper_method",
            "paper"]],
        on=["dataset", "partition", "alpha_key", "num_clients", "setting", "paper_method"],
        how="left",
    )
    merged["diff_last"] = merged["ours_last"] - merged["paper"]
    merged["diff_best"] = merged["ours_best"] - merged["paper"]
    merged = merged.rename(columns={"alpha_key": "alpha", "paper_method": "method"})
    return merged[COMPARE_COLUMNS].round(2)


def paper_methods(paper: str, table: str) -> tuple[str, ...]:
    """The methods one paper table prints (its rows), in the CSV's order."""
    return tuple(dict.fromkeys(paper_results(paper, table)["method"]))


def machine() -> dict:
    """Where a task ran: host, CPU model and the features that pick its arithmetic
    (:func:`~ofl_core.hardware.cpu_info`), cores, its thread count and GPUs (names when
    nvidia-smi is there), and with a GPU the float32 precision of its convolutions and matrix
    products (``cuda_fp32``: "tf32" or "ieee", "none" = PyTorch's default; docs/gpu.md, the
    CUDA review)."""
    gpus = ""
    if shutil.which("nvidia-smi") and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != "":
        try:
            gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            gpus = ""
    info = {"host": platform.node(), **this_cpu(), "cores": os.cpu_count(),
            "threads": os.environ.get("OMP_NUM_THREADS", ""),
            "gpus": ", ".join(gpus.splitlines())}
    if gpus:  # float32 on CUDA: PyTorch's default runs cuDNN's convolutions in TF32
        import torch

        info["cuda_fp32"] = (f"conv={torch.backends.cudnn.conv.fp32_precision};"
                             f"matmul={torch.backends.cuda.matmul.fp32_precision}")
    return info
