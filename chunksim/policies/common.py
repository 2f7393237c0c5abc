"""What every policy shares: the protocol's defaults and vLLM's device-dependent defaults."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from chunksim.core.queues import FCFS, QueueDiscipline
from chunksim.core.vllm_version import Device, vllm_defaults


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
    def device_defaults(cls, device: Device | str | None,
                        given: dict | None = None) -> dict[str, tuple[Any, str]]:
        """Knobs whose default depends on the profiled device (the modelled vLLM's, see
        `core.vllm_version`), given the knobs the user set: {knob: (value, why)}."""
        d = vllm_defaults(device)
        return {"max_num_seqs": (d.max_num_seqs, d.why)}
