"""What one long prompt does to the requests decoding when it arrives: the figures behind
the seed question, computed from a run's records (pure)."""

from __future__ import annotations

import numpy as np


def long_prompt_effect(requests, long_id: int) -> dict:
    """TTFT of the long request, and the worst gap (max ITL) of the requests that were
    decoding when it arrived (its victims), in ms.

    Why not pooled P99 ITL: one stall hits about one gap per in-flight request, while the
    pool holds every gap of the run; the stalled fraction is about ITL / run length
    (~1e-4 for 3 ms steps over 30 s), far below the 1 % a P99 can see."""
    r = requests
    long = r[r.request_id == long_id].iloc[0]
    t = long.arrival_s
    victims = r[(r.request_id != long_id) & (r.first_token_s < t) & (r.finish_s > t)]
    worst = victims.max_itl_s.to_numpy() * 1000.0
    return {
        "long_ttft_ms": float(long.first_token_s - long.arrival_s) * 1000.0,
        "victims": len(victims),
        "victim_max_itl_ms_mean": float(worst.mean()) if len(worst) else 0.0,
        "victim_max_itl_ms_p99": float(np.percentile(worst, 99)) if len(worst) else 0.0,
    }
