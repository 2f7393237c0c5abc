"""Flags shared by `sim compare`, `sim capacity` and `sim sweep`, declared once.

The grid commands take lists (`--policies`, `--chunks`) instead of `sim run`'s single
`--policy/--variant/--chunk`, and every other option `sim run` has (`cli.options`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from chunksim.sweep.configs import DEFAULT_CHUNKS, DEFAULT_POLICIES

_G = "Grid"

PoliciesOpt = Annotated[str, typer.Option(
    "--policies", rich_help_panel=_G, help=(
        "Comma list of policies (whole, chunk, budget, sjf), each optionally :VARIANT "
        "(whole:mixed, chunk:two-pass, chunk:alternate)."))]
ChunksOpt = Annotated[str, typer.Option(
    "--chunks", rich_help_panel=_G, help=(
        "Comma list of chunk sizes (chunk: tokens per request per step; budget: tokens per "
        "step). `whole` runs once."))]
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", min=1, rich_help_panel=_G, help=(
        "Local worker processes (default: os.cpu_count()); 1 runs inline."))]
RayOpt = Annotated[str | None, typer.Option(
    "--ray", metavar="ADDRESS", rich_help_panel=_G, help=(
        "Run on Ray (pip install 'chunksim\\[ray]'): 'auto' = a running cluster, 'local' = "
        "start one here, or ray://HOST:PORT."))]

__all__ = ["ChunksOpt", "DEFAULT_CHUNKS", "DEFAULT_POLICIES", "PoliciesOpt", "RayOpt",
           "WorkersOpt", "command_line"]


def command_line() -> str | None:
    """The command as typed, for a report's 'Reproduce' section (None when not run from
    the `sim` entry point, e.g. under a test runner)."""
    if Path(sys.argv[0]).name != "sim":
        return None
    return "sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
