"""The KV cache an engine's configuration asks for: plain, prefix-caching, or
prefix-caching with a CPU tier under it (`kv_offload`)."""

from __future__ import annotations

from chunksim.core.kv_cache import KVCache, KVConfig, PrefixKVCache
from chunksim.core.kv_offload import OffloadKVCache


def make_kv_cache(config: KVConfig) -> KVCache:
    """The plain or the prefix-caching cache (with a CPU tier under it), as configured."""
    if config.host_blocks:
        return OffloadKVCache(config)
    return PrefixKVCache(config) if config.prefix_caching else KVCache(config)
