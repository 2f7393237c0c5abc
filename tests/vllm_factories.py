"""vLLM's own scheduler for tests that hold chunksim to it (skipped without vLLM): built on
a tiny Llama config.json, no weights, no model runner."""

from __future__ import annotations

import json
import tempfile


def tiny_llama_dir(vocab_size: int = 10000) -> str:
    """A folder holding only the config.json of a one-layer Llama (vLLM reads nothing else
    to configure its scheduler)."""
    d = tempfile.mkdtemp()
    with open(d + "/config.json", "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
                   "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": vocab_size,
                   "max_position_embeddings": 4096, "torch_dtype": "float32"}, f)
    return d


def vllm_scheduler(block_size: int, num_blocks: int, *, head_size: int = 16,
                   speculative: dict | None = None, host_blocks: int | None = None):
    """(vLLM's `Scheduler`, the block hasher its requests take): 512 tokens a step, 8
    seats, 4096-token model length, prefix caching on, `num_blocks` KV blocks (vLLM's
    count: its null block included). `speculative`: a `SpeculativeConfig`'s arguments.
    `host_blocks`: vLLM's OffloadingConnector (CPU backend, LRU) with room for that many
    blocks (a block of `head_size` 32 is one aligned 4 KiB host chunk)."""
    import torch
    from vllm.config import (
        CacheConfig,
        KVTransferConfig,
        ModelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=head_size,
                             dtype=torch.float32)
    cc = CacheConfig(block_size=block_size, enable_prefix_caching=True)
    extra = {}
    if speculative is not None:
        extra["speculative_config"] = SpeculativeConfig(**speculative)
    if host_blocks is not None:
        extra["kv_transfer_config"] = KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": host_blocks * spec.page_size_bytes})
    vc = VllmConfig(
        model_config=ModelConfig(model=tiny_llama_dir(), skip_tokenizer_init=True,
                                 max_model_len=4096, dtype="float32"),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8,
                                         max_model_len=4096, enable_chunked_prefill=True,
                                         is_encoder_decoder=False),
        cache_config=cc, **extra)
    cc.num_gpu_blocks = num_blocks
    sched = Scheduler(vc, KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                                        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]),
                      StructuredOutputManager(vc), block_size=block_size, log_stats=False)
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    return sched, get_request_block_hasher(block_size, hash_fn)
