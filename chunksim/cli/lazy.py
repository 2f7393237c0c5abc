"""The top-level `sim` group, loading each command's module only when it is used.

A command module imports what its command needs (the simulator, numpy, pandas), which
costs far more than showing `sim --help`. So the group lists commands by name, and its
`--help` shows each one's summary read from its module's *source* (the docstring of the
function named after the command, which is also that command's own help); the module is
imported only to run the command or show the command's own help.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
from functools import cache
from pathlib import Path

import typer
from typer.core import TyperGroup

from chunksim.cli import help_format


def register(target: typer.Typer, name: str, fn) -> None:
    """Register `fn` as `name`, its docstring reflowed into paragraphs (`help_format`)."""
    target.command(name, help=help_format.reflow(fn.__doc__))(fn)


@cache
def summary(module: str, name: str) -> str:
    """The first paragraph of the help of command `name` (the docstring of the function
    `name` in `module`), read from the source without importing the module."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"command module {module} not found")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            doc = help_format.reflow(ast.get_docstring(node)) or ""
            return doc.split("\n\n")[0]
    raise RuntimeError(f"command module {module} has no function {name}() to document it")


def load(name: str, module: str, attr: str):
    """The click command (or group) `name`: its module imported, its typer object built.
    Where `cli.main` held the garbage collector off while the command's modules loaded
    (they allocate much and free little), it runs again from here, and what they left is
    frozen out of its reach (`gc.freeze`): modules, classes and the command, alive for
    the whole process, are never scanned again. A process that runs the app otherwise
    (a test's CliRunner) keeps its collector as it was."""
    obj = getattr(importlib.import_module(module), attr)
    if isinstance(obj, typer.Typer):
        cmd = typer.main.get_group(obj)
    else:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        register(single, name, obj)
        cmd = typer.main.get_command(single)
    cmd.name = name
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
    return cmd


def group_class(commands: dict[str, tuple[str, str]]) -> type[TyperGroup]:
    """A TyperGroup over `commands` (name -> (module, attribute)) that loads lazily."""

    class LazyGroup(TyperGroup):
        _listing = False

        def list_commands(self, ctx) -> list[str]:
            return list(commands)

        def get_command(self, ctx, cmd_name: str):
            if cmd_name not in commands:
                return None
            if cmd_name in self.commands:
                return self.commands[cmd_name]
            module, attr = commands[cmd_name]
            if self._listing:  # the group's own --help: a summary, not the command
                return typer.core.TyperCommand(cmd_name, help=summary(module, cmd_name))
            self.commands[cmd_name] = load(cmd_name, module, attr)
            return self.commands[cmd_name]

        def format_help(self, ctx, formatter) -> None:
            self._listing = True
            try:
                super().format_help(ctx, formatter)
            finally:
                self._listing = False

    return LazyGroup
