"""A knob is declared once: a frozen-dataclass field with a docstring and, in its metadata,
how it is spelled on the command line. The CLI layer derives every option from this (help
from the docstring, names and panel from the metadata); nothing here imports typer.

    @dataclass(frozen=True)
    class EngineConfig:
        jitter: bool = knob(False, "--jitter/--no-jitter", panel="Engine and KV cache")
        \"\"\"Sample each step's time from the profile's measured spread.\"\"\"
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Flag:
    """How a field is spelled and parsed on the command line."""

    names: tuple[str, ...] = ()
    """Option spellings, first = canonical (default: `--field-name`); a boolean flag is
    written `--on/--off`."""
    panel: str | None = None
    """--help panel (default: the one the command gives the whole dataclass)."""
    min: float | None = None
    """Smallest value accepted."""
    min_open: bool = False
    """`min` itself is refused (the value must be > min)."""
    max: float | None = None
    """Largest value accepted."""
    hidden: bool = False
    """Left out of --help."""
    cli_type: Any = None
    """What the option parses when it differs from the field's type (e.g. `list[str]` for
    `CLASS=TOKENS` items, milliseconds for a seconds field); `parse` converts it."""
    parse: Callable[[Any], Any] | None = None
    """Option value -> field value (not called on None)."""


def knob(default: Any = None, *names: str, default_factory: Any = MISSING, **flag: Any):
    """A dataclass field that is also a CLI option (see `Flag` for the keywords)."""
    meta = {"flag": Flag(tuple(names), **flag)}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def flag_of(cls: type, name: str) -> Flag:
    """The field's Flag (a default one when the field declares none)."""
    for f in fields(cls):
        if f.name == name:
            return f.metadata.get("flag") or Flag()
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def flag_names(cls: type, name: str) -> tuple[str, ...]:
    """Every spelling of the field's option, the canonical one first (`--on/--off` pairs
    split in two)."""
    names = flag_of(cls, name).names or ("--" + name.replace("_", "-"),)
    return tuple(part for n in names for part in n.split("/") if part)


def flag_name(cls: type, name: str) -> str:
    """The field's canonical option name, e.g. `--max-num-seqs` (for messages)."""
    return flag_names(cls, name)[0]


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal after it in the class body), through the
    base classes; whitespace folded to single spaces."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not hasattr(klass, "__dataclass_fields__"):
            continue
        body = _class_body(klass)
        for node, nxt in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _class_body(klass: type) -> list:
    """The statements of `klass`'s body, from its module's syntax tree (parsed once per
    module: cheaper at start-up than `inspect.getsource`'s tokenizing per class)."""
    tree = _module_tree(klass.__module__)
    if tree is not None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == klass.__qualname__:
                return node.body
    try:
        src = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return []
    return ast.parse(src).body[0].body  # type: ignore[attr-defined]


@functools.cache
def _module_tree(module: str) -> ast.Module | None:
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not path or not path.endswith(".py"):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
