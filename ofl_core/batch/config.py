"""Executor settings: :class:`ExecutorConfig`, its layers (defaults, a YAML file, the command
line) and the SLURM walltime / memory strings it accepts."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..validation import COUNT, NONNEG, POSITIVE, check_config
from .yamlfile import load_yaml

EXECUTORS = ("local", "dask", "submitit")
#: ``cluster`` values each executor accepts (None: its default).
CLUSTERS = {"local": (None, "local"), "dask": (None, "local", "slurm", "pbs"),
            "submitit": (None, "slurm", "local")}


@dataclass(frozen=True)
class ExecutorConfig:
    """Where and how the tasks of a grid run (``run_all.py``'s executor options).

    ``cores``, ``memory``, ``walltime``, ``partition``, ``account``, ``job_directives`` and
    ``job_prologue`` describe one batch job: one dask-jobqueue worker job, or one array element
    of a submitit job array. ``gpus_per_task`` is what one task needs (0 or 1 in practice);
    ``gpus_per_job`` (dask-jobqueue) how many GPUs one worker job asks for (default
    ``gpus_per_task``), so a job runs ``gpus_per_job // gpus_per_task`` tasks at once.
    ``cluster_kwargs`` are passed through unchanged to ``LocalCluster`` / the dask-jobqueue
    cluster / submitit's ``update_parameters`` (a YAML-only escape hatch).
    """

    executor: str = "local"
    jobs: int = 1
    cluster: str | None = None
    scheduler_address: str | None = None
    scheduler_file: str | None = None
    cores: int = 4
    memory: str | int | float = "16GB"
    walltime: str | int | float = "01:00:00"
    partition: str | None = None
    account: str | None = None
    gpus_per_task: int = 0
    gpus_per_job: int | None = None
    job_directives: tuple[str, ...] = ()
    job_prologue: tuple[str, ...] = ()
    array_parallelism: int | None = None
    retries: int = 2
    task_timeout: float | None = None
    cell_timeout: float | None = None
    threads_per_task: int | None = None
    folder: str | None = None
    python: str | None = None
    poll_seconds: float = 5.0
    cluster_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_config(self, {"jobs": COUNT, "cores": COUNT, "gpus_per_task": NONNEG,
                            "gpus_per_job": NONNEG, "array_parallelism": COUNT,
                            "retries": NONNEG, "task_timeout": POSITIVE,
                            "cell_timeout": POSITIVE, "threads_per_task": COUNT,
                            "poll_seconds": POSITIVE})
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS} (got {self.executor!r})")
        if self.cluster not in CLUSTERS[self.executor]:
            ok = [c for c in CLUSTERS[self.executor] if c]
            raise ValueError(f"--cluster {self.cluster} does not go with --executor "
                             f"{self.executor} (choose from {ok})")
        remote = self.scheduler_address or self.scheduler_file
        if remote and (self.executor != "dask" or self.cluster is not None):
            raise ValueError("--scheduler-address/--scheduler-file need --executor dask "
                             "and no --cluster")
        if self.scheduler_address and self.scheduler_file:
            raise ValueError("give --scheduler-address or --scheduler-file, not both")
        walltime_minutes(self.walltime)  # validates
        memory_gb(self.memory)

    @property
    def jobs_gpus(self) -> int:
        """GPUs one dask-jobqueue worker job asks for."""
        return self.gpus_per_job if self.gpus_per_job is not None else self.gpus_per_task

    @property
    def isolate(self) -> bool:
        """Whether tasks run in a child process (all but plain ``local --jobs 1``)."""
        return not (self.executor == "local" and self.jobs == 1 and self.task_timeout is None
                    and self.threads_per_task is None and self.gpus_per_task == 0)

    def threads(self) -> int | None:
        """Intra-op threads (``OMP_NUM_THREADS``) each isolated task gets; None: unchanged."""
        if self.threads_per_task is not None:
            return self.threads_per_task
        cpus = os.cpu_count() or 1
        if self.executor == "submitit":
            return self.cores
        if self.cluster in ("slurm", "pbs"):
            per_job = self.jobs_gpus // self.gpus_per_task if self.gpus_per_task else self.cores
            return max(1, self.cores // max(1, per_job))
        if self.executor == "dask" and (self.scheduler_address or self.scheduler_file):
            return None  # unknown workers: the user says (--threads-per-task)
        return max(1, cpus // self.jobs) if self.isolate else None


def config_fields() -> tuple[str, ...]:
    """Names an executor YAML file (``--cluster-config``) may set."""
    return tuple(f.name for f in dataclasses.fields(ExecutorConfig))


def make_config(*layers: Mapping[str, Any]) -> ExecutorConfig:
    """An :class:`ExecutorConfig` from mappings applied in order (later wins; None ignored)."""
    merged: dict[str, Any] = {}
    names = set(config_fields())
    for layer in layers:
        bad = sorted(set(layer) - names)
        if bad:
            raise ValueError(f"unknown executor setting(s) {bad}; known: {sorted(names)}")
        merged.update({k: v for k, v in layer.items() if v is not None})
    for k in ("job_directives", "job_prologue"):
        if k in merged:
            v = merged[k]
            if not (isinstance(v, str) or (isinstance(v, list | tuple)
                                           and all(isinstance(x, str) for x in v))):
                raise ValueError(f"{k} must be a string or a list of strings (got {v!r})")
            merged[k] = (v,) if isinstance(v, str) else tuple(v)
    return ExecutorConfig(**merged)


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The settings of an executor YAML file (``--cluster-config``): keys as
    :class:`ExecutorConfig`'s fields, dashes allowed (``gpus-per-task: 1``)."""
    import yaml

    if not Path(path).is_file():
        raise ValueError(f"--cluster-config: executor config file {path} not found")
    try:
        data = load_yaml(path) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"--cluster-config {path}: not valid YAML "
                         f"({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: an executor config maps setting names to values")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def walltime_minutes(walltime: str | int | float) -> int:
    """Minutes (rounded up) in a SLURM time: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM``, ``D-HH:MM:SS``, or a number of minutes."""
    if isinstance(walltime, int | float):
        if isinstance(walltime, bool) or not walltime > 0:
            raise ValueError(f"walltime {walltime!r}: a number of minutes must be > 0")
        return max(1, int(-(-float(walltime) // 1)))
    text = str(walltime).strip()
    try:
        days, dash, rest = text.rpartition("-")
        parts = [int(x) for x in rest.split(":")]
        if len(parts) > 3 or min(parts) < 0 or (dash and not days):
            raise ValueError
        if days:  # D-HH[:MM[:SS]]
            h, m, sec = (parts + [0, 0])[:3]
            secs = int(days) * 86400 + h * 3600 + m * 60 + sec
        else:  # MM, MM:SS or HH:MM:SS
            h, m, sec = ([0, 0] + parts)[-3:] if len(parts) == 3 else (0, *(parts + [0])[:2])
            secs = h * 3600 + m * 60 + sec
    except ValueError:
        raise ValueError(f"walltime {walltime!r}: use a SLURM time (MM, HH:MM:SS, "
                         "D-HH:MM:SS) or a number of minutes") from None
    if secs <= 0:
        raise ValueError(f"walltime {walltime!r}: must be longer than 0")
    return max(1, -(-secs // 60))


def walltime_hms(walltime: str | int | float) -> str:
    """``walltime`` as ``HH:MM:SS`` (what SLURM's ``-t`` and PBS's ``walltime`` accept)."""
    minutes = walltime_minutes(walltime)
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def memory_gb(memory: str | int | float) -> float:
    """Gigabytes (10⁹ bytes; ``GiB`` is 2³⁰) in a memory string such as ``"16GB"``."""
    if isinstance(memory, int | float) and not isinstance(memory, bool):
        gb = float(memory)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*", str(memory).lower())
        if not m:
            raise ValueError(f"memory {memory!r}: use e.g. 16GB, 500MB or 1.5TB")
        num, unit, binary = float(m.group(1)), m.group(2), m.group(3)
        power = {"": 3, "k": 1, "m": 2, "g": 3, "t": 4}[unit]
        gb = num * (1024 if binary else 1000) ** power / 1e9
    if not gb > 0:
        raise ValueError(f"memory {memory!r}: must be more than 0 (SLURM reads 0 as all of "
                         "the node's memory)")
    return gb
