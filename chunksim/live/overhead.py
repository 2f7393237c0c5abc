"""The live loop's per-step CPU cost outside the forward pass, measured on a synthetic
session: what `sim profile` should record as the profile's `step_overhead_s`.

Scheduling, input preparation, sampling and bookkeeping grow with the requests in a step,
so besides the median this fits `base_s + per_request_s * requests` over the session's
busy steps.
"""

from __future__ import annotations

import numpy as np

from chunksim.core.spec import RequestSpec, Workload
from chunksim.live.settings import LiveSettings


def session_workload(requests: int = 24, seed: int = 0) -> Workload:
    """A burst of chat-sized requests: as they finish, the step holds 24 .. 1 requests."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(64, 513, requests)
    outputs = rng.integers(16, 65, requests)
    return Workload("overhead-session", tuple(
        RequestSpec(i, 0.0, int(p), int(o)) for i, (p, o) in enumerate(
            zip(prompts, outputs, strict=True))))


def fit_overhead(steps) -> dict:
    """Median and least-squares `base + per_request * requests` of `overhead_s` over the
    busy steps of a live steps frame."""
    busy = steps[steps["busy"]]
    o = busy["overhead_s"].to_numpy()
    n = (busy["decodes"] + busy["prefill_requests"]).to_numpy().astype(float)
    out = {"median_s": float(np.median(o)), "p90_s": float(np.percentile(o, 90)),
           "steps": int(len(o))}
    if len(o) >= 2 and np.ptp(n) > 0:
        per, base = np.polyfit(n, o, 1)
        out.update(base_s=float(base), per_request_s=float(per))
    return out


def measure_step_overhead(settings: LiveSettings, requests: int = 24) -> dict:
    """Serve `session_workload` live with the budget policy and summarize the time per
    step outside the forward pass (see `fit_overhead`)."""
    from chunksim.core.kv_cache import KVConfig
    from chunksim.live.loop import LiveEngine
    from chunksim.policies import make_policy

    workload = session_workload(requests, settings.seed)
    policy = make_policy("budget", chunk=512)
    result = LiveEngine(workload, policy, KVConfig(4096, 16), settings).run()
    return fit_overhead(result.steps)
