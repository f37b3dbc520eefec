"""What is compared with what: for every server method of the registry, whether it needs real
data on the server, how many communication rounds and server stages it has, what a client
uploads and what the server needs besides the uploads. Each row is the method's own
declaration (:class:`~ofl_core.server.MethodKind` in its ``SPEC``); rendered in the README and
the report by :func:`taxonomy_markdown` / :func:`taxonomy_frame`."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from .readme import replace_block
from .registry import METHODS


def taxonomy_rows() -> list[dict]:
    """One row per registered method with a taxonomy row, in the registry's order."""
    return [{"method": s.name, **asdict(s.kind), "heterogeneous": not s.homogeneous}
            for s in METHODS.values() if s.kind is not None]


def taxonomy_frame() -> pd.DataFrame:
    """The taxonomy as a table, one row per method."""
    return pd.DataFrame(taxonomy_rows()).set_index("method")


def taxonomy_markdown() -> str:
    """The taxonomy as a Markdown table (the README's)."""
    head = ("| method | source | data-free | rounds | server stages | client uploads | "
            "server needs | output | mixed archs |")
    lines = [head, "|" + "---|" * 9]
    for k in taxonomy_rows():
        lines.append(f"| `{k['method']}` | {k['source']} | {'yes' if k['data_free'] else 'no'} | "
                     f"{k['rounds']} | {k['stages']} | {k['upload']} | {k['server_needs']} | "
                     f"{k['output']} | {'yes' if k['heterogeneous'] else 'no'} |")
    return "\n".join(lines)


START, END = "<!-- taxonomy:start", "<!-- taxonomy:end -->"


def write_readme(path: str | Path) -> bool:
    """Put the current table between the README's taxonomy markers; True when it changed."""
    return replace_block(path, START, END, taxonomy_markdown(), "the taxonomy table")


def main(argv: list[str] | None = None) -> None:
    """``python -m ofl_core.taxonomy [README]``: rewrite the README's taxonomy table."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("readme", nargs="?", default="README.md")
    changed = write_readme(ap.parse_args(argv).readme)
    print("taxonomy table updated" if changed else "taxonomy table already current")


__all__ = ["taxonomy_frame", "taxonomy_markdown", "taxonomy_rows", "write_readme"]


if __name__ == "__main__":
    main()
