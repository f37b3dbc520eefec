"""The column benchmark's ideal packing of measured compute (benchmarks/bench_column.py)."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_column.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_column", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(run_id: str, seconds: float, servers: dict) -> dict:
    return {"run_id": run_id, "methods": [run_id], "seconds": seconds, "servers_s": servers}


def test_pack_runs_the_clients_first_then_the_longest_server_on_the_first_free_core() -> None:
    bench = _bench()
    rows = [_row("clients", 10.0, {"fedavg/paper": 0.2}),
            _row("short", 1.0, {"feddf/paper": 3.0}),       # its last part only: 1 s
            _row("long", 1.0, {"dense/paper": 2.0, "dense/authors_code": 3.0}),
            _row("mid", 4.0, {"fed-adi/paper": 4.0})]
    placed = {r["run_id"]: r for r in bench.pack(rows, cores=2)}
    assert (placed["clients"]["start"], placed["clients"]["end"]) == (0.0, 10.0)
    # the servers' own time (kept across resumed parts), not the sidecar's last part
    assert placed["long"]["compute_s"] == 5.0 and placed["short"]["compute_s"] == 3.0
    assert (placed["long"]["start"], placed["long"]["end"]) == (10.0, 15.0)
    assert (placed["mid"]["start"], placed["mid"]["end"]) == (10.0, 14.0)
    assert (placed["short"]["start"], placed["short"]["end"]) == (14.0, 17.0)
    assert max(r["end"] for r in placed.values()) == 17.0
