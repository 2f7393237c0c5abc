"""The installed vLLM's V1 scheduler, built from chunksim's knobs and driven without a model.

vLLM's `Scheduler` (`vllm.v1.core.sched.scheduler`) needs no GPU, weights or workers: given
a model config (a folder holding only `config.json`), a scheduler, a cache and a KV-cache
config, `schedule()` then `update_from_output(ModelRunnerOutput(...))` with fake sampled
tokens is one engine step. Its decisions never read the wall clock. Written against vLLM
`core.vllm_version.VLLM_VERSION` (constructor signatures move between versions).

This module holds what both users of that scheduler share: building it (`build_scheduler`),
turning chunksim's requests into vLLM's (`make_request`, `prompt_tokens`) and ending a step
with fake outputs (`finish_step`). The `vllm` policy runs chunksim's engine on it
(`policies.vllm`); the differential tier compares it with the `budget` policy
(`validate.vllm_scheduler`).

Request -> vLLM request: a prompt block covered by prefix hash `h` holds tokens that depend
on `h` and the block's index alone, every other prompt token is the request's own, and each
request samples its own token, so prefix hits are exactly those chunksim's hashes allow.
Prefix hashes must be chain-consistent (equal hash at block i implies equal blocks 0..i),
as Mooncake-style traces are.

vLLM is imported on first use: without it, the ModuleNotFoundError of `vllm` propagates
(the CLI turns it into one line naming the `vllm` extra).
"""

from __future__ import annotations

import functools
import logging
import os
from functools import lru_cache
from typing import Any

TOKEN_SPAN = 1 << 20
"""Token ids of prefix block (hash h, index i): h * TOKEN_SPAN + i * block_size + t."""
OWN_BASE = 1 << 40
"""A request's own prompt tokens and its sampled token start above every prefix token."""
TIE_S = 1e-9
"""Request i reaches vLLM with arrival time arrival_s + i * TIE_S: vLLM stamps requests
with the clock as they come, so requests arriving at the same instant (ids in arrival
order) reach it in id order, as chunksim's queue and victim keys (priority, arrival, id)
order them."""
NO_CAP = 1 << 20
"""vLLM's max_model_len where chunksim sets none (vLLM needs one; chunksim's engine
rejects what its own --max-model-len refuses before vLLM sees it)."""


def _keeps_environ(fn):
    """Run `fn` with os.environ restored afterwards: vLLM's import and its CPU platform's
    config check write os.environ for the worker processes it would start (LD_PRELOAD,
    thread counts, cache folders); the driver starts none, and what this process starts
    later (a profiler, a pool's workers) must not inherit them."""

    @functools.wraps(fn)
    def kept(*args, **kwargs):
        saved = dict(os.environ)
        try:
            return fn(*args, **kwargs)
        finally:
            if dict(os.environ) != saved:
                os.environ.clear()
                os.environ.update(saved)

    return kept


@lru_cache(maxsize=1)
@_keeps_environ
def vllm_classes() -> dict[str, Any]:
    """vLLM's scheduler-side classes, imported on first use (`vllm` first, so that a
    missing vLLM is reported as such). vLLM's logging is kept to errors unless
    VLLM_LOGGING_LEVEL says otherwise (read at its first import)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    if os.environ["VLLM_LOGGING_LEVEL"] == "ERROR":
        logging.getLogger("vllm").setLevel(logging.ERROR)
    import vllm  # noqa: F401
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

    return dict(CacheConfig=CacheConfig, ModelConfig=ModelConfig,
                SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig,
                SamplingParams=SamplingParams, get_hash_fn_by_name=get_hash_fn_by_name,
                get_request_block_hasher=get_request_block_hasher,
                init_none_hash=init_none_hash, Scheduler=Scheduler,
                FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig,
                KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
                Request=Request, StructuredOutputManager=StructuredOutputManager,
                SpeculativeConfig=SpeculativeConfig, DraftTokenIds=DraftTokenIds)


@lru_cache(maxsize=1)
@_keeps_environ
def _base_config():
    """One `VllmConfig` for a tiny Llama config (no weights): building one costs about
    0.4 s, so each scheduler gets a shallow copy with its own scheduler and cache config."""
    import json
    import tempfile

    v = vllm_classes()
    folder = tempfile.mkdtemp(prefix="chunksim-vllm-")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 1000,
              "max_position_embeddings": NO_CAP, "torch_dtype": "float32"}
    with open(f"{folder}/config.json", "w") as f:
        json.dump(config, f)
    model = v["ModelConfig"](model=folder, skip_tokenizer_init=True, max_model_len=4096,
                             dtype="float32")
    sched = v["SchedulerConfig"](max_num_batched_tokens=4096, max_num_seqs=8,
                                 max_model_len=4096, is_encoder_decoder=False)
    return v["VllmConfig"](model_config=model, scheduler_config=sched,
                           cache_config=v["CacheConfig"](block_size=16))


@_keeps_environ
def build_scheduler(policy, num_gpu_blocks: int, block_size: int, prefix_caching: bool,
                    max_model_len: int, num_speculative_tokens: int = 0):
    """vLLM's `Scheduler` with the scheduling knobs of `policy` (any object with the
    `budget` policy's vLLM-named fields: max_num_batched_tokens, max_num_seqs,
    long_prefill_token_threshold, enable_chunked_prefill, priority_scheduling,
    reserve_full_prompt) and KV cache: `num_gpu_blocks` is vLLM's own count (one of them
    is its null block). `num_speculative_tokens` k > 0: ngram speculative decoding with k
    drafts (no lookahead slots, no drafting slots: the scheduler's rules alone)."""
    import copy

    v = vllm_classes()
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
                                  dtype=model.dtype)
    kv = v["KVCacheConfig"](num_blocks=num_gpu_blocks, kv_cache_tensors=[],
                            kv_cache_groups=[v["KVCacheGroupSpec"](["layer.0"], spec)])
    return v["Scheduler"](cfg, kv, v["StructuredOutputManager"](cfg), block_size=block_size,
                          log_stats=False)


