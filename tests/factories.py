"""Small factories for simulator tests: synthetic latency profiles and workloads, no model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from chunksim.core.spec import RequestSpec, Workload
from chunksim.decoder.config import ModelConfig
from chunksim.latency.profile import load_profile

SMALL = ModelConfig(name="small", n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2,
                    head_dim=16, intermediate_size=128, vocab_size=512, max_position=2048)
"""A model small enough for live runs and real forward passes in tests (seconds on CPU)."""

CHUNKS = (0, 16, 64, 256, 1024, 4096, 16384)
DECODES = (0, 1, 4, 16, 64, 256)
KVS = (1, 256, 1024, 4096, 16384)
PRIORS = (1024, 4096, 16384)


def linear_time(c: float, p: float, d: float, k: float) -> float:
    """A step-time law that multilinear interpolation reproduces exactly on the grid cells
    (linear in each key separately): 2 ms fixed + 10 us/token + 20 ns per decode-context
    token + 1 ns per chunk-token x prior-token."""
    return 0.002 + 10e-6 * (c + d) + 20e-9 * d * k + 1e-9 * c * p


def constant_time(step_s: float) -> Callable[[float, float, float, float], float]:
    return lambda c, p, d, k: step_s


def make_profile(tmp: Path, fn: Callable = linear_time, name: str = "test",
                 chunks=CHUNKS, decodes=DECODES, kvs=KVS, priors=PRIORS, spread: float = 1.0,
                 provenance: dict | None = None, spread_fn: Callable | None = None):
    """Write a profile CSV+JSON computed from `fn(chunk, prior, decodes, kv)` and load it.
    `spread` sets p90/p10 = spread around the median (1.0 = no variance); `spread_fn(chunk,
    prior, decodes, kv)`, when given, sets it per row instead."""
    rows = []
    for c in chunks:
        for d in decodes:
            if c == 0 and d == 0:
                continue
            for k in (kvs if d else (0,)):
                rows.append((c, 0, d, k))
    for c in chunks:
        if c:
            for p in priors:
                rows.append((c, p, 0, 0))
    df = pd.DataFrame(rows, columns=["chunk_len", "prior_len", "decode_count", "kv_len"])
    med = [fn(c, p, d, k) for c, p, d, k in rows]
    df["median_s"] = med
    spreads = [spread_fn(*r) if spread_fn else spread for r in rows]
    df["p10_s"] = [m / s**0.5 for m, s in zip(med, spreads, strict=True)]
    df["p90_s"] = [m * s**0.5 for m, s in zip(med, spreads, strict=True)]
    df["mean_s"] = med
    df["repeats"] = 5
    df = df.sort_values(["prior_len", "chunk_len", "decode_count", "kv_len"])
    csv = tmp / f"{name}.csv"
    csv.write_text(df.to_csv(index=False))
    # device "synthetic": a 16 GiB device that is not vLLM's CPU build, so the modelled
    # vLLM's defaults are the small-GPU ones (16-token blocks, 256 seats, a 2048-token
    # budget); a test of the CPU defaults or of the live loop says device "cpu"
    meta = {
        "format": "chunksim-profile/1",
        "content_sha256": hashlib.sha256(csv.read_bytes()).hexdigest(),
        "device": "synthetic", "device_name": "synthetic", "dtype": "float32", "threads": 1,
        "model": {"name": "synthetic"},
        "device_memory_bytes": 2**34, "weights_bytes": 2**20, "kv_bytes_per_token": 2048,
        "step_overhead_s": 0.0,
    }
    meta.update(provenance or {})
    (tmp / f"{name}.json").write_text(json.dumps(meta))
    return load_profile(str(csv))


def workload(reqs: list[tuple[float, int, int]], name: str = "test") -> Workload:
    """[(arrival_s, prompt, output), ...] -> Workload (must be sorted by arrival)."""
    return Workload(name, tuple(RequestSpec(i, a, p, o) for i, (a, p, o) in enumerate(reqs)))


def load_script(name: str):
    """`benchmarks/<name>.py` imported as a module (the benchmarks are scripts, not a
    package), for end-to-end tests of their `main`."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------ hand-built scheduler states
# vLLM's scheduler tests build a scheduler and requests by hand and call schedule(); these
# do the same for chunksim: a KV cache, requests at a given progress with their blocks
# allocated as EngineCore allocates them, and a SchedulerState to hand to `policy.plan`.


