"""How a failure reaches the user: always one line on stderr, and an exit status.

- Bad input (a ValueError raised by chunksim's own code: it names the file or flag and
  the fix) -> `error: ...`, exit 2.
- The file system refusing a write or read (any OSError: ENOSPC, EROFS, EACCES, ...) ->
  the path, the reason and, when the path is under --out, that flag; exit 2.
- An optional dependency not installed (torch, aiconfigurator-core, vLLM: `EXTRAS`) ->
  the command, the package and the extra that installs it; exit 2.
- Anything else, including a ValueError raised inside a library (matplotlib, numpy,
  pandas): that is a bug in chunksim, not the user's input. One line says so and names a
  log file holding the traceback; exit 1.
"""

from __future__ import annotations

import _thread
import os
import re
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from chunksim.cli.interrupts import INTERRUPTED_EXIT

__all__ = ["EXTRAS", "INTERRUPTED_EXIT", "describe", "forget_interrupt_mark",
           "install_signal_handlers", "interrupted_exit", "missing_extra", "os_error_line",
           "raised_by_chunksim", "sigint_seen"]
INPUT_EXIT = 2
"""Bad input, or a file system that refused: the line says what to change."""
BUG_EXIT = 1
"""chunksim's own bug: the line names the log file with the traceback."""
TERMINATED_EXIT = 128 + signal.SIGTERM
EXTRAS = {"torch": ("torch", "profile"),
          "aiconfigurator_core": ("aiconfigurator-core", "aic"),
          "vllm": ("vLLM", "vllm")}
"""Top-level module -> (the package's name, the chunksim extra that installs it)."""
_PACKAGE = Path(__file__).resolve().parents[1]
_SIGINT = {"seen": False}
STARTED = time.time()
"""When this process began its command (this module loads first thing in `main`): files
under --out modified since were written by it."""


def _on_sigint(signum, frame) -> None:
    _SIGINT["seen"] = True
    raise KeyboardInterrupt


def _on_sigterm(signum, frame) -> None:
    """SIGTERM unwinds like Ctrl-C does, so every `finally` runs and removes what the
    command staged (a run's streamed steps file) instead of leaving it behind."""
    raise SystemExit(TERMINATED_EXIT)


def _on_unraisable(args) -> None:
    """A Ctrl-C that lands in code whose errors Python only prints (a weakref callback,
    a `__del__`) would be lost, its traceback printed: deliver it again instead, to the
    code that runs next."""
    if (args.exc_type is not None and issubclass(args.exc_type, KeyboardInterrupt)
            and not sys.is_finalizing()):
        # from another thread: signalled from here, the handler would run in this hook
        _thread.start_new_thread(_thread.interrupt_main, ())
        return
    sys.__unraisablehook__(args)


def install_signal_handlers() -> None:
    """Ctrl-C raises KeyboardInterrupt as usual, remembering that it came (a library
    interrupted mid-call may turn it into another error); SIGTERM exits through the
    same clean-up."""
    current = signal.getsignal(signal.SIGINT)
    if current is signal.default_int_handler or getattr(current, "chunksim_loading", False):
        signal.signal(signal.SIGINT, _on_sigint)
        sys.unraisablehook = _on_unraisable
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


def forget_interrupt_mark() -> None:
    """Let the process end with the status the command chose after a Ctrl-C it handled.

    CPython marks a KeyboardInterrupt that ends code run by `exec` of a string as
    unhandled (dataclasses build their methods that way, so a Ctrl-C during an import can
    land there), however the program handles it later; run as `python -m chunksim.cli`,
    the interpreter then kills itself with SIGINT at exit instead of returning the status.
    Each such `exec` clears the mark first."""
    exec("")


def sigint_seen() -> bool:
    return _SIGINT["seen"]


