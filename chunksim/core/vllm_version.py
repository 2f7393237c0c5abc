"""The one vLLM version chunksim models, and that version's defaults by platform.

Every layer may import this: the policies take their device-dependent defaults from
`vllm_defaults`, the engine settings their block size, the flag table and every deploy
line their version from `VLLM_VERSION`, and the guide quotes it ("vLLM version
modelled"). A bundled profile's kernel data carries its own version (provenance: the
database it was imported from), which is not the scheduling version modelled here.

The defaults are those of vLLM 0.32.0's `EngineArgs.get_batch_defaults` for `vllm serve`
(the OpenAI API server usage context), `CacheConfig.DEFAULT_BLOCK_SIZE`, the CPU platform's
`check_and_update_config` (block size 128) and `CacheConfig.gpu_memory_utilization`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VLLM_VERSION = "0.32.0"
"""The vLLM release whose scheduler, defaults and flags chunksim follows."""

GPU_MEMORY_UTILIZATION = 0.92
"""vLLM's default fraction of device memory for weights and KV cache (`--gpu-memory-
utilization`; the CPU build applies it to host memory too)."""

GIB = 2**30

KNOWN_MEMORY_GIB: tuple[tuple[str, float], ...] = (
    ("GB300", 279.0), ("B300", 268.0), ("GB200", 186.0), ("B200", 178.0),
    ("MI355", 288.0), ("MI325", 256.0), ("MI300", 192.0), ("H200", 140.0),
    ("H100", 79.0), ("H20", 95.0), ("A100", 79.0), ("L40", 44.0), ("A10", 22.0))
"""Device memory by name, for a device known by name alone (no recorded memory): what
vLLM would read from the device. Longer names first (GB200 before B200)."""


@dataclass(frozen=True)
class Device:
    """The device a profile was measured on, as vLLM's defaults read it."""

    name: str | None = None
    """The device's name ("NVIDIA H200", "h200_sxm (...)", a CPU's model name)."""
    cpu: bool = False
    """vLLM's CPU build (its own defaults)."""
    memory_bytes: int | None = None
    """One device's memory (None: known by name only, or not at all)."""
    world_size: int = 1
    """Devices of one engine (tensor x pipeline parallel): the CPU defaults scale by it."""

    @classmethod
    def of(cls, provenance: dict) -> Device:
        """The device of a profile's provenance (`device`, `device_name`,
        `device_memory_bytes`, `components.tp`)."""
        mem = provenance.get("device_memory_bytes")
        tp = (provenance.get("components") or {}).get("tp")
        return cls(provenance.get("device_name"), provenance.get("device") == "cpu",
                   int(mem) if isinstance(mem, (int, float)) and mem > 0 else None,
                   tp if isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1 else 1)


def as_device(device: Device | str | None) -> Device:
    """A Device from a Device, a bare device name ("cpu" is vLLM's CPU build) or None."""
    if isinstance(device, Device):
        return device
    return Device(device, cpu=(device or "").strip().lower() == "cpu")


def memory_gib(device: Device) -> float:
    """One device's memory in GiB: recorded, else read from its name ("80GB", or a known
    model), else 0 (as vLLM takes a device it cannot query)."""
    if device.memory_bytes:
        return device.memory_bytes / GIB
    name = (device.name or "").upper()
    m = re.search(r"(\d+)\s*GB\b", name)
    if m:
        return float(m.group(1)) * 1e9 / GIB
    return next((gib for tag, gib in KNOWN_MEMORY_GIB if tag in name), 0.0)


@dataclass(frozen=True)
class VllmDefaults:
    """What `vllm serve` of the modelled version sets when a flag is not given."""

    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    why: str
    """The rule that chose them, naming the device."""


def vllm_defaults(device: Device | str | None) -> VllmDefaults:
    """vLLM 0.32.0's `vllm serve` defaults on `device`: on CPU 2048 tokens and 128 seats
    per device of the engine, 128-token blocks; on GPUs of 160 GiB or more 16384 and 1024;
    of 70 GiB or more (A100 excepted) 8192 and 1024; else 2048 and 256; 16-token blocks on
    every GPU."""
    d = as_device(device)
    label = repr(d.name or "unknown")
    if d.cpu:
        ws = d.world_size
        return VllmDefaults(2048 * ws, 128 * ws, 128, f"vLLM {VLLM_VERSION}'s default on CPU "
                            f"(profile device {label}" + (f", {ws} devices)" if ws > 1 else ")"))
    gib = memory_gib(d)
    shown = f"profile device {label}, {gib:.0f} GiB" if gib else f"profile device {label}"
    if gib >= 160:
        return VllmDefaults(16384, 1024, 16, f"vLLM {VLLM_VERSION}'s default on GPUs of "
                            f"160 GiB or more ({shown})")
    if gib >= 70 and "A100" not in (d.name or "").upper():
        return VllmDefaults(8192, 1024, 16, f"vLLM {VLLM_VERSION}'s default on GPUs of "
                            f"70 GiB or more, A100 excepted ({shown})")
    return VllmDefaults(2048, 256, 16, f"vLLM {VLLM_VERSION}'s default on smaller GPUs "
                        f"and A100 ({shown})")