def kv_cache(num_blocks: int, block_size: int = 16, prefix_block_tokens: int | None = None):
    """A plain KVCache, or (with `prefix_block_tokens`, the tokens one prefix hash covers) a
    PrefixKVCache."""
    from chunksim.core.kv_cache import KVConfig
    from chunksim.core.kv_factory import make_kv_cache

    caching = prefix_block_tokens is not None
    return make_kv_cache(KVConfig(num_blocks, block_size, caching, prefix_block_tokens or 0))


def request_spec(rid: int, prompt: int, output: int = 64, arrival_s: float | None = None,
                 hashes: tuple[int, ...] = (), priority: int = 0,
                 request_class: str = "default") -> RequestSpec:
    """A RequestSpec; arrival defaults to `rid` seconds, so ids are in arrival order."""
    return RequestSpec(rid, float(rid) if arrival_s is None else arrival_s, prompt, output,
                       hashes, request_class, priority)


def running_request(kv, spec: RequestSpec, computed: int | None = None, outputs: int = 0):
    """A request admitted into `kv` (taking its prefix hits) and advanced to `computed`
    tokens with `outputs` sampled, its blocks grown and its full blocks committed, as
    EngineCore's begin_step/end_step leave it. Default `computed`: all but the newest
    token (a decode) when `outputs` >= 1, else 0."""
    from chunksim.core.request import Request

    if computed is None:
        computed = spec.prompt_tokens + outputs - 1 if outputs else 0
    if outputs and computed != spec.prompt_tokens + outputs - 1:
        raise ValueError(f"a request with {outputs} outputs has computed prompt + outputs - 1 "
                         f"= {spec.prompt_tokens + outputs - 1} tokens, not {computed}")
    if not outputs and computed >= spec.prompt_tokens:
        raise ValueError(f"computed={computed} covers the whole {spec.prompt_tokens}-token "
                         "prompt, so its first token is out: give outputs >= 1")
    req = Request(spec)
    kv.admit(req)
    if computed < req.num_computed_tokens:
        raise ValueError(f"the prefix hit ({req.num_computed_tokens}) exceeds computed={computed}")
    kv.grow(req, computed - req.num_computed_tokens)
    req.num_computed_tokens = computed
    req.num_output_tokens = outputs
    kv.commit(req)
    return req


def decoding_request(kv, spec: RequestSpec, outputs: int = 1):
    """A running request with `outputs` tokens sampled: its next step is a 1-token decode."""
    return running_request(kv, spec, outputs=outputs)


def finished_request(kv, spec: RequestSpec) -> None:
    """Run `spec` to its end and free it, as EngineCore.retire does: its full blocks stay
    in the prefix cache (LRU), nothing stays allocated."""
    req = running_request(kv, spec, outputs=spec.output_tokens)
    kv.free(req)


def waiting_request(spec: RequestSpec, outputs: int = 0, preemptions: int = 0):
    """A queued request: new, or (with `outputs`/`preemptions`) preempted by recompute."""
    from chunksim.core.request import Request

    return Request(spec, num_output_tokens=outputs, num_preemptions=preemptions)


def scheduler_state(kv, running=(), waiting=(), last_step_prefill: bool = False):
    """The SchedulerState a policy sees (lists, in admission and queue order)."""
    from chunksim.core.plan import SchedulerState

    return SchedulerState(list(running), list(waiting), kv, last_step_prefill)


def apply_plan(kv, running: list, waiting: list, plan) -> None:
    """Apply `plan` to `kv` and the two lists as EngineCore.begin_step does (preempt; then
    per entry in batch order: admit taking prefix hits, allocate, register the blocks the
    step fills), then advance counters as end_step does (sample, free finished requests).
    Preempted requests go to the front of `waiting` (FCFS; an ordered discipline would
    re-sort it). Raises RuntimeError if the plan overflows the cache."""
    for victim in plan.preempted:
        running.remove(victim)
        kv.free(victim, reusable=True)
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        waiting.insert(0, victim)
    for req in plan.admitted:
        waiting.remove(req)
        running.append(req)
    for req, n in plan.scheduled:
        if any(req is a for a in plan.admitted):
            kv.admit(req)
        if n > req.num_remaining:
            raise RuntimeError(f"request {req.request_id}: {n} tokens planned, "
                               f"{req.num_remaining} left after its prefix hit")
        kv.grow(req, n)
        kv.commit(req, req.num_computed_tokens + n)
    for req, n in plan.scheduled:
        req.num_computed_tokens += n
        if req.num_computed_tokens == req.num_tokens:
            req.num_output_tokens += 1
    for req in [r for r in running if r.is_finished]:
        running.remove(req)
        kv.free(req)


# -- component profiles (chunksim-components/1) --------------------------------------------

