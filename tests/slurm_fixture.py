"""The ``slurm`` fixture: a single-node SLURM on localhost (``scripts/slurm_localhost.sh``).

Session scope, shared by the test sessions of one machine (the pytest-xdist workers, which
run these tests side by side, and any other pytest): each holds a shared ``flock`` on
``$TMPDIR/ofl-slurm-tests.lock`` while it uses SLURM. The first brings it up — under an
exclusive lock, so two workers never run ``up`` at once — where SLURM is installed and this
user is root (or has passwordless sudo), and leaves a marker; the last to leave stops it if
the marker says a test session started it (a SLURM that was up before is left running).
Elsewhere the tests that use it are skipped with the reason (``OFL_REQUIRE_SLURM=1``: they
fail instead, as in CI where ``.ci/run`` installed SLURM). The fixture never installs
packages; ``.ci/run`` or the script does. After each test its leftover jobs — those whose log
is under this session's temporary folder, so a concurrent session's jobs are left alone — are
cancelled.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_localhost.sh"


@dataclass(frozen=True)
class Slurm:
    """The local SLURM, seen from one test session: the jobs whose log is under ``mine``."""

    mine: str
    partition: str = "debug"

    def queue(self) -> list[tuple[str, str]]:
        """``(job id, state)`` of this session's jobs SLURM still lists (array elements one by
        one)."""
        p = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-O",
                            "JobArrayID:40,State:20,StdOut:1000"],
                           capture_output=True, text=True, timeout=30)
        rows = [ln.split(None, 2) for ln in p.stdout.splitlines()]
        return [(r[0], r[1]) for r in rows if len(r) == 3 and r[2].startswith(self.mine)]

    def live(self) -> list[str]:
        """Ids of this session's jobs not over yet."""
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


#: held shared by every session that uses the local SLURM; the lock that one session at a time
#: holds to check and start it; the marker that a test session started it
USERS_LOCK = Path(tempfile.gettempdir()) / "ofl-slurm-tests.lock"
START_LOCK = Path(tempfile.gettempdir()) / "ofl-slurm-tests.start.lock"
STARTED = Path(tempfile.gettempdir()) / "ofl-slurm-tests.started"


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory):
    fcntl = pytest.importorskip("fcntl", reason="SLURM tests need a POSIX system")
    users = open(USERS_LOCK, "a")
    try:
        fcntl.flock(users, fcntl.LOCK_SH)  # held until this session ends (or dies)
        with open(START_LOCK, "a") as start:
            fcntl.flock(start, fcntl.LOCK_EX)  # one session brings it up, the others wait
            if _script("status", 30).returncode != 0:
                p = _script("up", 300)
                if p.returncode != 0:
                    lines = (p.stderr or p.stdout).strip().splitlines() or ["no output"]
                    _unavailable(f"no local SLURM: {lines[-1]}")
                STARTED.touch()
        yield Slurm(mine=os.path.join(tmp_path_factory.getbasetemp().resolve(), ""))
        try:  # the last session using it stops it, if a test session started it
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            if STARTED.exists():
                _script("down", 120)
                STARTED.unlink(missing_ok=True)
    finally:
        users.close()


@pytest.fixture
def slurm(slurm_session):
    """The local SLURM; the test's leftover jobs are cancelled after it."""
    slurm_session.cancel_all()
    yield slurm_session
    slurm_session.cancel_all()
