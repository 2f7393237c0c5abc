"""What a MoE layer's expert-parallel all-to-alls cost: the TP all-reduce's link model
(`profiler.collective`) applied to the tokens that leave a device.

With `ep` devices (vLLM --enable-expert-parallel on the engine's --tp devices), each
device dispatches its 1 / ep of the step's T tokens to their top_k experts, a share
(ep - 1) / ep of which live on other devices, and receives the results back (combine):

    per all-to-all: latency + (T / ep) x top_k x (ep - 1) / ep x hidden x dtype bytes
                    / bandwidth

two per MoE layer (dispatch, combine). The layer's output projection keeps one
all-reduce (the experts' outputs come back by the combine, not by an all-reduce).
"""

from __future__ import annotations

ALLTOALLS_PER_LAYER = 2
MOE_ALLREDUCES_PER_LAYER = 1
"""An expert-parallel MoE layer all-reduces attention's output only."""


def alltoall_s(tokens: float, hidden: int, dtype_bytes: int, top_k: int, ep: int,
               gbps: float, latency_us: float) -> float:
    """Seconds of one dispatch (or combine) all-to-all of a `tokens`-token step."""
    nbytes = tokens / ep * top_k * (ep - 1) / ep * hidden * dtype_bytes
    return latency_us * 1e-6 + nbytes * 8 / (gbps * 1e9)


def layer_alltoall_s(tokens: float, hidden: int, dtype_bytes: int, top_k: int, ep: int,
                     link: dict) -> float:
    """Dispatch and combine of one MoE layer."""
    return ALLTOALLS_PER_LAYER * alltoall_s(tokens, hidden, dtype_bytes, top_k, ep,
                                            link["gbps"], link["latency_us"])
