"""The client cache's lock: concurrent processes train a shared client once; re-entrant in
one thread."""

from __future__ import annotations

import subprocess
import sys

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
