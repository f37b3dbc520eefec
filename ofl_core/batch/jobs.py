"""Batch jobs: the parameters of dask-jobqueue's worker jobs and of submitit's SLURM job
arrays, and the job script either would submit (``run_all.py --dry-run``)."""

from __future__ import annotations

import functools
import itertools
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import ExecutorConfig, memory_gb, walltime_hms, walltime_minutes
from .optional import require


def jobqueue_class(cluster: str) -> Any:
    """dask-jobqueue's cluster class for ``cluster`` (``slurm`` or ``pbs``), giving every job
    it submits a worker name never used before (:func:`fresh_worker_names`)."""
    from dask_jobqueue import PBSCluster, SLURMCluster

    return fresh_worker_names({"slurm": SLURMCluster, "pbs": PBSCluster}[cluster])


@functools.cache
def fresh_worker_names(base: type) -> type:
    """``base`` (a distributed ``SpecCluster``) whose new worker jobs never reuse a name.

    ``SpecCluster`` names a new worker after the lowest free number, so a job that replaces a
    lost one gets the lost worker's name; ``distributed.deploy.lost-worker-timeout`` (15 s)
    after losing that worker, the cluster closes whatever job holds the name and has no
    connected worker — the replacement, whenever it is still queued. On a busy cluster each
    replacement was cancelled in turn (the job keeper counted them as jobs that never started,
    and gave up)."""

    class FreshNames(base):  # type: ignore[misc, valid-type]
        def _new_worker_name(self, worker_number: int) -> str:
            if not hasattr(self, "_ofl_names"):
                self._ofl_names = itertools.count()
            return super()._new_worker_name(next(self._ofl_names))

    FreshNames.__name__ = FreshNames.__qualname__ = base.__name__
    return FreshNames



def jobqueue_kwargs(config: ExecutorConfig) -> dict[str, Any]:
    """Keyword arguments of the dask-jobqueue cluster: one worker process per job with
    ``cores`` threads; GPUs as ``--gres=gpu:N`` (SLURM) or ``ngpus=N`` (PBS Pro ``select``)
    and declared to the scheduler as the worker resource ``GPU=N``."""
    gpus = config.jobs_gpus
    directives = list(config.job_directives)
    kw: dict[str, Any] = {
        "cores": config.cores, "memory": config.memory, "processes": 1,
        "walltime": walltime_hms(config.walltime), "queue": config.partition,
        "account": config.account, "job_script_prologue": list(config.job_prologue),
        "python": config.python or sys.executable,
    }
    if gpus:
        kw["worker_extra_args"] = ["--resources", f"GPU={gpus}"]
        if config.cluster == "slurm":
            directives.insert(0, f"--gres=gpu:{gpus}")
        else:
            kw["resource_spec"] = (f"select=1:ncpus={config.cores}:ngpus={gpus}"
                                   f":mem={config.memory}")
    kw["job_extra_directives"] = directives
    kw.update(config.cluster_kwargs)
    return kw



def submitit_folder(config: ExecutorConfig, out: str | os.PathLike) -> str:
    """submitit's log/pickle folder (``%j``: the job id)."""
    return config.folder or str(Path(out).resolve() / "submitit" / "%j")



def _directive_params(directives: Sequence[str]) -> dict[str, Any]:
    """``["--constraint=a100", "--qos high", "--exclusive"]`` → sbatch parameters."""
    params: dict[str, Any] = {}
    for d in directives:
        m = re.fullmatch(r"\s*-*([^=\s]+)(?:(?:=|\s+)(.*))?", d)
        if not m:
            raise ValueError(f"job directive {d!r}: use --name=value, '--name value' or --flag")
        value = m.group(2)
        params[m.group(1).replace("-", "_")] = value.strip() if value else True
    return params



def submitit_slurm_parameters(config: ExecutorConfig) -> dict[str, Any]:
    """``SlurmExecutor.update_parameters`` arguments: one array element = one task with
    ``gpus_per_task`` GPUs (``--gpus-per-node``), ``cores`` CPUs, ``memory``, ``walltime``."""
    gb = memory_gb(config.memory)
    params: dict[str, Any] = {
        "job_name": "ofl", "time": walltime_minutes(config.walltime),
        "cpus_per_task": config.cores, "ntasks_per_node": 1,
        "mem": f"{int(gb)}GB" if gb == int(gb) else f"{int(gb * 1024)}MB",
    }
    if config.gpus_per_task:
        params["gpus_per_node"] = config.gpus_per_task
    if config.partition:
        params["partition"] = config.partition
    if config.account:
        params["account"] = config.account
    parallel = config.array_parallelism or (config.jobs if config.jobs > 1 else None)
    if parallel:
        params["array_parallelism"] = parallel
    if config.job_prologue:
        params["setup"] = list(config.job_prologue)
    if config.job_directives:
        params["additional_parameters"] = _directive_params(config.job_directives)
    params.update(config.cluster_kwargs)
    return params



def job_script(config: ExecutorConfig, n_tasks: int, out: str | os.PathLike = ".") -> str | None:
    """The batch script ``config`` would submit (None for local and existing clusters):
    dask-jobqueue's ``job_script()`` of one worker job, or submitit's sbatch file of the job
    array for ``n_tasks`` tasks."""
    if config.executor == "dask" and config.cluster in ("slurm", "pbs"):
        require(("dask_jobqueue",), "dask --cluster " + config.cluster)
        from dask_jobqueue.pbs import PBSJob
        from dask_jobqueue.slurm import SLURMJob

        job_cls = {"slurm": SLURMJob, "pbs": PBSJob}[config.cluster]
        # what cluster.job_script() shows, without starting a scheduler
        return job_cls("tcp://<scheduler-address>:8786", name="dummy-name",
                       **jobqueue_kwargs(config)).job_script()
    if config.executor == "submitit" and config.cluster is None:
        require(("submitit",), "submitit")
        from submitit.slurm import slurm

        folder = submitit_folder(config, out)
        python = config.python or shlex.quote(sys.executable)
        command = f"{python} -u -m submitit.core._submit {shlex.quote(folder)}"
        return slurm._make_sbatch_string(command=command, folder=folder,
                                         map_count=max(1, n_tasks),
                                         **submitit_slurm_parameters(config))
    return None
