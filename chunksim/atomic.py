"""Atomic output: write to a temp file in the same directory, then os.replace; a set of
files goes into a temp directory that then replaces the output directory whole."""

from __future__ import annotations

import atexit
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it the file
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are for sharing
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def foreign_entries(path: str | Path, names) -> list[str]:
    """Entries of directory `path` other than files named in `names`: what replacing it
    with a new set of those files would destroy."""
    path = Path(path)
    try:
        return sorted(e.name for e in path.iterdir() if e.name not in names or e.is_dir())
    except (FileNotFoundError, NotADirectoryError):  # absent (or being replaced): nothing
        return []


def write_dir(path: str | Path, files: Mapping[str, bytes | Path], owned=None) -> None:
    """Write `files` ({name: bytes, or the Path of a finished file on the same file
    system, moved in: a large table streamed there}) as the directory `path`, whole:
    into a temporary directory next to it, renamed into place. A reader sees the old set
    or the new one, never a mix (two writers racing leave one writer's complete set). An
    existing `path` may hold only files of that set, or named in `owned` (the command's
    possible outputs; ValueError otherwise: it would be destroyed)."""
    path = Path(path)
    foreign = foreign_entries(path, files if owned is None else set(owned) | set(files))
    if foreign:
        raise ValueError(f"{path} holds {', '.join(foreign[:5])}"
                         f"{' ...' if len(foreign) > 5 else ''}, which are not this command's "
                         "output; give a new or empty directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_prefix(path), suffix=".tmp", dir=path.parent))
    try:
        for name, data in files.items():
            if isinstance(data, Path):
                with open(data, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(data, tmp / name)
            else:
                with open(tmp / name, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            os.chmod(tmp / name, 0o666 & ~_umask())
        os.chmod(tmp, 0o777 & ~_umask())
        for _ in range(1000):
            try:
                os.rename(tmp, path)  # replaces a missing or empty directory at once
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            # move the old set aside (onto an empty directory), then retry
            old = Path(tempfile.mkdtemp(prefix=_prefix(path), suffix=".old",
                                        dir=path.parent))
            try:
                os.rename(path, old)
            except FileNotFoundError:  # another writer moved it first
                pass
            shutil.rmtree(old, ignore_errors=True)
        raise OSError(f"{path}: could not replace the directory (other writers kept it busy)")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | Path, obj) -> None:
    write_bytes(path, json_bytes(obj))


def csv_bytes(frame) -> bytes:
    """A pandas DataFrame as CSV bytes with repr-exact floats (deterministic)."""
    return frame.to_csv(index=False, float_format=None, lineterminator="\n").encode()


def json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=False, default=_default) + "\n").encode()


def write_csv(path: str | Path, frame) -> None:
    """A pandas DataFrame as CSV, atomically, with repr-exact floats (deterministic)."""
    write_bytes(path, csv_bytes(frame))


def _default(o):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def staging_file(path: str | Path, name: str) -> Path:
    """A new empty temporary file next to directory `path`, for a file of its set that is
    written piece by piece before `write_dir` moves it in (the caller removes it if the
    set is never written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(path, name), suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def staging_dir(path: str | Path) -> Path:
    """A new empty temporary directory next to directory `path`: a command writes its
    whole file set there, then `swap_in` makes it `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=_prefix(path, "stage"), suffix=".tmp",
                                  dir=path.parent))
    atexit.register(shutil.rmtree, stage, True)  # an error or SIGTERM: gone at exit
    return stage


def swap_in(stage: Path, path: str | Path, owned) -> None:
    """Make the files in `stage` the directory `path`, whole (`write_dir`): files of an
    earlier set that this one lacks (a figure only a fleet draws) are gone with it.
    `owned`: every name the command may write; anything else in `path` is refused. (A
    stage never swapped in is removed at exit, or by the next run: `remove_stale`.)"""
    try:
        write_dir(path, {p.name: p for p in sorted(Path(stage).iterdir())}, owned=owned)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _prefix(path: Path, kind: str | None = None) -> str:
    """`.NAME.[KIND.]PID.`: a staged entry names the output it is for and the process
    that made it, so a later run can tell what a killed one left (`remove_stale`)."""
    return f".{path.name}.{kind + '.' if kind else ''}{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def remove_stale(path: str | Path) -> list[Path]:
    """Staged files and directories that a killed run of output `path` left behind (its
    process is gone: SIGKILL, a crash), next to `path` and inside it; removed. Returns
    what was removed."""
    import re

    path = Path(path)
    pid_rx = re.compile(r"\.(?:[A-Za-z]+\.)?(\d+)\.[A-Za-z0-9_]+\.(?:tmp|old)$")
    found: list[Path] = []
    places = [(path.parent, f".{path.name}.")]
    if path.is_dir():
        places.append((path, "."))
    for where, start in places:
        try:
            entries = list(where.iterdir())
        except OSError:
            continue
        for e in entries:
            if not e.name.startswith(start):
                continue
            m = pid_rx.search(e.name[len(start) - 1:])
            if m is None or _alive(int(m[1])):
                continue
            if e.is_dir() and not e.is_symlink():
                shutil.rmtree(e, ignore_errors=True)
            else:
                e.unlink(missing_ok=True)
            found.append(e)
    return found
