"""Ctrl-C during a long command: say what was saved and the exact command that resumes."""

from __future__ import annotations

import os
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


def interrupted_plainly(said: str) -> NoReturn:
    """Print what the stop left (no resume: nothing to resume from); exit 130."""
    REPORTED["done"] = True
    typer.secho(f"interrupted: {said}", err=True, fg=typer.colors.YELLOW)
    raise typer.Exit(INTERRUPTED_EXIT)


def written_since(out: str, start_s: float) -> list[str]:
    """The outputs at --out `out` (a file, or a directory's visible files) modified at or
    after `start_s` (epoch seconds): what this process wrote there. Staged (hidden)
    entries are not outputs: they are removed at exit."""
    try:
        if os.path.isfile(out):
            return [os.path.basename(out)] if os.stat(out).st_mtime >= start_s else []
        with os.scandir(out) as it:
            return sorted(e.name for e in it if not e.name.startswith(".") and e.is_file()
                          and e.stat().st_mtime >= start_s)
    except OSError:  # not there (yet): nothing was written
        return []
