"""Generated blocks of the README: the text between a start marker's line and an end marker is
rewritten from the code (the method taxonomy, the shipped records' verdicts), and a test checks
that the README holds the current text."""

from __future__ import annotations

from pathlib import Path


def replace_block(path: str | Path, start: str, end: str, body: str, what: str) -> bool:
    """Put ``body`` between the line that holds ``start`` and the ``end`` marker of the file at
    ``path`` (``what`` names the block in the error); True when the file changed."""
    path = Path(path)
    text = path.read_text()
    i = text.find(start)
    j = text.find(end, i) if i >= 0 else -1
    if i < 0 or j < 0:
        raise ValueError(f"{path} has no '{start} ... {end}' block for {what}")
    head = text.index("\n", i) + 1  # keep the start marker's line
    new = text[:head] + body + "\n" + text[j:]
    if new != text:
        path.write_text(new)
    return new != text


__all__ = ["replace_block"]
