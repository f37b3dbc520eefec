"""The ``slurm`` fixture: a single-node SLURM on localhost (``scripts/slurm_localhost.sh``).

Session scope: brought up once where SLURM is installed and this user is root (or has
passwordless sudo); stopped at the end if this session started it. Elsewhere the tests that
use it are skipped with the reason (``OFL_REQUIRE_SLURM=1``: they fail instead, as in CI where
``.ci/run`` installed SLURM). The fixture never installs packages; ``.ci/run`` or the script
does. Each test leaves an empty queue behind (its leftover jobs are cancelled).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_localhost.sh"


@dataclass(frozen=True)
class Slurm:
    partition: str = "debug"

    def queue(self) -> list[tuple[str, str]]:
        """``(job id, state)`` of every job SLURM still lists (array elements one by one)."""
        p = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T"],
                           capture_output=True, text=True, timeout=30)
        return [tuple(ln.split("|", 1)) for ln in p.stdout.split()]  # type: ignore[misc]

    def live(self) -> list[str]:
        """Ids of the jobs not over yet."""
        return [j for j, s in self.queue() if s in ("PENDING", "RUNNING", "CONFIGURING",
                                                     "COMPLETING")]

    def cancel_all(self, timeout: float = 60) -> None:
        """Cancel every job and wait until none is left running (at most ``timeout`` s)."""
        ids = sorted({j.split("_")[0] for j in self.live()})
        if ids:
            subprocess.run(["scancel", *ids], timeout=30, check=False)
        deadline = time.monotonic() + timeout
        while self.live() and time.monotonic() < deadline:
            time.sleep(1)


def _script(action: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "OFL_SLURM_NO_INSTALL": "1"}
    try:
        return subprocess.run([str(SCRIPT), action], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess([str(SCRIPT), action], 1, "", str(e))


def _unavailable(reason: str) -> None:
    if os.environ.get("OFL_REQUIRE_SLURM") == "1":
        pytest.fail(f"OFL_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_session():
    started = _script("status", 30).returncode != 0
    if started:
        p = _script("up", 300)
        if p.returncode != 0:
            lines = (p.stderr or p.stdout).strip().splitlines() or ["no output"]
            _unavailable(f"no local SLURM: {lines[-1]}")
    yield Slurm()
    if started:
        _script("down", 120)


@pytest.fixture
def slurm(slurm_session):
    """The local SLURM; the test's leftover jobs are cancelled after it."""
    slurm_session.cancel_all()
    yield slurm_session
    slurm_session.cancel_all()
