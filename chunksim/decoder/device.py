"""Which device to profile on, what it is called, how much memory it has, how to sync it."""

from __future__ import annotations

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
