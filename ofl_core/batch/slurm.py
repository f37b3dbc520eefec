"""What SLURM says about the batch jobs of a grid: their states, and why one ended, in words.

:class:`SlurmQueue` asks ``squeue`` (the controller's live view: pending, running and recently
ended jobs) and, for jobs ``squeue`` no longer lists, ``sacct`` where the cluster keeps
accounting. On a cluster without accounting (``AccountingStorageType=accounting_storage/none``,
common on small clusters) ``sacct`` fails; that is noted once and the states come from
``squeue`` alone, which keeps an ended job ``MinJobAge`` seconds (default 300) — far longer
than the executors' poll interval. A job that leaves the queue without a state anyone saw is
reported as such, never waited on forever.

:func:`describe` turns a final state into the text a failed task carries
(``slurm: job 12_3 CANCELLED (scancel or preemption)``); :class:`SchedulerJobError` is how an
executor hands it to the grid (:func:`ofl_core.batch.grid.run_grid`).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterable

#: states of a job that is not over yet (squeue / sacct long names)
ACTIVE = frozenset({
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED",
    "RESV_DEL_HOLD", "SPECIAL_EXIT",
})
#: why a job in this final state ended (what a failed task's error says)
REASONS = {
    "CANCELLED": "scancel or preemption",
    "TIMEOUT": "walltime: the job ran past its time limit; raise --walltime",
    "OUT_OF_MEMORY": "out of memory: raise --memory",
    "NODE_FAIL": "node failure",
    "PREEMPTED": "preemption",
    "BOOT_FAIL": "its node failed to boot",
    "DEADLINE": "its deadline passed",
    "FAILED": "the job script exited non-zero; see the job's log",
    "COMPLETED": "the job ended without returning the task's result",
}
#: a job squeue stopped listing while it was still queued or running, with no sacct to ask
GONE = "GONE"
#: a job no one ever saw in the queue (ended and forgotten before the first look)
UNKNOWN = "UNKNOWN"


class SchedulerJobError(RuntimeError):
    """A task lost to its batch job (cancelled, walltime, out of memory, node failure, ...).
    ``str(e)`` is the one-line reason; ``detail`` the job log's last lines, if any."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def describe(job_id: str, state: str) -> str:
    """``slurm: job 12_3 CANCELLED (scancel or preemption)``."""
    if state == GONE:
        return (f"slurm: job {job_id} left the queue without a result (no accounting to say "
                "why; cancelled while queued?)")
    if state == UNKNOWN:
        return f"slurm: job {job_id} is unknown to the scheduler (ended before it was seen)"
    return f"slurm: job {job_id} {state} ({REASONS.get(state, 'ended')})"


def expand_job_ids(text: str) -> list[str]:
    """``12``, ``12_3`` or a pending array range ``12_[4-6,9%2]`` → the element ids."""
    m = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", text)
    if not m:
        return [text]
    ids = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        ids += [f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return ids


def parse_rows(text: str) -> dict[str, str]:
    """``JobID|State`` lines (squeue ``-o %i|%T``, sacct ``--parsable2 -o JobID,State``) → state
    per job id; job steps (``12.batch``) skipped, ``CANCELLED by 0`` read as ``CANCELLED``."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        jid, sep, state = line.strip().partition("|")
        if not sep or not jid or "." in jid:
            continue
        word = (state.split() or ["UNKNOWN"])[0].upper()
        for j in expand_job_ids(jid):
            states[j] = word
    return states


class SlurmQueue:
    """Live states of a set of SLURM jobs (``12`` or array elements ``12_3``).

    :meth:`refresh` asks the scheduler once for all of them; :meth:`ended` then says, per job,
    whether it is over and in which state. ``grace_seconds``: how long a job no one has seen
    yet may stay unlisted before it counts as ended (sbatch lists a job at once; this only
    covers a job that ended and was forgotten before the first look).
    """

    def __init__(self, grace_seconds: float = 60.0, note=None) -> None:
        self.grace_seconds = grace_seconds
        self.states: dict[str, str] = {}
        self.use_sacct: bool | None = None  # None: not tried yet
        self._note = note or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._asked: dict[str, float] = {}
        self._listed: set[str] = set()
        self._answered = False

    def refresh(self, job_ids: Iterable[str]) -> None:
        """Ask ``squeue`` (then ``sacct`` for the ones it no longer lists) about ``job_ids``.
        A scheduler that does not answer leaves the known states as they were."""
        ids = sorted({str(j) for j in job_ids if j})
        if not ids:
            return
        now = time.monotonic()
        for j in ids:
            self._asked.setdefault(j, now)
        bases = sorted({j.split("_")[0] for j in ids})
        listed = self._squeue(bases)
        if listed is None:
            return
        missing = [j for j in ids if j not in listed and self.states.get(j) in ACTIVE | {None}]
        if missing and self.use_sacct is not False:
            listed.update({j: s for j, s in (self._sacct(missing) or {}).items()
                           if j in missing})
        self.states.update(listed)
        self._listed = set(listed)
        self._answered = True

    def state(self, job_id: str) -> str | None:
        """The last state seen for ``job_id`` (None: never seen)."""
        return self.states.get(str(job_id))

    def ended(self, job_id: str) -> str | None:
        """The final state of a job that is over, else None (queued, running, or not asked
        about yet). :data:`GONE`: it left ``squeue`` unseen to end; :data:`UNKNOWN`: never
        seen and past the grace period."""
        jid = str(job_id)
        if not self._answered or jid not in self._asked:
            return None
        state = self.states.get(jid)
        if jid in self._listed or (state is not None and state not in ACTIVE):
            return None if state in ACTIVE else state
        if state is not None:
            return GONE
        return UNKNOWN if time.monotonic() - self._asked[jid] > self.grace_seconds else None

    def _squeue(self, bases: list[str]) -> dict[str, str] | None:
        cmd = ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-j", ",".join(bases)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        if p.returncode != 0:
            # one job id that squeue has forgotten: "Invalid job id specified"
            return {} if "invalid job id" in p.stderr.lower() else None
        return parse_rows(p.stdout)

    def _sacct(self, ids: list[str]) -> dict[str, str] | None:
        cmd = ["sacct", "-X", "-n", "--parsable2", "-o", "JobID,State", "-j", ",".join(ids)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            ok = p.returncode == 0
            why = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        except (OSError, subprocess.SubprocessError) as e:
            ok, why = False, str(e)
        if not ok:
            if self.use_sacct is None:
                self._note(f"note: sacct is not usable here ({why}): job states come from "
                           "squeue (a job it no longer lists is reported as gone)")
            self.use_sacct = False
            return None
        self.use_sacct = True
        return parse_rows(p.stdout)


def log_tail(path, lines: int = 8) -> str:
    """The last ``lines`` non-empty lines of a job's log file ('' if none)."""
    try:
        with open(path, errors="replace") as f:
            rows = [ln.rstrip() for ln in f.read()[-20000:].splitlines() if ln.strip()]
    except OSError:
        return ""
    return "\n".join(rows[-lines:])
