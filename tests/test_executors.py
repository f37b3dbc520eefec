"""Executors of run_all.py: local pool, Dask (LocalCluster on 127.0.0.1), submitit (local
backend), the generated SLURM / PBS scripts (golden files), failure isolation, resume, and the
client-cache lock. No GPU, no SLURM needed.

Regenerate the golden scripts after an intended change: ``OFL_UPDATE_GOLDEN=1 pytest
tests/test_executors.py -k golden``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

import run_all
from ofl_core import executors
from ofl_core.executors import (
    ExecutorConfig,
    GpuPool,
    InlineExecutor,
    LocalPoolExecutor,
    MissingDependencyError,
    TaskSpec,
    job_script,
    make_config,
    make_executor,
    memory_gb,
    run_grid,
    walltime_minutes,
)
from ofl_core.runner import Task, task_paths

os.environ.setdefault("TQDM_DISABLE", "1")
GOLDEN = Path(__file__).parent / "golden"
#: the cheapest real notebook at tiny settings (no client training; a few seconds)
TINY_PARTITIONS = {"fedcvae_alphas": [0.01]}


def partitions_tasks(n: int) -> list[Task]:
    return [Task("partitions", {**TINY_PARTITIONS, "alphas": [a]})
            for a in (0.1, 0.2, 0.3, 0.5)[:n]]


def write_grid(path: Path, tasks: list[Task]) -> Path:
    by_nb: dict[str, list[dict]] = {}
    for t in tasks:
        by_nb.setdefault(t.notebook, []).append(t.parameters)
    path.write_text(json.dumps(by_nb))
    return path


# ------------------------------------------------------------------ settings and parsing


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


def test_local_jobs1_is_inline_and_jobs_n_limits_threads():
    assert isinstance(make_executor(ExecutorConfig()), InlineExecutor)
    assert not ExecutorConfig().isolate and ExecutorConfig().threads() is None
    pool = make_executor(ExecutorConfig(jobs=2))
    assert isinstance(pool, LocalPoolExecutor)
    pool.shutdown()
    assert ExecutorConfig(jobs=2).threads() == max(1, (os.cpu_count() or 1) // 2)
    assert ExecutorConfig(jobs=2, threads_per_task=3).threads() == 3
    assert ExecutorConfig(executor="submitit", cores=6).threads() == 6
    # a 4-GPU, 16-core dask-jobqueue job runs 4 one-GPU tasks with 4 threads each
    assert ExecutorConfig(executor="dask", cluster="slurm", cores=16, gpus_per_task=1,
                          gpus_per_job=4).threads() == 4
    spec = TaskSpec(Task("partitions", {"alphas": [0.1]}), "abc", "/o", "/o/f", threads=2)
    assert TaskSpec.from_json(spec.to_json()) == spec


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


def test_missing_optional_dependency_is_one_clear_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    with pytest.raises(MissingDependencyError, match=r"pip install -e '\.\[cluster\]'"):
        make_executor(ExecutorConfig(executor="dask"))
    grid = write_grid(tmp_path / "g.json", partitions_tasks(1))
    rc = run_all.main(["--grid", str(grid), "--out", str(tmp_path), "--executor", "dask"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "pip install -e '.[cluster]'" in err, err


# ------------------------------------------------------------------ failure isolation


def probe_notebook(folder: Path) -> Path:
    """A notebook that records its pid and environment, then behaves as ``mode`` says."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
    params = nbformat.v4.new_code_cell(
        'tag = "x"\nmode = "ok"\nseconds = 0.0\nprobe_dir = "."\nfigures_dir = ""')
    params.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import json, os, pathlib, time\n"
        "pathlib.Path(probe_dir, tag + '.json').write_text(json.dumps({\n"
        "    'pid': os.getpid(), 'omp': os.environ.get('OMP_NUM_THREADS'),\n"
        "    'cuda': os.environ.get('CUDA_VISIBLE_DEVICES')}))\n"
        "if mode == 'raise':\n    raise ValueError('boom')\n"
        "if mode == 'die':\n    os._exit(3)\n"
        "time.sleep(seconds)")
    nb.cells = [params, body]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "probe.ipynb")
    return folder


