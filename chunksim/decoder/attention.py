"""Attention of one layer over a packed mixed batch, reading and writing the KV pools.

Per prefill segment: one SDPA call, causal over the segment's cached prefix plus its new
tokens (on CPU, after a cached prefix: two flash calls merged, `prefix_attention`). Per
decode group: one batched SDPA call over a `[B, H_kv, L, D]` view of adjacent slots (a
gather copy when the slots are scattered), padded and masked when lengths differ. Decode
GQA folds the query heads that share a KV head into the query-length axis
(`[B, H_kv, group, D]`), so no K/V head is ever repeated. FlexAttention is not used: on
CPU it needs torch.compile, whose compile time per block mask would dominate a profile.

On CUDA, SDPA may use only the kernels in `SDPA_BACKENDS` (see there why not cuDNN).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from chunksim.decoder.kv import KVPool
from chunksim.decoder.step import PreparedStep, cpu_flash

SDPA_BACKENDS: tuple[str, ...] = ("flash", "efficient", "math")
"""SDPA kernels the model may run on CUDA (torch's `SDPBackend` names, lower case), as the
profile's `sdpa_backends` records. Not cuDNN: torch >= 2.9 prefers it on sm90/sm100 once
its bundled cuDNN is >= 9.15 (torch 2.11 on an H200), and cuDNN SDPA builds an execution
plan for every new shape. A profiler point's warm-up pays that once and its timed repeats
never see it; a serving loop meets a new KV length every step and pays it every step
(what it cost on an H200: docs/results/h200.md).
Serving engines' attention kernels (FlashAttention, FlashInfer) build nothing per shape."""


@contextlib.contextmanager
def sdpa_kernels(backends: tuple[str, ...] | None) -> Iterator[None]:
    """SDPA restricted to `backends` for the block (None: torch's own choice)."""
    if backends is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, _SDPA_NAMES[b]) for b in backends]):
        yield


_SDPA_NAMES = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
               "math": "MATH", "cudnn": "CUDNN_ATTENTION"}


def write_kv(layer: int, k: torch.Tensor, v: torch.Tensor, step: PreparedStep,
             pools: list[KVPool]) -> None:
    """Store the step's new `[T, H_kv, D]` keys/values at their (slot, position)."""
    for w in step.writes:
        pool = pools[w.pool]
        pool.k[layer][w.slot_idx, :, w.pos_idx] = k[w.rows]
        pool.v[layer][w.slot_idx, :, w.pos_idx] = v[w.rows]


def prefix_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cached: int) -> torch.Tensor:
    """`[1, H, n, D]` attention of n new tokens over `[1, H_kv, cached + n, D]` keys, new
    token i seeing keys 0 .. cached + i (CPU). Two flash calls, the cached keys unmasked and
    the new ones causal, merged by their log-sum-exp as split-KV attention and vLLM's
    merge_attn_states do. What a serving engine's kernel does for a chunk after its prefix;
    the one masked SDPA call it replaces scores all n x (cached + n) pairs and reads an
    n x L mask (1.3-3.3x slower per layer on this CPU over two timing runs, 512-8192
    new tokens)."""
    flash = cpu_flash()
    n_heads, n_kv, n, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    group = n_heads // n_kv
    # cached part: the query heads of a KV head folded into the query axis (rows are
    # independent without a mask), so the cache is read as it is, never repeated
    qf = q.reshape(1, n_kv, group * n, d)
    o_old, lse_old = flash(qf, k[:, :, :cached], v[:, :, :cached], 0.0, False)
    o_old, lse_old = o_old.reshape(1, n_heads, n, d), lse_old.reshape(1, n_heads, n)
    k_new, v_new = k[:, :, cached:], v[:, :, cached:]
    if group > 1:  # causal rows are not independent: repeat the n new keys instead
        k_new, v_new = k_new.repeat_interleave(group, 1), v_new.repeat_interleave(group, 1)
    o_new, lse_new = flash(q, k_new, v_new, 0.0, True)
    # softmax over both parts: the cached part's share is sigmoid(lse_old - lse_new)
    share = torch.sigmoid(lse_old - lse_new).unsqueeze(-1).to(o_new.dtype)
    return torch.lerp(o_new, o_old, share)


def attend(layer: int, q: torch.Tensor, step: PreparedStep, pools: list[KVPool]) -> torch.Tensor:
    """Attention output `[T, H, D]` for packed queries `q` `[T, H, D]`; the new K/V must
    already be written (`write_kv`)."""
    out = torch.empty_like(q)
    n_heads, head_dim = q.shape[1], q.shape[2]
    for seg in step.prefills:
        pool = pools[seg.pool]
        qs = q[seg.rows].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        ks = pool.k[layer][seg.slot, :, : seg.kv_end].unsqueeze(0)  # [1, H_kv, L, D]
        vs = pool.v[layer][seg.slot, :, : seg.kv_end].unsqueeze(0)
        group = n_heads // ks.shape[1]
        if step.cuda_kernels and group > 1:
            # Repeat heads on CUDA: enable_gqa is not accepted by every fused kernel there,
            # and a fallback to the math kernel would materialise n x L scores per head.
            ks, vs = ks.repeat_interleave(group, 1), vs.repeat_interleave(group, 1)
            gqa = False
        else:
            gqa = group > 1
        if seg.mask is None and seg.cached > 0:
            o = prefix_attention(qs, ks, vs, seg.cached)
        else:
            o = F.scaled_dot_product_attention(
                qs, ks, vs, attn_mask=seg.mask, is_causal=seg.mask is None, enable_gqa=gqa
            )
        out[seg.rows] = o[0].transpose(0, 1)
    for g in step.decode_groups:
        pool = pools[g.pool]
        kd = pool.k[layer][:, :, : g.kv_end]
        vd = pool.v[layer][:, :, : g.kv_end]
        if isinstance(g.slots, slice):
            kd, vd = kd[g.slots], vd[g.slots]  # adjacent slots: a view, no copy
        else:
            kd, vd = kd.index_select(0, g.slots), vd.index_select(0, g.slots)
        n_kv = kd.shape[1]
        qd = q[g.rows].reshape(-1, n_kv, n_heads // n_kv, head_dim)  # heads of a KV head
        o = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=g.mask)
        out[g.rows] = o.reshape(-1, n_heads, head_dim)
    return out
