"""Output paths checked before any work starts: a command that would fail to write its
results fails at once, with the flag and the fix, not after minutes of simulation."""

from __future__ import annotations

import os
from pathlib import Path


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


def check_out_file(path: Path | None, flag: str = "--out") -> None:
    """Refuse an output file that is an existing directory or cannot be written (files
    are written atomically, through a temporary file next to them)."""
    if path is None:
        return
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file path")
    _check_writable_dir(_nearest_existing(path.parent), path, flag)
