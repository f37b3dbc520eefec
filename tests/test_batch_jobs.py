"""The batch scripts run_all.py would submit: dask-jobqueue SLURM / PBS worker jobs and the
submitit job array (golden files), and --dry-run.

Regenerate the golden scripts after an intended change: ``OFL_UPDATE_GOLDEN=1 pytest
tests/test_batch_jobs.py -k golden``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import run_all
from ofl_core.batch.config import ExecutorConfig
from ofl_core.batch.jobs import job_script

GOLDEN = Path(__file__).parent / "golden"

GPU_JOB = {"cores": 8, "memory": "32GB", "walltime": "02:00:00", "partition": "gpu",
           "account": "ofl", "gpus_per_task": 1, "job_directives": ("--constraint=a100",),
           "job_prologue": ("module load cuda", "source /shared/ofl/.venv/bin/activate"),
           "python": "python"}


def normalise(script: str) -> str:
    return "\n".join(line.rstrip() for line in script.replace(sys.executable, "PYTHON")
                     .strip().splitlines()) + "\n"


def check_golden(name: str, script: str) -> None:
    path = GOLDEN / name
    text = normalise(script)
    if os.environ.get("OFL_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; OFL_UPDATE_GOLDEN=1 to accept"


def test_golden_dask_jobqueue_slurm_and_pbs_scripts():
    pytest.importorskip("dask_jobqueue")
    slurm = job_script(ExecutorConfig(executor="dask", cluster="slurm", gpus_per_job=2,
                                      **GPU_JOB), 10)
    for line in ("#SBATCH --gres=gpu:2", "#SBATCH -t 02:00:00", "#SBATCH -p gpu",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --constraint=a100", "module load cuda"):
        assert line in slurm.splitlines(), line
    assert "--resources GPU=2" in slurm  # two one-GPU tasks at a time per job
    check_golden("dask_jobqueue_slurm.sh", slurm)
    pbs = job_script(ExecutorConfig(executor="dask", cluster="pbs", **{
        **GPU_JOB, "job_directives": ("-l place=excl",)}), 10)
    assert "#PBS -l select=1:ncpus=8:ngpus=1:mem=32GB" in pbs
    assert "#PBS -l walltime=02:00:00" in pbs
    check_golden("dask_jobqueue_pbs.sh", pbs)


def test_golden_submitit_sbatch_array_script():
    pytest.importorskip("submitit")
    cfg = ExecutorConfig(executor="submitit", array_parallelism=2,
                         folder="/shared/ofl/submitit/%j", **{**GPU_JOB, "walltime": "1:30:00"})
    script = job_script(cfg, 4)
    for line in ("#SBATCH --gpus-per-node=1", "#SBATCH --time=90", "#SBATCH --array=0-3%2",
                 "#SBATCH --partition=gpu", "#SBATCH --mem=32GB", "#SBATCH --constraint=a100"):
        assert line in script.splitlines(), line
    check_golden("submitit_slurm_array.sh", script)


def test_dry_run_prints_tasks_and_the_slurm_script(tmp_path, capsys):
    pytest.importorskip("dask_jobqueue")
    rc = run_all.main(["--quick", "--only", "partitions", "--out", str(tmp_path), "--dry-run",
                       "--executor", "dask", "--cluster", "slurm", "--gpus-per-task", "1",
                       "--walltime", "04:00:00", "--partition", "gpu"])
    text = capsys.readouterr().out
    assert rc == 0 and text.startswith("partitions ")
    assert "#SBATCH --gres=gpu:1" in text and "#SBATCH -t 04:00:00" in text
    assert not (tmp_path / "runs").exists()


def test_skip_shipped_leaves_out_the_tasks_whose_run_is_shipped(tmp_path, capsys, monkeypatch):
    grid = tmp_path / "grid.yaml"
    grid.write_text("partitions:\n  - {num_clients: 3}\n  - {num_clients: 4}\n")
    results = tmp_path / "results"
    (results / "partitions").mkdir(parents=True)
    (results / "partitions" / "abc.json").write_text(json.dumps({
        "status": "done", "notebook": "partitions", "run_id": "abc",
        "parameters": {"num_clients": 4}, "code_version": "ofl_core 0.1.0, git 0123456789ab",
        "records": []}))
    monkeypatch.setattr(run_all, "RESULTS_DIR", results)
    out = tmp_path / "out"

    assert run_all.main(["--grid", str(grid), "--out", str(out), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip().startswith("shipped:")]
    assert len(marks) == 1
    assert lines[marks[0]].strip() == ("shipped: results/partitions/abc.json "
                                       "(ofl_core 0.1.0, git 0123456789ab)")
    task_line = next(line for line in reversed(lines[:marks[0]])
                     if line.startswith("partitions "))
    assert "'num_clients': 4" in task_line

    assert run_all.main(["--grid", str(grid), "--out", str(out), "--dry-run",
                         "--skip-shipped"]) == 0
    text = capsys.readouterr().out
    tasks = [line for line in text.splitlines() if line.startswith("partitions ")]
    assert "1 of 2 tasks left out" in text
    assert len(tasks) == 1 and "'num_clients': 3" in tasks[0]

    grid.write_text("partitions:\n  - {num_clients: 4}\n")
    assert run_all.main(["--grid", str(grid), "--out", str(out), "--skip-shipped"]) == 0
    assert "nothing to run" in capsys.readouterr().out
    assert not (out / "runs").exists()
