"""The `sim` command line: parse, build config, call a library function, write files.

Library code raises ValueError for bad input; `main()` turns it into one clean message
and exit code 2 instead of a traceback (and anything else into one line, `cli.errors`).
"""

from __future__ import annotations

import gc
import os
import signal
import sys


def _loading_interrupted(signum, frame) -> None:
    """Ctrl-C while the command line is still loading (typer, then the command's modules
    begin in `main`): nothing has run, so nothing was written; one line, no traceback."""
    sys.stderr.write("interrupted: the command was still loading; nothing was written\n")
    sys.stderr.flush()
    os._exit(130)


_loading_interrupted.chunksim_loading = True  # `errors.install_signal_handlers` replaces it
if (sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0] if sys.argv else "") == "sim") \
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    # this process is the `sim` command (`python -m chunksim.cli` imports this package with
    # argv[0] '-m'; the console script is named sim), not a program importing the CLI
    try:
        signal.signal(signal.SIGINT, _loading_interrupted)
    except ValueError:  # not the main thread
        pass

import typer  # noqa: E402 - after the Ctrl-C guard: importing typer takes a while

import chunksim  # noqa: E402
from chunksim.cli import help_format, lazy  # noqa: E402

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("chunksim.cli.run", "run"),
    "compare": ("chunksim.cli.compare", "compare"),
    "capacity": ("chunksim.cli.capacity", "capacity"),
    "sweep": ("chunksim.cli.sweep", "sweep"),
    "validate": ("chunksim.cli.validate", "validate"),
    "calibrate": ("chunksim.cli.calibrate", "calibrate"),
    "workload": ("chunksim.cli.workload", "workload_app"),
    "profile": ("chunksim.cli.profile", "profile_app"),
}
"""Each command, in the order `sim --help` lists it: (module, attribute), where the
attribute is a command function or a `typer.Typer` group. A command's module (and what it
imports: numpy, pandas, the simulator) loads only when that command runs or shows its
own help; `sim --help` reads each one's summary from its source (`lazy.summary`)."""

POOLED = frozenset({"compare", "capacity", "sweep"})
"""The commands that run their simulations on a local worker pool (`sweep.runner`) unless
told --workers 1 or --ray: `main` starts the pool's process server before loading them
(`sweep.pool`)."""

app = typer.Typer(
    name="sim",
    cls=lazy.group_class(COMMANDS),
    help="chunksim: which prefill scheduling policy and chunk size should I run?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sim {chunksim.__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version,
        help="Print the version and exit.")) -> None:
    """chunksim: which prefill scheduling policy and chunk size should I run?"""


def pools(args: list[str]) -> bool:
    """Whether the command line `args` (without the program name) runs a local worker
    pool: a `POOLED` command on a machine with more than one core that can start a
    forkserver, without --workers 1 or --ray. A guess from the words alone, good enough
    to start the pool's server early (a wrong guess costs one idle process, never a
    result)."""
    import os

    if not args or args[0] not in POOLED or (os.cpu_count() or 1) < 2:
        return False
    import multiprocessing  # (a tenth of `sim run`'s start-up: only for pooled commands)

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False  # (the pool says so itself when it starts)
    for i, a in enumerate(args):
        if a == "--ray" or a.startswith("--ray="):
            return False
        value = a.removeprefix("--workers=") if a.startswith("--workers=") else (
            args[i + 1] if a == "--workers" and i + 1 < len(args) else None)
        if value is not None and value.strip() == "1":
            return False
    return True


def main() -> None:
    """Console-script entry point: run the app; every failure ends in one line (`errors`)."""
    from chunksim.cli import errors

    errors.install_signal_handlers()
    args = sys.argv[1:] = help_format.take_help_all(sys.argv[1:])
    try:
        if help_format.asks_help(args):
            help_format.fold_option_names()  # rich's help code, imported only to show help
        else:
            help_format.skip()  # options need no help text
            if pools(args):
                from chunksim.sweep import pool

                pool.start()  # its import of the simulator runs beside this one's
        # no garbage collection while the command's modules load (they allocate much and
        # free little): `lazy.load` freezes what they left and turns it back on once the
        # command is built, before it runs
        gc.disable()
        app()
    except KeyboardInterrupt:  # Ctrl-C outside a command's own handler
        errors.interrupted_exit()
    except SystemExit as exc:  # typer turns Ctrl-C into a silent exit 130: say what holds
        # (or a Ctrl-C came and some code swallowed it: the command did not stop for it,
        # but the exit says it was interrupted)
        if exc.code == errors.INTERRUPTED_EXIT or (exc.code in (0, None)
                                                   and errors.sigint_seen()):
            errors.interrupted_exit()
        raise
    except Exception as exc:  # noqa: BLE001 - the last line of defence, one line each
        if errors.sigint_seen():  # Ctrl-C surfacing as some other error mid-draw
            errors.interrupted_exit()
        line, code = errors.describe(exc)
        typer.secho(f"error: {line}", err=True, fg=typer.colors.RED)
        sys.exit(code)
    finally:
        errors.forget_interrupt_mark()
        # The process ends here. Every object moves out of the cycle collector's reach, so
        # the interpreter's shutdown does not walk the whole heap again (a tenth of a
        # short run's wall time) for memory that the process's exit frees anyway. Files
        # are closed where they are written; atexit handlers still run.
        gc.freeze()


if __name__ == "__main__":
    main()
