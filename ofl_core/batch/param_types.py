"""Notebook parameter types: the annotations of a notebook's ``parameters`` cell
(``local_epochs: int = 10``, ``data_root: Optional[str] = None``), as papermill reads them, and
the check of a grid's values against them before anything runs."""

from __future__ import annotations

import ast
import types
import typing
from typing import Any, Optional, Union

_NAMES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict,
          "None": None, "Optional": Optional, "Union": Union, "Any": Any}


def parse_annotation(text: str) -> Any:
    """An annotation string of a parameters cell as a type (``Any`` when there is none)."""
    if not text or text == "None":  # papermill's "no annotation"
        return Any
    try:
        return eval(text, {"__builtins__": {}}, dict(_NAMES))  # noqa: S307 - names above only
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"unsupported parameter annotation {text!r} ({e})") from None


def matches(value: object, hint: Any) -> bool:
    """Whether a JSON/YAML value has the annotated type (an int is a float, a bool is not an
    int)."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if origin is list or hint is list:
        return isinstance(value, list) and all(matches(v, args[0]) for v in value if args)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def type_name(hint: Any) -> str:
    """``int``, ``list[float]``, ``int or None`` — a type as a reader writes it."""
    if hint is Any:
        return "any value"
    if hint is None or hint is type(None):
        return "null"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is list:
        return f"a list of {type_name(args[0])}" if args else "a list"
    return getattr(hint, "__name__", str(hint))


def check_value(notebook: str, name: str, value: object, annotation: str) -> None:
    """Raise ``ValueError`` naming the notebook, parameter and expected type when ``value``
    does not have the parameter's annotated type."""
    hint = parse_annotation(annotation)
    if not matches(value, hint):
        raise ValueError(f"{notebook}: parameter {name!r} must be {type_name(hint)}, got "
                         f"{value!r} ({type(value).__name__})")


def literal_default(text: str) -> object:
    """A parameters cell's default value (papermill gives it as source text)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
