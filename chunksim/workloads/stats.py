"""Summary statistics of a workload: what `sim workload describe` prints."""

from __future__ import annotations

from collections import Counter

import numpy as np

from chunksim.core.spec import Workload

PERCENTILES = (50, 90, 99)


def _length_stats(prefix: str, x: np.ndarray) -> dict[str, float]:
    q = np.percentile(x, PERCENTILES)
    out = {f"{prefix}_mean": float(x.mean())}
    out.update({f"{prefix}_p{p}": float(v) for p, v in zip(PERCENTILES, q, strict=True)})
    out[f"{prefix}_max"] = int(x.max())
    return out


def prefix_reuse(workload: Workload) -> tuple[float | None, int]:
    """(fraction of prefix blocks already seen earlier in arrival order, unique blocks).

    The fraction is None when the workload carries no hashes. This is an upper bound on
    the prefix-cache hit rate (an infinite cache; Mooncake's README reports the same).
    """
    seen: set[int] = set()
    total = reused = 0
    for r in workload.requests:
        for h in r.prefix_hashes:
            total += 1
            if h in seen:
                reused += 1
            else:
                seen.add(h)
    return (reused / total if total else None), len(seen)


def describe_workload(workload: Workload) -> dict:
    """Count, span, mean rate, inter-arrival CV, length percentiles, prefix reuse.

    `mean_rate_per_s` is count / span (the trace READMEs' convention); it is None for a
    workload whose requests all arrive at once. CV = std / mean of inter-arrival gaps
    (1 for Poisson, 1/sqrt(b) for Gamma with burstiness b).
    """
    reqs = workload.requests
    arrival = np.fromiter((r.arrival_s for r in reqs), np.float64, len(reqs))
    prompt = np.fromiter((r.prompt_tokens for r in reqs), np.int64, len(reqs))
    output = np.fromiter((r.output_tokens for r in reqs), np.int64, len(reqs))
    gaps = np.diff(arrival)
    duration = float(arrival[-1] - arrival[0])
    cv = float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None
    reuse, unique = prefix_reuse(workload)
    stats: dict = {
        "name": workload.name,
        "num_requests": len(reqs),
        "duration_s": duration,
        "mean_rate_per_s": len(reqs) / duration if duration > 0 else None,
        "interarrival_cv": cv,
        "max_requests_in_1s": int(np.bincount((arrival - arrival[0]).astype(np.int64)).max()),
    }
    stats.update(_length_stats("prompt_tokens", prompt))
    stats.update(_length_stats("output_tokens", output))
    stats["total_prompt_tokens"] = int(prompt.sum())
    stats["total_output_tokens"] = int(output.sum())
    stats["prefix_block_tokens"] = workload.prefix_block_tokens
    stats["prefix_reuse_fraction"] = reuse
    stats["unique_prefix_blocks"] = unique
    stats["classes"] = dict(Counter(r.request_class for r in reqs))
    stats["notes"] = list(workload.notes)
    return stats
