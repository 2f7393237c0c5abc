"""What a command says on stderr besides its answer."""

from __future__ import annotations

import typer


def warn(message: str) -> None:
    """One warning line on stderr, in yellow."""
    typer.secho(f"warning: {message}", err=True, fg=typer.colors.YELLOW)


def say(line: str) -> None:
    """One line of progress on stderr."""
    typer.echo(line, err=True)