def prompt_tokens(spec, block_size: int, hash_tokens: int = 0, hash_id=int) -> list[int]:
    """The token ids standing for `spec`'s prompt: position p under its prefix hash h (of
    `hash_tokens` tokens each, default the block size) is hash_id(h) * TOKEN_SPAN + p, every
    other position the request's own. `hash_id` maps a workload's hash to a small int
    (below TOKEN_SPAN) without merging two."""
    hb = hash_tokens or block_size
    tokens: list[int] = []
    for i, h in enumerate(spec.prefix_hashes):
        start = hash_id(h) * TOKEN_SPAN + i * hb
        tokens.extend(range(start, start + hb))
    tokens = tokens[:spec.prompt_tokens]
    own = OWN_BASE + spec.request_id * TOKEN_SPAN
    tokens.extend(range(own + len(tokens), own + spec.prompt_tokens))
    return tokens


def sampled_token(request_id: int) -> int:
    """The token request `request_id` samples, every time (its own: never a prefix's)."""
    return OWN_BASE - 1 - int(request_id)


def request_hasher(block_size: int):
    """vLLM's block hasher for requests in blocks of `block_size` tokens (sha256: vLLM
    needs bytes)."""
    v = vllm_classes()
    hash_fn = v["get_hash_fn_by_name"]("sha256")
    v["init_none_hash"](hash_fn)
    return v["get_request_block_hasher"](block_size, hash_fn)


def make_request(spec, block_size: int, hasher, hash_tokens: int = 0, hash_id=int):
    """vLLM's `Request` for chunksim `RequestSpec` `spec`: its prompt (`prompt_tokens`), its
    output length as max_tokens (EOS ignored), its priority, its arrival time (+ the id's
    `TIE_S`)."""
    v = vllm_classes()
    return v["Request"](
        str(spec.request_id), prompt_tokens(spec, block_size, hash_tokens, hash_id),
        v["SamplingParams"](max_tokens=int(spec.output_tokens), ignore_eos=True), None,
        arrival_time=float(spec.arrival_s) + spec.request_id * TIE_S,
        priority=int(spec.priority), block_hasher=hasher)


def finish_step(scheduler, so, sampled: dict[str, list[int]] | None = None) -> None:
    """End the step `so` (a `SchedulerOutput`) on `scheduler` as a model would: `sampled`
    maps each scheduled request id to the tokens it sampled (none while still in its
    prompt); None: the step ran no forward pass (it only preempted)."""
    Output = vllm_classes()["ModelRunnerOutput"]
    if sampled is None:
        scheduler.update_from_output(so, Output(req_ids=[], req_id_to_index={}))
        return
    ids = list(so.num_scheduled_tokens)
    scheduler.update_from_output(so, Output(
        req_ids=ids, req_id_to_index={i: n for n, i in enumerate(ids)},
        sampled_token_ids=[sampled.get(i, []) for i in ids]))
