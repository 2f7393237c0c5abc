"""Atomic output: write to a temp file in the same directory, then os.replace."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_default) + "\n")


def write_csv(path: str | Path, frame) -> None:
    """A pandas DataFrame as CSV, atomically, with repr-exact floats (deterministic)."""
    write_text(path, frame.to_csv(index=False, float_format=None, lineterminator="\n"))


def _default(o):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")
