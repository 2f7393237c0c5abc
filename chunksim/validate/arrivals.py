"""Rebuild a benchmark's send schedule when its results file did not record it: the draws
the tool made, from its seed, in its order. Pure numpy.

vLLM (`vllm/benchmarks/serve.py`, `get_request`, as since PR #21108 of July 2025;
checked against main at commit 009e6d4, 2026): `np.random.seed(seed)` at start; one
interval per request, gamma(shape=burstiness, scale=1 / (rate x burstiness))
(exponential at burstiness 1; 1 / rate at burstiness inf; 0 at rate inf), the rate
following `--ramp-up-strategy` where set; cumulated, and without ramp-up rescaled so
that the last send falls at N / rate. The first request waits its own interval too.

SGLang (`python/sglang/bench_serving.py` at commit 0033168, `get_request`):
`np.random.seed(seed)`; the
first request at once, then after each request an exponential(1 / rate) sleep. Its
`random` dataset draws the prompt and output lengths from the same generator first
(`np.random.randint`, twice); those draws are replayed and checked against the file's
`input_lens`, which tells whether the schedule is the one the tool drew.

Exact only when nothing else drew from numpy's global generator between the seed and the
schedule (the datasets named above leave it alone or are replayed); the result says so.
With `--max-concurrency` the sends waited for the server, which a schedule cannot
reproduce: such a file needs recorded start times.
"""

from __future__ import annotations

import math

import numpy as np

from chunksim.core.errors import InputError


def _rate(v, path: str, field: str = "request_rate") -> float:
    if v is None:
        raise InputError(f"results file {path}: field {field!r} is missing, so the send "
                         "schedule cannot be rebuilt; give a file with start_times or arrival_s")
    if isinstance(v, str):
        v = v.strip().lower()
        v = math.inf if v in ("inf", "infinity") else v
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"results file {path}: field {field!r} = {v!r} is not a rate") from None
    if not x > 0:
        raise InputError(f"results file {path}: field {field!r} = {v!r} must be > 0")
    return x


def vllm_schedule(n: int, rate: float, burstiness: float = 1.0, seed: int = 0,
                  ramp: tuple[str, float, float] | None = None) -> np.ndarray:
    """Send times (s from the benchmark's start) as `vllm bench serve` draws them."""
    rng = np.random.RandomState(seed)  # the legacy global generator's stream
    delays = []
    for i in range(n):
        r = rate
        if ramp is not None:
            kind, lo, hi = ramp
            p = i / max(n - 1, 1)
            r = lo + (hi - lo) * p if kind == "linear" else lo * (hi / lo) ** p
        if r == math.inf:
            delays.append(0.0)
        elif burstiness == math.inf:
            delays.append(1.0 / r)
        else:
            delays.append(rng.gamma(shape=burstiness, scale=1.0 / (r * burstiness)))
    t = np.cumsum(np.asarray(delays, dtype=float))
    if ramp is None and n and t[-1] != 0:
        t = t * ((n / rate) / t[-1])
    return t


def sglang_schedule(n: int, rate: float, seed: int = 0,
                    random_lens: tuple[int, int, float] | None = None) -> tuple[np.ndarray,
                                                                             np.ndarray | None]:
    """Send times as `sglang.bench_serving` draws them, and the prompt lengths its
    `random` dataset drew first (None when `random_lens` is None)."""
    rng = np.random.RandomState(seed)
    lens = None
    if random_lens is not None:
        in_len, out_len, ratio = random_lens
        lens = rng.randint(max(int(in_len * ratio), 1), in_len + 1, size=n)
        rng.randint(int(out_len * ratio), out_len + 1, size=n)
    if rate == math.inf:
        return np.zeros(n), lens
    gaps = rng.exponential(1.0 / rate, size=max(n - 1, 0))
    return np.concatenate([[0.0], np.cumsum(gaps)]), lens


def rebuild(fmt: str, doc: dict, n: int, seed: int, path: str) -> tuple[np.ndarray, str]:
    """(send times for the file's n requests in file order, how they were obtained)."""
    if doc.get("max_concurrency") not in (None, 0):
        raise InputError(
            f"results file {path}: requests were sent under --max-concurrency "
            f"{doc['max_concurrency']} and the file has no start_times: each send waited for "
            "the server, so the schedule cannot be rebuilt from rate and seed; use a vLLM that "
            "records start_times (January 2026 on) or a generic file with arrival_s")
    rate_field = "request_rate"
    if fmt == "vllm":
        strategy = doc.get("ramp_up_strategy")
        ramp = None
        if strategy is not None:
            if strategy not in ("linear", "exponential"):
                raise InputError(f"results file {path}: field 'ramp_up_strategy' = "
                                 f"{strategy!r} is not linear or exponential")
            ramp = (strategy, _rate(doc.get("ramp_up_start_rps"), path, "ramp_up_start_rps"),
                    _rate(doc.get("ramp_up_end_rps"), path, "ramp_up_end_rps"))
            rate = math.inf
        else:
            rate = _rate(doc.get(rate_field), path)
        b = doc.get("burstiness", 1.0)
        burst = _rate(b, path, "burstiness")
        t = vllm_schedule(n, rate, burst, seed, ramp)
        if rate == math.inf and ramp is None:
            return t, "rebuilt: all sent at once (request_rate inf)"
        return t, (f"rebuilt as vllm bench serve draws them (seed {seed}, rate "
                   f"{'ramp ' + strategy if ramp else rate}, burstiness {burst}); exact "
                   "when the dataset sampler left numpy's global generator alone")
    rate = _rate(doc.get(rate_field), path)
    random_lens = None
    if str(doc.get("dataset_name", "")).startswith("random"):
        try:
            random_lens = (int(doc["random_input_len"]), int(doc["random_output_len"]),
                           float(doc["random_range_ratio"]))
        except (KeyError, TypeError, ValueError):
            random_lens = None
    t, lens = sglang_schedule(n, rate, seed, random_lens)
    if rate == math.inf:
        return t, "rebuilt: all sent at once (request_rate inf)"
    how = f"rebuilt as sglang.bench_serving draws them (seed {seed}, rate {rate})"
    if lens is not None:
        recorded = np.asarray(doc.get("input_lens") or [], dtype=float)
        if len(recorded) == n and np.array_equal(recorded, lens):
            how += "; the random dataset's lengths replayed and matched: exact"
        else:
            how += ("; NOT the tool's draws: the random dataset's lengths replayed from this "
                    "seed differ from input_lens (another seed or version): same rate, other "
                    "arrivals")
    else:
        how += "; exact when the dataset sampler left numpy's global generator alone"
    return t, how
