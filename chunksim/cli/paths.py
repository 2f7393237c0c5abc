"""Output paths checked before any work starts: a command that would fail to write its
results fails at once, with the flag and the fix, not after minutes of simulation."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def os_error_text(flag: str, target: Path | str, exc: OSError) -> str:
    """One line for an OSError met writing under `flag`: the flag, the path, the reason."""
    code = errno.errorcode.get(exc.errno or 0, "")
    why = exc.strerror or str(exc)
    return (f"{flag} {target}: cannot write there: {why}" + (f" ({code})" if code else "")
            + "; give a path in a directory you can write to")


def _probe(path: Path, flag: str, make_dir: bool) -> None:
    """Make and remove what the command will make: the directory `path` (`make_dir`) and
    a staged file named as the longest one it stages beside `path`. Whatever the file
    system answers (ENOENT under /proc, EPERM under /sys, ENAMETOOLONG, EROFS, ...)
    surfaces now as one line naming the flag."""
    made: list[Path] = []
    try:
        p = path.absolute() if make_dir else path.absolute().parent
        todo = []
        while not p.exists() and p != p.parent:
            todo.append(p)
            p = p.parent
        for d in reversed(todo):
            d.mkdir()
            made.append(d)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.steps.", suffix=".tmp",
                                   dir=path.absolute().parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ValueError(os_error_text(flag, path, exc)) from None
    finally:
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_writable_dir(path: Path, target: Path, flag: str) -> None:
    """`path` (the nearest existing ancestor of what is to be made, or the directory the
    files go into) is a directory we may write into."""
    if not path.is_dir():
        raise ValueError(f"{flag} {target}: {path} is a file, so nothing can be written "
                         "under it; give a path in a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {target}: {path} is not writable; give a path you can "
                         "write to")


def check_out_dir(path: Path | None, flag: str = "--out", replace: bool = False) -> None:
    """Refuse an output directory that is an existing file or cannot be written; remove
    what a killed run into it left staged (`atomic.remove_stale`)."""
    try:
        _check_out_dir(path, flag, replace)
    except OSError as exc:  # e.g. ENAMETOOLONG from merely asking whether it exists
        raise ValueError(os_error_text(flag, path, exc)) from None
    _clean_stale(path)


def _clean_stale(path: Path | None) -> None:
    from chunksim.atomic import remove_stale

    if path is None:
        return
    gone = remove_stale(path)
    if gone:
        import typer

        typer.secho(f"note: removed {len(gone)} file(s) an interrupted run into {path} left "
                    f"staged ({', '.join(p.name for p in gone[:3])}"
                    f"{' ...' if len(gone) > 3 else ''})", err=True)


def _check_out_dir(path: Path | None, flag: str, replace: bool) -> None:
    """Refuse an output directory that is an existing file or cannot be written. With
    `replace` (the run's file set is swapped in whole, `atomic.replace_dir`), its parent
    must be writable too."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} exists and is a file; give a directory (new or "
                         "existing) for the results")
    if path.is_dir():
        _check_writable_dir(path, path, flag)
    if replace or not path.exists():
        _check_writable_dir(_nearest_existing(path.parent), path, flag)
    _probe(path, flag, make_dir=True)


def check_out_file(path: Path | None, flag: str = "--out") -> None:
    """As `check_out_dir`, for an output file (written through a staged file beside it)."""
    try:
        _check_out_file(path, flag)
    except OSError as exc:
        raise ValueError(os_error_text(flag, path, exc)) from None
    _clean_stale(path)


def _check_out_file(path: Path | None, flag: str) -> None:
    """Refuse an output file that is an existing directory or cannot be written (files
    are written atomically, through a temporary file next to them)."""
    if path is None:
        return
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file path")
    _check_writable_dir(_nearest_existing(path.parent), path, flag)
    _probe(path, flag, make_dir=False)
