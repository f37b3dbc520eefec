"""Content-addressed on-disk cache of trained client uploads.

Key = SHA-256 of a canonical JSON of everything that determines a trained client (dataset
content fingerprint, partition fingerprint, client id, local-training config, seed, initial
state). Files are written atomically (temp file + ``os.replace``), so a crash or Ctrl-C never
leaves a half-written entry under the final name, and read back with ``weights_only=True``. A
corrupt or unreadable entry is treated as missing (and retrained), never trusted.

The cache root is the ``root`` argument, else ``$OFL_CACHE_DIR``, else ``~/.cache/ofl/clients``
(platformdirs' user cache folder, ``ofl/clients``, on other systems).

Concurrent tasks (``run_all.py --jobs N``, Dask, SLURM arrays) share one cache: hold
:meth:`UploadCache.lock_many` (or :func:`cache_lock`) around "look up → train the missing →
put" and two tasks needing the same clients train them once; the second waits, then loads them.
The lock is a :class:`filelock.FileLock` (``flock`` on Unix, ``msvcrt`` locking on Windows) on
``<key>.lock`` beside the entry (released by the OS if the holder dies), taken in sorted key
order (no deadlock between tasks with overlapping clients), re-entrant within a thread. Where
the filesystem has no locks (Lustre mounted without ``-o flock``) the lock degrades to a no-op
with a warning: entries stay whole (atomic writes), a client may just be trained twice.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import inspect
import io
import json
import os
import pickle
import warnings
from collections.abc import Iterable, Iterator
from glob import escape as glob_escape
from pathlib import Path

import platformdirs
import torch
from filelock import FileLock

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    """``$OFL_CACHE_DIR``, else ``<user cache dir>/ofl/clients`` (``~/.cache/ofl/clients`` on
    Linux; platformdirs' cache folder elsewhere)."""
    env = os.environ.get("OFL_CACHE_DIR")
    return Path(env).expanduser() if env else platformdirs.user_cache_path("ofl") / "clients"


def payload_key(payload: dict) -> str:
    """SHA-256 of the canonical JSON of ``payload`` (plus the cache format version)."""
    blob = json.dumps({"format": CACHE_FORMAT, **payload}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def state_hash(state: dict[str, torch.Tensor]) -> str:
    """Hash of a state_dict's exact contents (used when a client starts from a given model)."""
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        t = state[k].detach().cpu().contiguous()
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def save_file(obj: object, path: Path) -> None:
    """``torch.save`` of ``obj`` to ``path``, serialised in memory first and then written, so
    that a full disk is Python's ``OSError`` ("No space left on device") rather than torch's
    "unexpected pos" from its zip writer."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    with open(path, "wb") as f:
        f.write(buf.getbuffer())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or not a pid we can judge: keep its file
    return True


def remove_stale_temps(folder: Path, stem: str) -> None:
    """Delete ``.<stem>.<pid>[.<thread>].tmp`` files whose writing process no longer runs (a
    write killed midway leaves one; nothing else would remove it). A file of a live process,
    or whose name gives no pid, is left alone. The pid is judged on this machine: a cache
    folder shared by several machines keeps this caveat (a foreign write's temp file may be
    removed, and that write then warns and is skipped)."""
    for tmp in Path(folder).glob(f".{glob_escape(stem)}.*.tmp"):
        parts = tmp.name[len(stem) + 2:].split(".")
        if not parts or not parts[0].isdigit() or int(parts[0]) == os.getpid():
            continue
        if not _pid_alive(int(parts[0])):
            with contextlib.suppress(OSError):
                tmp.unlink()


def check_cache_root(root: Path, source: str) -> None:
    """Refuse a cache root that is, or lies under, a file (``source`` names where it came
    from: ``cache_dir=...`` or ``$OFL_CACHE_DIR``)."""
    p = root
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        what = "is a file" if p == root else f"is under {p}, which is a file"
        raise ValueError(f"the client cache folder {root} (from {source}) {what}, not a "
                         "folder: point it at a folder (or unset it for the default "
                         f"{platformdirs.user_cache_path('ofl') / 'clients'})")


def unreadable(e: Exception, path: Path | None = None) -> str:
    """A short reason for a file ``torch.load(weights_only=True)`` cannot load: an empty file,
    a file holding Python objects other than tensors (refused: such a pickle can run code when
    loaded, so it is never loaded any other way), or the error's type and first sentence."""
    if path is not None and path.is_file() and path.stat().st_size == 0:
        return "unreadable (an empty file)"
    if isinstance(e, pickle.UnpicklingError) and "unsupported global" in str(e).lower():
        return ("refused (it holds Python objects other than tensors, which loading with "
                "weights_only=True blocks)")
    first = (str(e).strip().splitlines() or [""])[0].split(". ")[0][:120]
    return f"unreadable ({type(e).__name__}{': ' + first if first else ''})"


class UploadCache:
    """A folder of ``<key>.pt`` files, each a trained client's tensors (dict of tensors).

    A read-only cache works as long as it holds every entry a run needs: no lock is taken
    where the folder is not writable, and a client that must be trained is used but not
    cached (with a warning)."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        source = ("cache_dir" if root is not None else
                  "$OFL_CACHE_DIR" if os.environ.get("OFL_CACHE_DIR") else "the default")
        check_cache_root(self.root, source)
        self.hits = 0
        self.misses = 0

    def path(self, payload: dict) -> Path:
        return self.root / f"{payload_key(payload)}.pt"

    def get(self, payload: dict) -> dict[str, torch.Tensor] | None:
        """The cached tensors for ``payload``, or None when absent. An entry that cannot be
        read, is not a dict of tensors, or was written for another key (its stored metadata is
        not ``payload``'s) is corrupt: it is removed with a warning naming the file, and the
        client is trained again."""
        p = self.path(payload)
        if not p.is_file():
            self.misses += 1
            return None
        try:
            obj = torch.load(p, map_location="cpu", weights_only=True)
            problem = self._problem(obj, payload)
        except Exception as e:  # noqa: BLE001 - any unreadable file is a miss, not a crash
            problem = unreadable(e, p)
        if problem is not None:
            self.misses += 1
            self.discard(payload, problem)
            return None
        self.hits += 1
        return obj["state"]

    def discard(self, payload: dict, problem: str) -> None:
        """Warn that ``payload``'s entry is ``problem`` (naming the file) and remove it, where
        the cache is writable; the client is then trained again."""
        p = self.path(payload)
        try:
            p.unlink(missing_ok=True)
            done = "removed"
        except OSError as e:  # a read-only cache: leave it, train the client anyway
            done = f"not removed ({e.strerror or e})"
        warnings.warn(f"cache entry {p} is {problem}: {done}, the client is trained again",
                      stacklevel=3)

    @staticmethod
    def _problem(obj: object, payload: dict) -> str | None:
        if not isinstance(obj, dict) or not isinstance(obj.get("state"), dict):
            return "not a cache entry (no state dict)"
        if not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                   for k, v in obj["state"].items()):
            return "not a dict of tensors"
        if obj.get("meta") != json.dumps(payload, sort_keys=True, default=str):
            return "for another key (its metadata does not match)"
        return None

    def put(self, payload: dict, state: dict[str, torch.Tensor]) -> Path | None:
        """Write atomically; concurrent writers of the same key both end with a whole file. A
        write that fails (disk full, read-only cache) leaves no temporary file and no partial
        entry, warns, and returns None: the trained client is still returned to the caller,
        only not cached; what was stored before is untouched."""
        p = self.path(payload)
        tmp = p.with_name(f".{p.stem}.{os.getpid()}.tmp")
        meta = json.dumps(payload, sort_keys=True, default=str)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            remove_stale_temps(self.root, p.stem)
            save_file({"state": state, "meta": meta}, tmp)
            os.replace(tmp, p)
        except (OSError, RuntimeError) as e:  # torch.save wraps some OS errors
            tmp.unlink(missing_ok=True)
            warnings.warn(f"could not write cache entry {p} ({e}); the client is used but "
                          "not cached", stacklevel=2)
            return None
        return p

    def __len__(self) -> int:
        return len(list(self.root.glob("*.pt"))) if self.root.is_dir() else 0

    def lock_path(self, payload: dict) -> Path:
        return self.root / f"{payload_key(payload)}.lock"

    @contextlib.contextmanager
    def lock(self, payload: dict) -> Iterator[None]:
        """Hold the exclusive lock of one entry (see :meth:`lock_many`)."""
        with self.lock_many([payload]):
            yield

    @contextlib.contextmanager
    def lock_many(self, payloads: Iterable[dict]) -> Iterator[None]:
        """Hold the exclusive locks of these entries (sorted order; waits for other holders).

        Use it around "get → train what is missing → put" so that concurrent processes train a
        client once: the later one blocks here, then its ``get`` finds the entry.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError:  # cannot be created (read-only parent): nothing to lock, put() warns
            yield
            return
        paths = sorted({self.root / f"{payload_key(p)}.lock" for p in payloads})
        with contextlib.ExitStack() as stack:
            for p in paths:
                stack.enter_context(file_lock(p))
            yield


def cache_lock(
    cache: UploadCache | None, payloads: Iterable[dict],
) -> contextlib.AbstractContextManager:
    """``cache.lock_many(payloads)``, or a no-op when there is no cache."""
    return cache.lock_many(payloads) if cache is not None else contextlib.nullcontext()


#: errnos of a filesystem without working locks (Lustre without ``-o flock``, some NFS mounts)
_NO_LOCK_ERRNOS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
#: errnos of a folder where the lock file cannot be created (read-only cache): entries are read
#: without a lock (they are written whole, atomically); nothing is written there anyway
_READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
#: ``is_singleton`` (filelock ≥ 3.13): one lock object per path, so re-entry from the holding
#: thread through another :class:`UploadCache` counts up instead of deadlocking. Newer filelock
#: switches to a marker-file lock where ``flock`` answers ENOSYS; a crashed holder's marker would
#: then block every later task, so that switch is turned off: no lock, with a warning, instead.
_LOCK_KWARGS: dict = {"is_singleton": True}
if "fallback_to_soft" in inspect.signature(FileLock.__init__).parameters:
    _LOCK_KWARGS["fallback_to_soft"] = False
_warned_no_lock = False


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold ``path``'s exclusive lock (a cache entry's, or a server checkpoint's:
    :mod:`ofl_core.checkpoint`): one :class:`filelock.FileLock` per path and process
    (``is_singleton``: re-entrant in a thread through any :class:`UploadCache` on the same root;
    thread-local, so other threads of this process wait like other processes do). Where the
    filesystem has no locks, warn once and go on without it."""
    global _warned_no_lock
    lock = FileLock(path, **_LOCK_KWARGS)
    try:
        lock.acquire()
    except (OSError, NotImplementedError) as e:  # older filelock: NotImplementedError on ENOSYS
        if isinstance(e, OSError) and e.errno in _READ_ONLY_ERRNOS:
            yield
            return
        if isinstance(e, IsADirectoryError):
            raise OSError(e.errno, f"the lock {path} is a folder, not a file: remove it "
                                   f"(rm -r '{path}') and run again") from None
        if isinstance(e, OSError) and e.errno not in _NO_LOCK_ERRNOS:
            raise
        if not _warned_no_lock:
            _warned_no_lock = True
            warnings.warn(f"no file locks on {path.parent} ({e}); concurrent tasks may "
                          "repeat the same work (train a client, run a server) twice",
                          stacklevel=4)
        yield
        return
    try:
        yield
    finally:
        lock.release()