def process_gone(pid: int, wait: float = 10.0) -> bool:
    deadline = time.time() + wait
    while time.time() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_local_pool_marks_exception_dead_kernel_and_timeout_failed(tmp_path, monkeypatch):
    nbdir = probe_notebook(tmp_path / "nbs")
    probes = tmp_path / "probes"
    probes.mkdir()

    def task(tag: str, mode: str = "ok", seconds: float = 0.0) -> Task:
        return Task("probe", {"tag": tag, "mode": mode, "seconds": seconds,
                              "probe_dir": str(probes)})

    tasks = [task("slow", seconds=120), task("ok"), task("boom", "raise"), task("die", "die")]
    monkeypatch.setattr(executors, "_GPU_POOL", GpuPool(["3", "5"]))  # two fake GPUs
    cfg = ExecutorConfig(jobs=2, task_timeout=15, gpus_per_task=1)
    out = tmp_path / "out"
    res = {r.task.parameters["tag"]: r for r in run_grid(tasks, out, cfg, nbdir, log=False)}

    assert res["ok"].status == "done", res["ok"].error
    assert res["boom"].status == "failed" and "ValueError: boom" in res["boom"].error
    assert res["die"].status == "failed" and "DeadKernelError" in res["die"].error
    assert res["slow"].status == "failed" and res["slow"].error.startswith("timeout")
    seen = {t: json.loads((probes / f"{t}.json").read_text()) for t in res}
    threads = str(max(1, (os.cpu_count() or 1) // 2))
    assert {s["omp"] for s in seen.values()} == {threads}  # OMP_NUM_THREADS reached the kernel
    assert seen["slow"]["cuda"] in ("3", "5") and seen["ok"]["cuda"] in ("3", "5")
    assert seen["slow"]["cuda"] != seen["ok"]["cuda"]  # concurrent tasks: their own GPU each
    if sys.platform.startswith("linux"):
        assert process_gone(seen["slow"]["pid"]), "the timed-out task's kernel survived"
    nb_out, js = task_paths(out, tasks[0], res["slow"].run_id)
    assert not js.exists() and nb_out.with_name(f"{res['slow'].run_id}.failed.ipynb").exists()
    assert not list(out.rglob(".*.tmp*")), "no temp files left behind"


@pytest.mark.slow
def test_inline_cell_timeout_marks_the_task_failed(tmp_path):
    nbdir = probe_notebook(tmp_path / "nbs")
    t = Task("probe", {"tag": "s", "seconds": 60, "probe_dir": str(tmp_path)})
    (r,) = run_grid([t], tmp_path / "out", ExecutorConfig(cell_timeout=2), nbdir, log=False)
    assert r.status == "failed" and "CellTimeoutError" in r.error, r.error


# ------------------------------------------------------------------ Dask


def kill_a_busy_worker(client, killed: list[str]) -> None:
    """SIGKILL the process of a worker that is in the middle of a task."""
    deadline = time.time() + 120
    while time.time() < deadline and not killed:
        busy = [w for w, keys in client.processing().items() if keys]
        if busy:
            time.sleep(1.5)  # let its task's child process and kernel start
            busy = [w for w, keys in client.processing().items() if keys]
            if busy:
                pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                os.kill(pid, signal.SIGKILL)
                killed.append(busy[0])
        time.sleep(0.1)


@pytest.mark.slow
def test_dask_local_cluster_runs_grid_survives_a_killed_worker_and_resumes(tmp_path, capsys):
    pytest.importorskip("distributed")
    tasks = partitions_tasks(4)
    out = tmp_path / "out"
    cfg = ExecutorConfig(executor="dask", jobs=2, retries=2)
    ex = make_executor(cfg, out)
    assert all(a.startswith("tcp://127.0.0.1:") for a in ex.client.scheduler_info()["workers"])
    killed: list[str] = []
    killer = threading.Thread(target=kill_a_busy_worker, args=(ex.client, killed), daemon=True)
    killer.start()
    try:
        results = run_grid(tasks, out, cfg, executor=ex)
    finally:
        ex.shutdown()
    killer.join(5)
    assert killed, "no worker was killed mid-task"
    assert [r.status for r in results] == ["done"] * 4, [r.error for r in results]
    for r in results:
        nb, js = task_paths(out.resolve(), r.task, r.run_id)
        assert nb.is_file() and json.loads(js.read_text())["status"] == "done"

    grid = write_grid(tmp_path / "grid.json", tasks)
    capsys.readouterr()
    rc = run_all.main(["--grid", str(grid), "--out", str(out), "--executor", "dask",
                       "--jobs", "2"])
    text = capsys.readouterr().out
    assert rc == 0 and "4 tasks: 0 ran, 4 skipped (already done), 0 failed" in text, text


# ------------------------------------------------------------------ submitit


@pytest.mark.slow
def test_submitit_local_backend_runs_two_tasks_and_redoes_a_half_written_one(tmp_path, capsys):
    pytest.importorskip("submitit")
    tasks = partitions_tasks(2)
    out = tmp_path / "out"
    rid = tasks[1].run_id()
    nb, js = task_paths(out, tasks[1], rid)
    nb.parent.mkdir(parents=True)
    nb.write_text("")  # a half-written task: truncated sidecar, empty notebook
    js.write_text('{"status": "do')
    grid = write_grid(tmp_path / "grid.json", tasks)
    conf = tmp_path / "cluster.yaml"
    conf.write_text("cluster: local\npoll-seconds: 0.5\nwalltime: '00:10:00'\n")
    rc = run_all.main(["--grid", str(grid), "--out", str(out), "--executor", "submitit",
                       "--cluster-config", str(conf)])
    text = capsys.readouterr().out
    assert rc == 0 and "2 tasks: 2 ran, 0 skipped (already done), 0 failed" in text, text
    assert json.loads(js.read_text())["status"] == "done"
    assert list((out / "submitit").rglob("*_result.pkl")), "ran through submitit jobs"


# ------------------------------------------------------------------ batch scripts (golden)

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


# ------------------------------------------------------------------ client cache lock

LOCK_SCRIPT = """
import sys, time, torch
from ofl_core.upload_cache import UploadCache
cache, payload = UploadCache(sys.argv[1]), {"client": 0}
with cache.lock(payload):
    if cache.get(payload) is None:
        with open(sys.argv[2], "a") as f:
            f.write("trained\\n")
        time.sleep(1.0)
        cache.put(payload, {"w": torch.ones(3)})
"""


def test_upload_cache_lock_trains_a_shared_client_once(tmp_path):
    from ofl_core.upload_cache import UploadCache

    log = tmp_path / "trained.log"
    procs = [subprocess.Popen([sys.executable, "-c", LOCK_SCRIPT, str(tmp_path / "c"), str(log)])
             for _ in range(2)]
    assert [p.wait(120) for p in procs] == [0, 0]
    assert log.read_text().count("trained") == 1
    cache = UploadCache(tmp_path / "c")
    assert cache.get({"client": 0})["w"].tolist() == [1.0, 1.0, 1.0] and len(cache) == 1
    with cache.lock({"client": 0}), cache.lock_many([{"client": 0}, {"client": 1}]):
        pass  # re-entrant in one thread, no deadlock
