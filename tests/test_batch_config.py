"""Executor settings: parsing, validation, layering, and run_all.py's defaults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import run_all
from ofl_core.batch.config import ExecutorConfig, make_config, memory_gb, walltime_minutes


def test_settings_parse_and_validate():
    assert walltime_minutes("02:00:00") == 120
    assert walltime_minutes("1-00:30") == 24 * 60 + 30
    assert walltime_minutes("90") == 90 and walltime_minutes("1:30") == 2  # SLURM: MM:SS
    assert walltime_minutes(2.5) == 3
    assert memory_gb("32GB") == 32 and memory_gb("500MB") == 0.5
    assert memory_gb("1GiB") == pytest.approx(1.073741824)
    with pytest.raises(ValueError, match="walltime"):
        ExecutorConfig(walltime="soon")
    with pytest.raises(ValueError, match="does not go with"):
        ExecutorConfig(executor="submitit", cluster="pbs")
    with pytest.raises(ValueError, match="need --executor dask"):
        ExecutorConfig(executor="local", scheduler_address="tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="unknown executor setting"):
        make_config({"gpu_per_task": 1})
    cfg = make_config({"executor": "dask", "job_directives": "--qos=high"}, {"jobs": 3})
    assert cfg.jobs == 3 and cfg.job_directives == ("--qos=high",)


def test_quick_defaults_to_one_notebook_per_core_and_grids_to_one(monkeypatch, tmp_path):
    def jobs(argv: list[str]) -> int:
        return run_all.executor_config(run_all.parse_args(argv)).jobs

    monkeypatch.setattr(run_all.os, "cpu_count", lambda: 2)
    assert jobs([]) == jobs(["--quick"]) == 2
    assert jobs(["--quick", "--jobs", "1"]) == 1
    assert jobs(["--full"]) == jobs(["--grid", "g.yaml"]) == 1
    cfg = tmp_path / "c.yaml"
    cfg.write_text("jobs: 3\n")
    assert jobs(["--quick", "--cluster-config", str(cfg)]) == 3  # a file's value wins
    monkeypatch.setattr(run_all.os, "cpu_count", lambda: 64)
    assert jobs(["--quick"]) == run_all.QUICK_JOBS_MAX


def test_quick_starts_the_longest_notebooks_first(monkeypatch):
    """Longest-processing-time-first: the quick run's longest notebook must not start last
    (it kept one core busy alone at the end); an unknown notebook counts as the longest."""
    notebooks = run_all.list_notebooks()
    order = [t.notebook for t in run_all.make_tasks(run_all.parse_args(["--quick"]))]
    assert sorted(order) == sorted(notebooks)
    assert order[0] == max(notebooks, key=lambda n: run_all.QUICK_SECONDS.get(n, 0))
    secs = [run_all.QUICK_SECONDS[n] for n in order]
    assert secs == sorted(secs, reverse=True)
    monkeypatch.setattr(run_all, "list_notebooks", lambda: [*notebooks, "zz_new"])
    monkeypatch.setattr(run_all, "check_parameters", lambda task: None)
    assert run_all.make_tasks(run_all.parse_args(["--quick"]))[0].notebook == "zz_new"


def test_run_all_starts_without_importing_torch():
    """run_all.py imports torch only where a task or the report needs it: every run_all start
    (each task's bookkeeping, each test that runs it) used to spend about 4 s importing torch,
    the methods and the plots through the coverage planners and the report."""
    code = "import sys, run_all; print(sorted(m for m in ('torch', 'seaborn') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(run_all.__file__).parent)
    assert out.stdout.strip() == "[]", out.stdout
