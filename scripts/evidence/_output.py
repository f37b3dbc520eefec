"""Output shared by the evidence scripts that measure one JSON line per run."""

from __future__ import annotations

import json


def emit(record: dict, out: str | None) -> None:
    """Print ``record`` as one JSON line and, when ``out`` is given, append it there."""
    line = json.dumps(record)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")
