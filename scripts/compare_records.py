"""Compare the records of two run_all.py output folders (``<out>/runs/<notebook>/*.json``).

Records are matched on their labels (experiment, paper, table, dataset, data source,
partition, α, m, seed, method, preset, setting); their numbers (last/best accuracy, ensemble,
best/mean client accuracy) must be equal to the bit. ``wall_time_s`` is ignored (it is a
measurement), and so is ``config_hash`` unless ``--hash`` is given. Prints, per notebook, how
many baseline records came out identical, moved (same labels, other numbers), went missing,
and how many records are new; exits 1 if any baseline record moved or went missing.

    python scripts/compare_records.py /tmp/before/out /tmp/after/out
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

LABELS = ("experiment", "paper", "table", "dataset", "data_source", "partition", "alpha",
          "num_clients", "seed", "method", "preset", "setting")
NUMBERS = ("last_acc", "best_acc", "ensemble_acc", "best_client_acc", "mean_client_acc")


def load(out: Path) -> dict[str, Counter]:
    """notebook → multiset of (labels, numbers) over its finished runs."""
    runs: dict[str, Counter] = {}
    for side in sorted(out.glob("runs/*/*.json")):
        recs = json.loads(side.read_text()).get("records", [])
        c = runs.setdefault(side.parent.name, Counter())
        for r in recs:
            c[tuple(r.get(k) for k in LABELS), tuple(r.get(k) for k in NUMBERS)] += 1
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--hash", action="store_true", help="also require equal config_hash")
    args = ap.parse_args(argv)
    if args.hash:
        global NUMBERS
        NUMBERS = (*NUMBERS, "config_hash")
    before, after = load(args.before), load(args.after)
    bad = 0
    skipped = sorted(set(before) - set(after))
    if skipped:
        print(f"not in {args.after} (not compared): {', '.join(skipped)}")
    for nb in sorted(after):
        b, a = before.get(nb, Counter()), after.get(nb, Counter())
        same = b & a
        rest_b, rest_a = b - same, a - same
        labels_a = Counter(k for k, _ in rest_a.elements())
        moved = sum(1 for k, _ in rest_b.elements() if labels_a[k] > 0)
        missing = sum(rest_b.values()) - moved
        new = sum(rest_a.values()) - moved
        bad += moved + missing
        print(f"{nb:24s} before {sum(b.values()):3d}  identical {sum(same.values()):3d}  "
              f"moved {moved:2d}  missing {missing:2d}  new {new:3d}")
        for (labels, nums), n in rest_b.items():
            print(f"    before only: {dict(zip(LABELS, labels, strict=True))} "
                  f"{dict(zip(NUMBERS, nums, strict=True))}" + (f" ×{n}" if n > 1 else ""))
    print("all baseline records identical" if bad == 0 else f"{bad} baseline records differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
