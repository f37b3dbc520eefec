"""Executing one task in a child process: a failing notebook, a dead kernel, a cell timeout
and the task timeout mark that task failed (never the batch); threads and GPUs reach the
kernel."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest

from ofl_core.batch import gpus
from ofl_core.batch.config import ExecutorConfig
from ofl_core.batch.gpus import GpuPool
from ofl_core.batch.grid import run_grid
from ofl_core.batch.tasks import Task, task_paths

os.environ.setdefault("TQDM_DISABLE", "1")


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
        "if mode == 'usr2':  # what SLURM sends every process of a job step before its walltime\n"
        "    import signal\n"
        "    os.kill(os.getpid(), signal.SIGUSR2)\n"
        "    os.kill(os.getppid(), signal.SIGUSR2)  # the task process that started the kernel\n"
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
    monkeypatch.setattr(gpus, "GPU_POOL", GpuPool(["3", "5"]))  # two fake GPUs
    # 30 s: the "ok" task (a kernel start) took over 15 s on 2 cores busy with the rest of the
    # suite (two fresh-clone CI runs); the "slow" one sleeps 120 s
    cfg = ExecutorConfig(jobs=2, task_timeout=30, gpus_per_task=1)
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


def test_the_walltime_warning_signal_does_not_kill_the_task_process_or_its_kernel(tmp_path):
    """submitit asks SLURM for SIGUSR2 before the walltime, and SLURM sends it to every process
    of the job step: only the submitit process may act on it (it ends the job as TIMEOUT and
    kills the task process); a task process or kernel killed by it first made the task fail
    with "killed by signal 12" instead of the walltime."""
    nbdir = probe_notebook(tmp_path / "nbs")
    task = Task("probe", {"tag": "t", "mode": "usr2", "seconds": 0.5,
                          "probe_dir": str(tmp_path)})
    cfg = ExecutorConfig(jobs=1, task_timeout=120)  # a child process, as under submitit
    [res] = run_grid([task], tmp_path / "out", cfg, nbdir, log=False)
    assert res.status == "done", res.error


@pytest.mark.slow
def test_inline_cell_timeout_marks_the_task_failed(tmp_path):
    nbdir = probe_notebook(tmp_path / "nbs")
    t = Task("probe", {"tag": "s", "seconds": 60, "probe_dir": str(tmp_path)})
    (r,) = run_grid([t], tmp_path / "out", ExecutorConfig(cell_timeout=2), nbdir, log=False)
    assert r.status == "failed" and "CellTimeoutError" in r.error, r.error


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_code_version_names_the_commit_and_edits_without_running_the_notebook_filter(tmp_path):
    """A run's ``code_version``: the commit, ``+dirty`` for an edited module or notebook .py;
    git's clean filter for .ipynb files (nbstripout, a Python process per file) never runs,
    even for an .ipynb that differs from its committed form."""
    import subprocess

    from ofl_core.batch.execute import code_version

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c",
                               "user.email=t@t", *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    for rel, text in [("ofl_core/m.py", "x = 1\n"), ("notebooks/a.py", "# %%\n1\n"),
                      ("notebooks/a.ipynb", "{}\n"), (".gitattributes", "*.ipynb filter=slow\n")]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "c")
    log = tmp_path.parent / "filter-ran"
    git("config", "filter.slow.clean", f"sh -c 'echo ran >> {log}; cat'")
    rev = git("rev-parse", "--short=12", "HEAD")

    (tmp_path / "notebooks/a.ipynb").write_text('{"cells": []}\n')
    assert code_version(tmp_path).endswith(f"git {rev}")
    assert not log.exists(), "the .ipynb filter ran"
    (tmp_path / "notebooks/a.py").write_text("# %%\n2\n")
    assert code_version(tmp_path).endswith(f"git {rev}+dirty")
    git("checkout", "--", "notebooks/a.py")
    (tmp_path / "ofl_core/m.py").write_text("x = 2\n")
    assert code_version(tmp_path).endswith(f"git {rev}+dirty")
    assert not log.exists(), "the .ipynb filter ran"


@pytest.mark.parametrize("error, calls, status", [
    (RuntimeError("Kernel died before replying to kernel_info"), 3, "failed"),
    (None, 2, "done"),  # the first start loses the port race, the second runs the notebook
    (ValueError("boom"), 1, "failed"),  # a notebook's own error is not retried
])
def test_a_kernel_that_fails_to_start_is_started_again(tmp_path, monkeypatch, error, calls,
                                                       status):
    import papermill

    from ofl_core.batch import execute

    nbdir = probe_notebook(tmp_path / "nbs")
    seen = []

    def fake_execute(src, dst, **kw):
        seen.append(dst)
        if error is None and len(seen) == 1:
            raise RuntimeError("zmq.error.ZMQError: Address already in use")
        if error is not None:
            raise error
        shutil.copy(src, dst)

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    res = execute.execute_task(Task("probe", {"tag": "t", "probe_dir": str(tmp_path)}),
                               tmp_path / "out", tmp_path / "fig", nbdir)
    assert (len(seen), res.status) == (calls, status), res.error
    if error is not None:
        assert type(error).__name__ in res.error
