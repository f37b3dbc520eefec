"""Helpers shared by the scripts that run an author's public code beside ofl
(``compare_coboosting_public.py``, ``compare_intactofl_public.py``): export the code from a
local git copy with text replacements, run it as a logged subprocess, print two sides' test
curves. Nothing of the public code is committed: it is exported into a folder outside the
repository."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch


def export_public_code(mirror: str, commit: str, code: Path,
                       stand_ins: dict[str, list[tuple[str, str]]], subdir: str = ""
                       ) -> list[str]:
    """``git archive`` of ``commit`` (only ``subdir`` when given) from the bare git copy
    ``mirror`` into the new folder ``code``, then the text replacements of ``stand_ins`` per
    file name (``"*"`` = every .py file; a named file's replacements must each match once).
    Returns the changed files, relative to ``code``."""
    if code.exists():
        sys.exit(f"{code} exists; remove it to set up afresh")
    code.mkdir(parents=True)
    tree = f"{commit}:{subdir}" if subdir else commit
    archive = subprocess.run(["git", "--git-dir", mirror, "archive", tree],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    changed = []
    for f in sorted(code.rglob("*.py")):
        text = orig = f.read_text()
        for old, new in stand_ins["*"]:
            text = text.replace(old, new)
        for old, new in stand_ins.get(f.name, []):
            if text.count(old) != 1:
                sys.exit(f"{f.name}: {old!r} found {text.count(old)} times, not once; "
                         f"is {commit} the commit this script was written against?")
            text = text.replace(old, new)
        if text != orig:
            f.write_text(text)
            changed.append(str(f.relative_to(code)))
    return changed


def run_logged(cmd: list[str], threads: int, log: Path) -> float:
    """Run ``cmd`` with ``threads`` OpenMP threads and no PYTHONPATH, its output to ``log``;
    stop this script if it fails. Returns the wall seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": ""}
    t0 = time.perf_counter()
    with log.open("w") as fh:
        r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    if r.returncode:
        sys.exit(f"public code failed ({r.returncode}); see {log}")
    return time.perf_counter() - t0


def common_parser(doc: str, mirror_help: str, commit: str, every: int,
                  extra: Sequence[str] = ()
                  ) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The subcommands ``setup`` (``--mirror``, ``--commit``, ``--public-dir``), ``clients``,
    ``run`` and those named in ``extra`` (``--public-dir``, ``--out``, ``--threads``) and
    ``table`` (``--out``, ``--every``); returns the parser and the subcommands' parsers by
    name, for the script's own options."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--mirror", required=True, help=mirror_help)
    s.add_argument("--commit", default=commit)
    s.add_argument("--public-dir", required=True)
    parsers = {"setup": s}
    for name in ("clients", "run", *extra):
        p = parsers[name] = sub.add_parser(name)
        p.add_argument("--public-dir", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--threads", type=int, default=1)
    t = parsers["table"] = sub.add_parser("table")
    t.add_argument("--out", required=True)
    t.add_argument("--every", type=int, default=every)
    return ap, parsers


def subcommands(doc: str, names: Sequence[str], out: Path
                ) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """A parser with one subcommand per name, each with ``--out`` (default ``out``); returns
    the parser and the subcommands' parsers by name, for the script's own options."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    parsers = {name: sub.add_parser(name) for name in names}
    for p in parsers.values():
        p.add_argument("--out", type=Path, default=out)
    return ap, parsers


def run_sides(args: argparse.Namespace, one: Callable[[str, int], dict],
              line: Callable[[dict], str]) -> None:
    """``one(side, seed)`` for every seed and side of ``args`` not yet written, each written
    to ``OUT/<side>_s<seed>.json`` and summed up by ``line(row)``."""
    out = Path(args.out).resolve()
    for seed in args.seeds:
        for side in args.sides:
            f = out / f"{side}_s{seed}.json"
            if f.exists():
                print(f"{f.name}: done")
                continue
            torch.set_num_threads(args.threads)
            row = one(side, seed)
            row.update(side=side, seed=seed, epochs=args.epochs)
            f.write_text(json.dumps(row, indent=1))
            print(f"{side} seed {seed}: {line(row)}")


def load_runs(out: Path, order: Sequence[str]
              ) -> tuple[dict[tuple[str, int], dict], list[int], list[str]]:
    """The runs written as ``OUT/<side>_s<seed>.json``: keyed by (side, seed), the seeds, and
    the sides of ``order`` that have a run."""
    rows = [json.loads(f.read_text()) for f in sorted(out.glob("*_s*.json"))]
    if not rows:
        sys.exit(f"no runs in {out}")
    by = {(r["side"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    sides = [s for s in order if any(k[0] == s for k in by)]
    return by, seeds, sides


def print_curves(by: dict[tuple[str, int], dict], seeds: list[int], sides: list[str],
                 every: int) -> None:
    """Each (side, seed)'s ``curve`` every ``every`` epochs and at the last, then per side
    the last epoch (and its mean over seeds), the best, and ``seconds`` per epoch."""
    n = max(len(r["curve"]) for r in by.values())
    marks = sorted({*range(every - 1, n, every), n - 1})
    head = "epoch  " + "  ".join(f"{s:>6s} s{seed}" for seed in seeds for s in sides)
    print(head)
    for e in marks:
        cells = [f"{by[s, seed]['curve'][e]:9.2f}" if (s, seed) in by
                 and e < len(by[s, seed]["curve"]) else f"{'—':>9s}"
                 for seed in seeds for s in sides]
        print(f"{e + 1:5d}  " + "  ".join(cells))
    for s in sides:
        got = [by[s, seed] for seed in seeds if (s, seed) in by]
        last = [r["curve"][-1] for r in got]
        sec = [r["seconds"] / max(len(r["curve"]), 1) for r in got]
        sd = f" ± {statistics.stdev(last):.2f}" if len(last) > 1 else ""
        best = " / ".join(f"{max(r['curve']):.2f}" for r in got)
        print(f"{s:6s}: last {' / '.join(f'{v:.2f}' for v in last)} (mean "
              f"{statistics.mean(last):.2f}{sd}), best {best}, "
              f"{statistics.mean(sec):.1f} s per epoch")


__all__ = ["common_parser", "export_public_code", "load_runs", "print_curves", "run_logged",
           "run_sides"]
