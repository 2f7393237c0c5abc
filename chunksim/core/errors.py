"""The project's own error for bad input: a file or a flag the user gave that cannot be
used. Its message names the file (and row, column) or the flag, and the fix; the CLI
prints it as one line. A ValueError, so code that catches ValueError keeps working."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class InputError(ValueError):
    """Bad input from a file or flag; the message says which and how to fix it."""


@contextmanager
def reading(path: str | Path, what: str = "file") -> Iterator[None]:
    """Turn whatever reading `path` raises into an InputError naming the file: a
    ValueError keeps its message (prefixed with `what` and the path unless it names the
    file already); undecodable bytes, OS errors and the errors malformed content provokes
    in parsers (TypeError, KeyError, IndexError, OverflowError) get a message saying so."""
    try:
        yield
    except InputError:
        raise
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path} is not UTF-8 text (byte {exc.start}: "
                         f"{exc.object[exc.start:exc.start + 1]!r}); is it a binary "
                         "file?") from None
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, OSError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, OSError):
            msg = f"cannot read it: {exc.strerror or msg}"
        elif not isinstance(exc, ValueError):
            msg = f"malformed content ({type(exc).__name__}: {msg})"
        if str(path) not in msg and Path(path).name not in msg:
            msg = f"{what} {path}: {msg}"
        raise InputError(msg) from None