TOKENS = (1, *range(16, 513, 16), 1024, 4096, 16384)
CHUNK_LENS = (1, 16, 64, 256, 1024, 4096, 16384)
PRIOR_LENS = (0, 1024, 4096, 16384)
DECODE_COUNTS = (1, 2, 4, 16, 64, 256)
KV_LENS = (1, 256, 1024, 4096, 16384)
SPREADS = (1.0, 1.5, 2.0, 4.0)
LOGITS = (0, 1, 16, 256)


def law_dense(tokens: float) -> float:
    return 1e-5 + 2e-7 * tokens


def law_prefill(chunk: float, prior: float) -> float:
    return 3e-6 + 2e-8 * chunk + 1e-9 * chunk * prior


def law_decode(count: float, kv: float, spread: float) -> float:
    """Reads the sum of contexts (count x kv) and pays for the longest (count x kv x
    spread, a padded kernel's read): linear in each key, so interpolation is exact."""
    return 2e-6 + 1e-7 * count + 1e-9 * count * kv + 5e-10 * count * kv * (spread - 1.0)


def law_embed(tokens: float) -> float:
    return 1e-6 + 1e-9 * tokens


def law_head(logits: float) -> float:
    return 2e-6 + 5e-7 * logits


FIXED_S = 3e-5


def law_step(chunks, decode_kvs, logits: int, layers: int = 4, scale: float = 1.0,
             decode=law_decode) -> float:
    """The composition the model must reproduce: chunks [(length, prior)], decode contexts."""
    tokens = sum(n for n, _ in chunks) + len(decode_kvs)
    per_layer = law_dense(tokens) + sum(law_prefill(n, p) for n, p in chunks)
    if decode_kvs:
        mean = sum(decode_kvs) / len(decode_kvs)
        per_layer += decode(len(decode_kvs), mean, max(decode_kvs) / mean)
    return scale * (layers * per_layer + law_embed(tokens) + law_head(logits) + FIXED_S)


def component_rows(decode=law_decode, spread: float = 1.0, fixed_s: float = FIXED_S):
    """Rows of a component table from the laws above; p10/p90 = median / * sqrt(spread)."""
    z = dict(tokens=0, chunk_len=0, prior_len=0, decode_count=0, kv_len=0, kv_max=0, logits=0)
    rows = []

    def add(component, t, **keys):
        rows.append({"component": component, **z, **keys, "median_s": t,
                     "p10_s": t / spread**0.5, "p90_s": t * spread**0.5, "mean_s": t,
                     "repeats": 5})

    for n in TOKENS:
        add("dense", law_dense(n), tokens=n)
        add("embed", law_embed(n), tokens=n)
    for c in CHUNK_LENS:
        for p in PRIOR_LENS:
            add("prefill_attn", law_prefill(c, p), chunk_len=c, prior_len=p)
    for d in DECODE_COUNTS:
        for k in KV_LENS:
            for r in (SPREADS if d > 1 else (1.0,)):
                add("decode_attn", decode(d, k, r), decode_count=d, kv_len=k, kv_max=k * r)
    for n in LOGITS:
        add("head", law_head(n), logits=n)
    add("fixed", fixed_s)
    return rows


def make_component_profile(tmp: Path, name: str = "comp", layers: int = 4,
                           decode=law_decode, spread: float = 1.0, rows=None,
                           provenance: dict | None = None):
    """Write a component profile from the laws above (or `rows`) and load it."""
    df = pd.DataFrame(rows if rows is not None else component_rows(decode, spread))
    csv = tmp / f"{name}.csv"
    csv.write_text(df.to_csv(index=False))
    meta = {
        "format": "chunksim-components/1",
        "content_sha256": hashlib.sha256(csv.read_bytes()).hexdigest(),
        "device": "synthetic", "device_name": "synthetic", "dtype": "float32", "threads": 1,
        "model": {"name": "synthetic", "n_layers": layers},
        "components": {"layers": layers, "in_sequence_scale": 1.0},
        "device_memory_bytes": 2**34, "weights_bytes": 2**20, "kv_bytes_per_token": 2048,
        "step_overhead_s": 0.0,
    }
    for k, v in (provenance or {}).items():
        meta[k] = {**meta[k], **v} if isinstance(v, dict) and k in meta else v
    (tmp / f"{name}.json").write_text(json.dumps(meta))
    return load_profile(str(csv))


def default_sigint() -> None:
    """A `subprocess.Popen` preexec_fn: SIGINT as a terminal session delivers it. A suite
    started in the background by a non-interactive shell runs with SIGINT ignored, which
    a child inherits (and then never sees Ctrl-C); the Ctrl-C tests restore the default."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
