"""The client cache's lock: concurrent processes train a shared client once; re-entrant in
one thread (through any cache on the same root); other threads wait; no file locks: a warning."""

from __future__ import annotations

import errno
import subprocess
import sys
import threading
import time

import pytest
import torch

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


def test_upload_cache_lock_is_reentrant_across_instances_and_excludes_other_threads(tmp_path):
    from ofl_core.upload_cache import UploadCache

    a, b = UploadCache(tmp_path / "c"), UploadCache(tmp_path / "c")
    events: list[str] = []
    entered = threading.Event()

    def other_thread() -> None:
        entered.set()
        with UploadCache(tmp_path / "c").lock({"client": 0}):
            events.append("other")

    with a.lock({"client": 0}), b.lock_many([{"client": 1}, {"client": 0}]):
        t = threading.Thread(target=other_thread)
        t.start()
        entered.wait(10)
        time.sleep(0.5)  # the other thread waits on the lock meanwhile
        events.append("holder")
    t.join(30)
    assert events == ["holder", "other"]


def test_upload_cache_lock_degrades_to_a_warning_without_file_locks(tmp_path, monkeypatch):
    import fcntl

    from ofl_core import upload_cache
    from ofl_core.upload_cache import UploadCache

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    monkeypatch.setattr(upload_cache, "_warned_no_lock", False)
    cache = UploadCache(tmp_path / "c")
    with pytest.warns(UserWarning, match="no file locks"), cache.lock({"client": 0}):
        cache.put({"client": 0}, {"w": torch.ones(1)})
    assert cache.get({"client": 0})["w"].tolist() == [1.0]
