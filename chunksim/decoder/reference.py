"""Naive reference forward: one whole sequence recomputed from scratch, no KV cache.

Shares only the weights with `LlamaModel`; RMSNorm, RoPE (angles recomputed here), the
explicit causal mask, softmax attention with repeated KV heads and the MLP are written out
again, so a test comparing `forward_step` against this checks the cache writes, the packing,
the masks and the GQA folding, not just the same code twice. Slow by design.
"""

from __future__ import annotations

import torch

from chunksim.decoder.model import LlamaModel


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """`x` `[H, L, D]` rotated for positions 0..L-1."""
    seq_len, dim = x.shape[1], x.shape[2]
    inv = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    ang = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x), ang.sin().to(x)
    x1, x2 = x[..., : dim // 2], x[..., dim // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@torch.no_grad()
def reference_logits(model: LlamaModel, token_ids: torch.Tensor) -> torch.Tensor:
    """Logits `[L, vocab]` at every position of one sequence `token_ids` `[L]`."""
    cfg = model.cfg
    seq_len = token_ids.shape[0]
    x = model.embed.weight[token_ids]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device).tril()
    group = cfg.n_heads // cfg.n_kv_heads
    for blk in model.layers:
        h = _rms(x, blk.attn_norm.weight, cfg.rms_eps)
        q = h @ blk.wq.weight.T
        k = h @ blk.wk.weight.T
        v = h @ blk.wv.weight.T
        if cfg.qkv_bias:
            q, k, v = q + blk.wq.bias, k + blk.wk.bias, v + blk.wv.bias
        q = _rope(q.view(seq_len, cfg.n_heads, cfg.head_dim).transpose(0, 1), cfg.rope_theta)
        k = _rope(k.view(seq_len, cfg.n_kv_heads, cfg.head_dim).transpose(0, 1), cfg.rope_theta)
        v = v.view(seq_len, cfg.n_kv_heads, cfg.head_dim).transpose(0, 1)
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        scores = (q @ k.transpose(1, 2)) / cfg.head_dim**0.5
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v  # [H, L, D]
        x = x + attn.transpose(0, 1).reshape(seq_len, cfg.q_size) @ blk.wo.weight.T
        h = _rms(x, blk.mlp_norm.weight, cfg.rms_eps)
        gate = h @ blk.gate.weight.T
        x = x + ((gate * torch.sigmoid(gate)) * (h @ blk.up.weight.T)) @ blk.down.weight.T
    return _rms(x, model.norm.weight, cfg.rms_eps) @ model.head_weight().T
