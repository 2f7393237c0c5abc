"""Which device to profile on, what it is called, how much memory it has, how to sync it."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from collections.abc import Callable

import torch


def resolve_device(name: str) -> str:
    """`cpu`, `cuda` or `auto` (cuda when available) -> `cpu` | `cuda`."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device (CPU-only build or no GPU); "
                         "use --device cpu or auto")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"--device {name!r}: use cpu, cuda or auto")
    return name


def device_name(device: str) -> str:
    """Marketing name of the GPU, or the CPU model from /proc/cpuinfo."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_memory_bytes(device: str) -> int:
    """Total memory of the GPU, or physical RAM on the CPU."""
    if device == "cuda":
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def synchronizer(device: str) -> Callable[[], None]:
    """A no-argument sync: waits for queued CUDA kernels; nothing to wait for on CPU."""
    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def free_cached(device: str) -> None:
    """Return freed blocks to the driver so a re-sized KV pool can take their place."""
    if device == "cuda":
        torch.cuda.empty_cache()


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
HOST_ALLOCATOR = {"trim_threshold_bytes": 2**30, "mmap_threshold_bytes": 32 * 2**20}
"""glibc thresholds `pin_host_allocator` sets: freed memory up to 1 GiB stays in the
process, and blocks below 32 MiB (glibc's ceiling for this threshold) come from its heap."""
_pinned: dict | None = None


def pin_host_allocator() -> dict | None:
    """Keep freed host memory in the process, as a serving engine's caching allocator
    keeps device memory: what `HOST_ALLOCATOR` says, set once per process (glibc only;
    None elsewhere, nothing changed). Returns what is in force, for provenance.

    Why: by default glibc returns a freed heap top over its (adaptive) trim threshold to
    the OS and serves large blocks by mmap, so a large CPU step whose temporaries exceed
    it takes thousands of page faults to get its memory back, every step, depending on
    the process's history. A component timed alone does not; the same step inside the
    whole model does. Pinned, both reuse memory as a GPU engine does."""
    global _pinned
    if _pinned is not None:
        return _pinned
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = (libc.mallopt(_M_TRIM_THRESHOLD, HOST_ALLOCATOR["trim_threshold_bytes"]) == 1
              and libc.mallopt(_M_MMAP_THRESHOLD, HOST_ALLOCATOR["mmap_threshold_bytes"]) == 1)
    except (OSError, AttributeError):
        return None
    _pinned = {"glibc": dict(HOST_ALLOCATOR)} if ok else None
    return _pinned
