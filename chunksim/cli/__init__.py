"""The `sim` command line: parse, build config, call a library function, write files.

Library code raises ValueError for bad input; `main()` turns it into one clean message
and exit code 2 instead of a traceback (and anything else into one line, `cli.errors`).
"""

from __future__ import annotations

import sys

import typer

import chunksim
from chunksim.cli import help_format

app = typer.Typer(
    name="sim",
    help="chunksim: which prefill scheduling policy and chunk size should I run?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
workload_app = typer.Typer(help="Inspect workloads and traces.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sim {chunksim.__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version,
        help="Print the version and exit.")) -> None:
    """chunksim: which prefill scheduling policy and chunk size should I run?"""


def _command(target: typer.Typer, name: str, fn) -> None:
    """Register `fn` as `name`, its docstring reflowed into paragraphs (`help_format`)."""
    target.command(name, help=help_format.reflow(fn.__doc__))(fn)

# --- command registration (each module keeps heavy imports inside its functions) ---
# BEGIN REGISTRATIONS
from chunksim.cli.profile import profile as _profile  # noqa: E402
from chunksim.cli.profile import profile_import as _profile_import  # noqa: E402

profile_app = typer.Typer(help="Measure a latency profile (or import one).",
                          add_completion=False, pretty_exceptions_enable=False)
profile_app.callback(invoke_without_command=True,
                     help=help_format.reflow(_profile.__doc__))(_profile)
_command(profile_app, "import", _profile_import)
app.add_typer(profile_app, name="profile")
from chunksim.cli.run import run as _run  # noqa: E402

_command(app, "run", _run)
from chunksim.cli.workload import describe as _workload_describe  # noqa: E402

_command(workload_app, "describe", _workload_describe)
from chunksim.cli.compare import compare as _compare  # noqa: E402

_command(app, "compare", _compare)
from chunksim.cli.capacity import capacity as _capacity  # noqa: E402

_command(app, "capacity", _capacity)
from chunksim.cli.sweep import sweep as _sweep  # noqa: E402

_command(app, "sweep", _sweep)
from chunksim.cli.validate import validate as _validate  # noqa: E402

_command(app, "validate", _validate)
from chunksim.cli.calibrate import calibrate as _calibrate  # noqa: E402

_command(app, "calibrate", _calibrate)
# END REGISTRATIONS


def main() -> None:
    """Console-script entry point: run the app; every failure ends in one line (`errors`)."""
    from chunksim.cli import errors

    errors.install_signal_handlers()
    args = sys.argv[1:]
    if "--help" in args or not args or args == ["workload"]:
        help_format.fold_option_names()  # rich's help code, imported only to show help
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C outside a command's own handler
        errors.interrupted_exit()
    except SystemExit as exc:  # typer turns Ctrl-C into a silent exit 130: say what holds
        if exc.code == errors.INTERRUPTED_EXIT:
            errors.interrupted_exit()
        raise
    except Exception as exc:  # noqa: BLE001 - the last line of defence, one line each
        if errors.sigint_seen():  # Ctrl-C surfacing as some other error mid-draw
            errors.interrupted_exit()
        line, code = errors.describe(exc)
        typer.secho(f"error: {line}", err=True, fg=typer.colors.RED)
        sys.exit(code)


if __name__ == "__main__":
    main()
