"""Ctrl-C during a long command: say what was saved and the exact command that resumes."""

from __future__ import annotations

import shlex
import sys
from typing import NoReturn

import typer

INTERRUPTED_EXIT = 130
"""Exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it."""
REPORTED = {"done": False}
"""Whether the command said what it saved (else `main` says it, in general terms)."""


def command_as_typed(add: str | None = None) -> str:
    """This command line as `sim ...`, with flag `add` appended when it is not there."""
    args = sys.argv[1:]
    if add is not None and add not in args:
        args = [*args, add]
    return shlex.join(["sim", *args])


def interrupted(saved: str, resume: str) -> NoReturn:
    """Print what was saved and how to resume; exit 130."""
    REPORTED["done"] = True
    typer.secho(f"interrupted: {saved}", err=True, fg=typer.colors.YELLOW)
    typer.echo(f"resume with: {resume}", err=True)
    raise typer.Exit(INTERRUPTED_EXIT)
