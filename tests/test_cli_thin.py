"""Commands parse, call a library function and print: every command function in `cli/`
stays short, its flow below the command line (`reports.*_flow`, `sweep.grid_plan`,
`profiler.import_flow`, `profiler.measure_flow`), where it can be called and tested
without typer."""

from __future__ import annotations

import ast
import importlib
import inspect

from chunksim.cli import COMMANDS

MAX_BODY_LINES = 30
"""Lines of a command function's body, its docstring and signature aside."""


def _commands():
    """(name, function) of every command, the subcommands of a group included."""
    for name, (module, attr) in COMMANDS.items():
        obj = getattr(importlib.import_module(module), attr)
        if callable(obj) and inspect.isfunction(obj):
            yield name, obj
            continue
        for info in obj.registered_commands:
            yield f"{name} {info.name or info.callback.__name__}", info.callback
        if obj.registered_callback is not None and obj.registered_callback.callback:
            yield name, obj.registered_callback.callback


def body_lines(fn) -> int:
    """Lines from the first statement after the docstring to the last, of the function
    `fn` names (its module's own definition, under any decorator's wrapper)."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(fn)))
    node = next(n for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and n.name == fn.__name__)
    body = node.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def test_every_command_function_is_short():
    long = {name: n for name, fn in _commands()
            if (n := body_lines(fn)) > MAX_BODY_LINES}
    assert not long, f"move the flow below the command line: {long}"


def _planted():
    """A docstring does not count."""
    x = 0
    for i in range(MAX_BODY_LINES + 1):
        x += i
    return x


def test_the_measure_counts_the_body_only():
    assert body_lines(_planted) == 4  # three statements: the loop spans two lines
    names = {name for name, _ in _commands()}
    assert {"run", "compare", "capacity", "sweep", "validate", "profile",
            "profile import"} <= names
