"""What every policy shares: the protocol's defaults and vLLM's device-dependent defaults."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from chunksim.core.queues import FCFS, QueueDiscipline

BIG_GPU_TAGS = ("H100", "H200", "H20", "B200", "GB200", "MI300")
"""Device names vLLM gives its larger defaults (`max_num_seqs` 1024, budget 8192)."""


def big_gpu(device_name: str | None) -> bool:
    """Whether vLLM would treat the profiled device as H100/H200-class."""
    name = (device_name or "").upper()
    return any(tag in name for tag in BIG_GPU_TAGS)


def device_reason(device_name: str | None) -> str:
    """Why a device-dependent default took its value, for the summary and the console."""
    if big_gpu(device_name):
        return f"vLLM's default on H100/H200-class GPUs (profile device {device_name!r})"
    return f"vLLM's default below H100-class GPUs (profile device {device_name or 'unknown'!r})"


class PolicyBase:
    """Mixin for the policy dataclasses: knob echo, defaults, no size limit."""

    name: ClassVar[str]
    queue: ClassVar[QueueDiscipline] = FCFS
    bulk_decode: ClassVar[bool] = False
    speculative: ClassVar[bool] = False
    chunk_knob: ClassVar[str | None] = None
    """The knob `--chunk` / `--chunks` sets (None: the policy has no chunk size)."""

    def params(self) -> dict:
        """Knob values, echoed into summary.json."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def rejection_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request of this size can never run under this policy (None if it can)."""
        return None

    def max_model_len_error(self, max_model_len: int) -> str | None:
        """Why this policy refuses --max-model-len `max_model_len` (None: it takes it)."""
        return None

    @classmethod
    def device_defaults(cls, device_name: str | None) -> dict[str, tuple[Any, str]]:
        """Knobs whose default depends on the profiled device: {knob: (value, why)}."""
        seats = 1024 if big_gpu(device_name) else 256
        return {"max_num_seqs": (seats, device_reason(device_name))}
