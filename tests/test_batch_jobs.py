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


def _shipped_main_tables(results, parameters, precision, machine):
    (results / "main_tables").mkdir(parents=True)
    (results / "main_tables" / "abc.json").write_text(json.dumps({
        "status": "done", "notebook": "main_tables", "run_id": "abc",
        "parameters": parameters, "code_version": "ofl_core 0.1.0, git 0123456789ab",
        "machine": machine,
        "records": [{"experiment": "main_tables", "paper": "dense", "table": "T1",
                     "dataset": "fmnist", "partition": "dirichlet", "alpha": 0.5,
                     "num_clients": 5, "seed": 1, "method": "fedavg", "preset": "paper",
                     "config_hash": "0123456789ab", "version": "0.1.0", "last_acc": 50.0,
                     "best_acc": 50.0, "precision": precision}]}))


BF16_CPU = "avx2,avx512f,avx512_bf16"


@pytest.mark.parametrize("native, features_here, machine, expected", [
    (False, "avx2", {}, "precision fp32 here, bf16"),
    (True, BF16_CPU, {}, None),
    (True, BF16_CPU, {"cpu_features": BF16_CPU}, None),
    (True, BF16_CPU, {"cpu_features": "avx2,avx512f,amx_bf16"},
     f"cpu_features {BF16_CPU} here, avx2,avx512f,amx_bf16"),
])
def test_skip_shipped_warns_when_the_left_tasks_clients_would_train_with_other_arithmetic(
        tmp_path, capsys, monkeypatch, native, features_here, machine, expected):
    import ofl_core.batch.client_arithmetic as cp

    grid = tmp_path / "grid.yaml"
    grid.write_text("main_tables:\n"
                    "  - {seeds: [1, 2], methods: [fedavg], presets: [paper]}\n"
                    "  - {seeds: [2], methods: [dense], presets: ['paper+kd_data=pool'],"
                    " fedcvae_methods: []}\n"
                    "  - {seeds: [3], methods: [dense], presets: [paper]}\n"
                    "  - {seeds: [2], methods: [dense], presets: [authors_code]}\n")
    results = tmp_path / "results"
    _shipped_main_tables(results, {"seeds": [1, 2], "methods": ["fedavg"],
                                   "presets": ["paper"]}, "local=bf16;server=fp32", machine)
    monkeypatch.setattr(run_all, "RESULTS_DIR", results)
    monkeypatch.setattr(cp, "native_bf16", lambda device: native)
    monkeypatch.setattr(cp, "this_cpu", lambda: {"cpu": "a CPU", "cpu_features": features_here})

    assert run_all.main(["--grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run",
                         "--skip-shipped"]) == 0
    lines = capsys.readouterr().out.splitlines()
    warned = [line for line in lines if line.startswith("    main_tables ")]
    if expected is None:  # the same arithmetic, or nothing recorded to tell otherwise
        assert not any(line.startswith("warning:") for line in lines) and not warned
        return
    # only the reading of the shipped preset on an overlapping seed shares its clients
    assert "warning: 1 of the 3 tasks left" in "\n".join(lines)
    second = run_all.load_grid(grid)[1]
    assert warned == [f"    main_tables {second.run_id()}: {expected} in "
                      "results/main_tables/abc.json"]


def test_an_explicit_local_amp_is_the_precision_whatever_the_machine(monkeypatch):
    import ofl_core.batch.client_arithmetic as cp

    monkeypatch.setattr(cp, "native_bf16", lambda device: True)
    assert cp.local_precision_here({"local_options": {"amp": False}}) == "fp32"
    assert cp.local_precision_here({"device": "cpu"}) == "bf16"
    monkeypatch.setattr(cp, "native_bf16", lambda device: False)
    assert cp.local_precision_here({"local_options": {"amp": True}}) == "bf16"
    assert cp.local_precision_here({"device": "cpu"}) == "fp32"


def test_a_shipped_run_of_more_methods_and_seeds_holds_the_task_of_one(tmp_path, capsys,
                                                                         monkeypatch):
    grid = tmp_path / "grid.yaml"
    grid.write_text("main_tables:\n"
                    "  - {seeds: [2], methods: [feddf]}\n"
                    "  - {seeds: [3], methods: [feddf]}\n"
                    "  - {seeds: [2], methods: [dense]}\n"
                    "  - {seeds: [2], methods: [feddf], local_epochs: 3}\n")
    results = tmp_path / "results"
    _shipped_main_tables(results, {"seeds": [1, 2], "methods": ["fedavg", "feddf"]},
                         "local=fp32;server=fp32", {})
    monkeypatch.setattr(run_all, "RESULTS_DIR", results)

    assert run_all.main(["--grid", str(grid), "--out", str(tmp_path / "out"),
                         "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marks = [line.strip() for line in lines if line.strip().startswith("shipped:")]
    assert marks == ["shipped: results/main_tables/abc.json (ofl_core 0.1.0, git 0123456789ab) "
                     "within a run of more methods, seeds, α or presets"]
    assert run_all.main(["--grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run",
                         "--skip-shipped"]) == 0
    text = capsys.readouterr().out
    assert "1 of 4 tasks left out" in text
    left = [line for line in text.splitlines() if line.startswith("main_tables ")]
    assert len(left) == 3 and not any("'seeds': [2], 'methods': ['feddf']}" in line
                                      for line in left)


def test_a_gpu_made_shipped_run_is_other_arithmetic_for_a_cpu_task(monkeypatch):
    import ofl_core.batch.client_arithmetic as cp

    monkeypatch.setattr(cp, "native_bf16", lambda device: device == "cuda")
    monkeypatch.setattr(cp, "this_cpu", lambda: {"cpu": "a CPU", "cpu_features": "avx2"})
    run = {"notebook": "main_tables", "shipped": "results/main_tables/gpu.json",
           "parameters": {"seeds": [1], "device": "auto"}, "machine": {"gpus": "NVIDIA H100"},
           "records": [{"precision": "local=bf16;server=bf16"}]}
    lines = cp.arithmetic_warnings([run_all.Task("main_tables", {"seeds": [1]})], [run])
    assert len(lines) == 3
    assert "precision fp32 here, bf16; device cpu here, cuda in results/main_tables/gpu.json" \
        in lines[1]
    # the same task on the GPU: the same arithmetic as far as the sidecar tells
    assert cp.arithmetic_warnings(
        [run_all.Task("main_tables", {"seeds": [1], "device": "cuda"})], [run]) == []


@pytest.mark.parametrize("flag, reads", [([], True), (["--no-shipped"], False)])
def test_no_shipped_leaves_the_shipped_records_out_of_the_report(tmp_path, capsys, monkeypatch,
                                                                 flag, reads):
    """The report reads results/ by default; ``--no-shipped`` builds it from --out alone."""
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(run_all, "RESULTS_DIR", results)
    monkeypatch.setattr(run_all, "run_grid", lambda *a, **k: [])
    seen = []
    monkeypatch.setattr(run_all, "build_report",
                        lambda out, failures=(), results="unset": seen.append(results) or
                        Path(out) / "report" / "index.html")
    grid = tmp_path / "grid.yaml"
    grid.write_text("partitions:\n  - {num_clients: 3}\n")
    assert run_all.main(["--grid", str(grid), "--out", str(tmp_path / "out"), *flag]) == 0
    assert seen == [results if reads else None]
