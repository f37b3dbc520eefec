"""YAML files of the batch runner (grids, executor configs, gap explanations), loaded within
bounds: a file is read only up to :data:`MAX_BYTES`, and its node graph is measured as it would
expand — every alias counted as a full copy of what it names — before any Python object is
built. A 491-byte file of nested aliases (a "billion laughs") otherwise expands to gigabytes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: the largest YAML file the batch runner reads
MAX_BYTES = 16 * 2**20
#: the most nodes (scalars, lists, mappings) a file may expand to, aliases expanded
MAX_NODES = 2_000_000


class YamlTooLarge(ValueError):
    """A YAML file beyond the bounds (its size, or what its aliases expand to)."""


class YamlRepeatedKey(ValueError):
    """A mapping that names one key twice: YAML keeps the last value, silently dropping the
    first (in a grid, a second ``main_tables:`` section drops the first one's tasks)."""


def _refuse_repeated_keys(node: Any) -> None:
    seen: dict[tuple[str, str], Any] = {}
    for k, _ in node.value:
        if getattr(k, "tag", "").endswith(":merge") or not isinstance(k.value, str):
            continue
        if (k.tag, k.value) in seen:  # 1 and "1" are two keys
            first = seen[k.tag, k.value].start_mark.line + 1
            raise YamlRepeatedKey(f"line {k.start_mark.line + 1}: key {k.value!r} appears twice "
                                  f"in one mapping (first on line {first}); YAML would keep "
                                  "only the last: merge the two")
        seen[k.tag, k.value] = k


def _expanded_size(root: Any) -> int:
    """Nodes ``root`` expands to, aliases counted in full: memoised per node, so a file of
    nested aliases is measured in time linear in its node graph; a cycle is refused."""
    import yaml

    sizes: dict[int, int] = {}
    busy: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            busy.discard(key)
            if isinstance(node, yaml.SequenceNode):
                kids = node.value
            elif isinstance(node, yaml.MappingNode):
                kids = [n for pair in node.value for n in pair]
            else:
                kids = []
            sizes[key] = min(1 + sum(sizes[id(k)] for k in kids), MAX_NODES + 1)
            continue
        if key in sizes:
            continue
        if key in busy:
            raise YamlTooLarge("an alias refers to a node that contains it (a recursive "
                               "structure)")
        busy.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            _refuse_repeated_keys(node)
        if isinstance(node, yaml.SequenceNode):
            stack.extend((k, False) for k in node.value if id(k) not in sizes)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((k, False) for pair in node.value for k in pair if id(k) not in sizes)
    return sizes[id(root)]


def load_yaml(path: str | os.PathLike) -> Any:
    """The YAML document of ``path`` (as ``yaml.safe_load``), refused with
    :class:`YamlTooLarge` when the file is larger than :data:`MAX_BYTES` or expands to more
    than :data:`MAX_NODES` nodes, and with :class:`YamlRepeatedKey` when a mapping names a key
    twice; syntax errors are ``yaml.YAMLError`` as before."""
    import yaml

    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise YamlTooLarge(f"{path}: {size} bytes, more than a grid or config file may have "
                           f"({MAX_BYTES} bytes)")
    loader = yaml.SafeLoader(path.read_text())
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            n = _expanded_size(node)
        except (YamlTooLarge, YamlRepeatedKey) as e:
            raise type(e)(f"{path}: {e}") from None
        if n > MAX_NODES:
            raise YamlTooLarge(f"{path}: expands to more than {MAX_NODES:,} values (through "
                               "its aliases: *name repeats &name's content); write the "
                               "values out, or split the file")
        return loader.construct_document(node)
    finally:
        loader.dispose()


__all__ = ["MAX_BYTES", "MAX_NODES", "YamlRepeatedKey", "YamlTooLarge", "load_yaml"]