def interrupted_exit() -> None:
    """Ctrl-C that no command handled: say what this process wrote under --out (each file
    whole: every output is written atomically), or that it wrote nothing; exit 130."""
    import typer

    from chunksim.cli.interrupts import REPORTED, written_since

    if not REPORTED["done"]:
        out = _out_flag_value()
        names = written_since(out, STARTED) if out is not None else []
        if names:
            shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
            line = (f"interrupted: wrote {len(names)} file{'s' if len(names) > 1 else ''} "
                    f"to {out} before the stop ({shown}), each whole; the rest were not "
                    "written")
        else:
            line = "interrupted: nothing was written" + (f" to {out}" if out else "")
        typer.secho(line, err=True, fg=typer.colors.YELLOW)
    sys.exit(INTERRUPTED_EXIT)


def one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text).strip()


def raised_by_chunksim(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is chunksim's own code (a
    ValueError raised there is a message written for the user); for an exception a
    worker process raised, the innermost frame of the worker's traceback; for one a SimPy
    process raised (SimPy raises a copy, caused by the original), the original's."""
    remote = exc.__cause__
    if type(remote).__name__ == "_RemoteTraceback":  # raised in a worker process: its text
        files = re.findall(r'File "([^"]+)"', str(remote))
        return bool(files) and _inside(files[-1])
    if (type(remote) is type(exc) and remote.args == exc.args
            and remote.__traceback__ is not None):
        return raised_by_chunksim(remote)
    tb = exc.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    return _inside(tb.tb_frame.f_code.co_filename)


def _inside(filename: str) -> bool:
    try:
        Path(filename).resolve().relative_to(_PACKAGE)
    except ValueError:
        return False
    return True


def _out_flag_value() -> str | None:
    args = sys.argv[1:]
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--out="):
            return a.split("=", 1)[1]
    return None


def os_error_line(exc: OSError) -> str:
    """`--out D: cannot write D/x: No space left on device (ENOSPC)`, or with the file
    alone when it is not under --out."""
    import errno

    code = errno.errorcode.get(exc.errno or 0, "")
    why = (exc.strerror or str(exc)) + (f" ({code})" if code else "")
    name = exc.filename
    out = _out_flag_value()
    if out is not None and name is not None:
        o = Path(out).absolute()
        f = Path(os.fsdecode(name)).absolute()
        if f == o or o in f.parents or (f.parent == o.parent and f.name.startswith(f".{o.name}.")):
            return f"--out {out}: cannot write {name}: {why}"
    return f"{name}: {why}" if name is not None else why


def save_traceback(exc: BaseException) -> Path | None:
    """The traceback of `exc` in a new log file under the temp directory (None if even
    that cannot be written)."""
    text = "".join(traceback.format_exception(exc))
    head = f"sim {' '.join(sys.argv[1:])}\n{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n\n"
    try:
        fd, name = tempfile.mkstemp(prefix="chunksim-bug-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(head + text)
        return Path(name)
    except OSError:
        return None


def missing_extra(exc: BaseException) -> str | None:
    """The line for an optional dependency that is not installed (`exc`, or an exception
    it was raised from or while handling, is a ModuleNotFoundError of an `EXTRAS`
    module), else None. A module missing inside an installed package is not matched."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name in EXTRAS:
            package, extra = EXTRAS[exc.name]
            words = [a for a in sys.argv[1:3] if not a.startswith("-")][:1]
            command = " ".join(["sim", *words])
            return (f"{command} needs {package}, an optional dependency that is not "
                    f"installed: pip install 'chunksim[{extra}]'")
        exc = exc.__cause__ or exc.__context__
    return None


def describe(exc: BaseException) -> tuple[str, int]:
    """(the one line after `error: `, the exit status) for an exception `main` caught."""
    if isinstance(exc, ValueError) and raised_by_chunksim(exc):
        return one_line(str(exc)), INPUT_EXIT
    extra = missing_extra(exc)
    if extra is not None:
        return extra, INPUT_EXIT
    if isinstance(exc, OSError):
        return one_line(os_error_line(exc)), INPUT_EXIT
    log = save_traceback(exc)
    where = f"traceback in {log}" if log else "traceback could not be saved"
    msg = one_line(f"{type(exc).__name__}: {exc}")
    if len(msg) > 200:
        msg = msg[:200] + " ..."
    return (f"internal error (a bug in chunksim, not in your input): {msg}; {where}; "
            "please report it with that file"), BUG_EXIT
