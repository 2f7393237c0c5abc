"""The `sim` command line: parse, build config, call a library function, write files.

Library code raises ValueError for bad input; `main()` turns it into one clean message
and exit code 2 instead of a traceback.
"""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="sim",
    help="chunksim: which prefill scheduling policy and chunk size should I run?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
workload_app = typer.Typer(help="Inspect workloads and traces.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")

# --- command registration (each module keeps heavy imports inside its functions) ---
# BEGIN REGISTRATIONS
from chunksim.cli.profile import profile as _profile  # noqa: E402
from chunksim.cli.profile import profile_import as _profile_import  # noqa: E402

profile_app = typer.Typer(help="Measure a latency profile (or import one).",
                          add_completion=False, pretty_exceptions_enable=False)
profile_app.callback(invoke_without_command=True)(_profile)
profile_app.command("import")(_profile_import)
app.add_typer(profile_app, name="profile")
from chunksim.cli.run import run as _run  # noqa: E402

app.command("run")(_run)
from chunksim.cli.workload import describe as _workload_describe  # noqa: E402

workload_app.command("describe")(_workload_describe)
from chunksim.cli.compare import compare as _compare  # noqa: E402

app.command("compare")(_compare)
from chunksim.cli.capacity import capacity as _capacity  # noqa: E402

app.command("capacity")(_capacity)
from chunksim.cli.sweep import sweep as _sweep  # noqa: E402

app.command("sweep")(_sweep)
from chunksim.cli.validate import validate as _validate  # noqa: E402

app.command("validate")(_validate)
# END REGISTRATIONS


def main() -> None:
    """Console-script entry point: run the app, turning ValueError into a clean message."""
    try:
        app()
    except ValueError as exc:  # bad input from a file or flag: say what and how to fix
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(2)


if __name__ == "__main__":
    main()
