"""A Llama-style decoder with random weights: RMSNorm, RoPE, GQA attention, SwiGLU MLP
(or a mixture of SwiGLU experts, `moe.py`).

Latency depends on shapes, not on trained values, so weights are seeded random and no
checkpoint is ever downloaded. The model is built on the meta device and materialised
straight on the target device and dtype (an 8B model never exists in fp32 on the CPU).

`forward_step` is the one entry point: a packed mixed batch (see `step.py`) in, logits for
the rows that need them out, K/V of the new tokens written into the pools. Linear layers
run once over all packed rows; only attention is per sequence (see `attention.py`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from chunksim.decoder.attention import SDPA_BACKENDS, attend, sdpa_kernels, write_kv
from chunksim.decoder.config import ModelConfig, check_runnable, load_hf_config, preset_config
from chunksim.decoder.kv import KVPool
from chunksim.decoder.moe import MoeFFN
from chunksim.decoder.step import PreparedStep

__all__ = ["ModelConfig", "LlamaModel", "build_model", "load_hf_config", "preset_config"]

INIT_STD = 0.02
"""Std of the random weights (GPT-2/Llama init scale keeps activations O(1))."""


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 like HF Llama: bf16 sums of squares lose too many bits.
        xf = x.float() if x.element_size() < 4 else x
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `[T, heads, D]` by per-row angles (`cos`/`sin` `[T, 1, D/2]`), HF half-split."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.wq = nn.Linear(cfg.hidden_size, cfg.q_size, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.hidden_size, cfg.kv_size, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.hidden_size, cfg.kv_size, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.q_size, cfg.hidden_size, bias=False)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.moe = MoeFFN(cfg.hidden_size, cfg.moe) if cfg.moe is not None else None
        if self.moe is None:
            self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
            self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
            self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, layer: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                step: PreparedStep, pools: list[KVPool]) -> torch.Tensor:
        q = self.dense_in(layer, x, cos, sin, step, pools)
        return self.dense_out(x, attend(layer, q, step, pools))

    def dense_in(self, layer: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 step: PreparedStep, pools: list[KVPool]) -> torch.Tensor:
        """The layer's work before attention: norm, Q/K/V, RoPE, the KV write; returns q."""
        cfg = self.cfg
        h = self.attn_norm(x)
        q = apply_rope(self.wq(h).view(-1, cfg.n_heads, cfg.head_dim), cos, sin)
        k = apply_rope(self.wk(h).view(-1, cfg.n_kv_heads, cfg.head_dim), cos, sin)
        v = self.wv(h).view(-1, cfg.n_kv_heads, cfg.head_dim)
        write_kv(layer, k, v, step, pools)
        return q

    def dense_out(self, x: torch.Tensor, attn: torch.Tensor,
                  routed: bool = True) -> torch.Tensor:
        """The layer's work after attention (`attn` `[T, H, D]`): output projection,
        residual, norm, MLP (of a MoE layer: router, shared experts and, unless `routed`
        is False, the routed experts)."""
        x = x + self.wo(attn.view(-1, self.cfg.q_size))
        h = self.mlp_norm(x)
        if self.moe is not None:
            return x + self.moe(h, routed)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LlamaModel(nn.Module):
    """The decoder. Build it with `build_model`, not directly (weights start uninitialised)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_runnable(cfg)
        self.cfg = cfg
        self.sdpa_backends: tuple[str, ...] | None = SDPA_BACKENDS
        """SDPA kernels allowed in steps with CUDA kernels (None: torch's own choice;
        attention.SDPA_BACKENDS says why not cuDNN)."""
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(
            cfg.hidden_size, cfg.vocab_size, bias=False)
        half = cfg.head_dim // 2
        self.register_buffer("rope_cos", torch.empty(cfg.max_position, half), persistent=False)
        self.register_buffer("rope_sin", torch.empty(cfg.max_position, half), persistent=False)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Seeded random weights on the parameters' own device; RoPE tables in fp32."""
        device = self.embed.weight.device
        gen = torch.Generator(device=device).manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, INIT_STD, generator=gen)
        cfg = self.cfg
        inv_freq = 1.0 / cfg.rope_theta ** (
            torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float64) / cfg.head_dim)
        angles = torch.arange(cfg.max_position, device=device, dtype=torch.float64)[:, None]
        angles = angles * inv_freq[None, :]
        # fp32 tables (fp64 for fp64 reference tests, where fp32 angles would show).
        table_dtype = torch.float64 if self.embed.weight.dtype == torch.float64 else torch.float32
        self.rope_cos = angles.cos().to(table_dtype)
        self.rope_sin = angles.sin().to(table_dtype)

    def head_weight(self) -> torch.Tensor:
        """The LM-head matrix `[vocab, hidden]` (the embedding when tied)."""
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def forward_step(self, token_ids: torch.Tensor, step: PreparedStep,
                     pools: KVPool | list[KVPool]) -> torch.Tensor:
        """Run one packed step: `token_ids` `[T]` in `step`'s row order; returns logits
        `[n_logits, vocab]` (rows in batch order of the sequences with `needs_logits`) and
        writes the new tokens' K/V into `pools`. Call under `torch.inference_mode()`."""
        if token_ids.shape != (step.batch.total_tokens,):
            raise ValueError(f"token_ids has shape {tuple(token_ids.shape)}; the step packs "
                             f"{step.batch.total_tokens} tokens, so pass a 1-D tensor of that "
                             f"length")
        pools = [pools] if isinstance(pools, KVPool) else list(pools)
        x, cos, sin = self.embed_step(token_ids, step)
        # one context per step, not per layer: entering it has a host cost and the step
        # may be launch-bound (an eager forward on a GPU)
        with sdpa_kernels(self.sdpa_backends if step.cuda_kernels else None):
            for i, block in enumerate(self.layers):
                x = block(i, x, cos, sin, step, pools)
        return self.head_step(x, step)

    def embed_step(self, token_ids: torch.Tensor, step: PreparedStep
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Once per step, before the layers: embeddings `[T, hidden]` and the rows' RoPE
        cos / sin `[T, 1, D/2]`."""
        x = self.embed(token_ids)
        dtype = x.dtype
        cos = self.rope_cos[step.positions].to(dtype)[:, None, :]
        sin = self.rope_sin[step.positions].to(dtype)[:, None, :]
        return x, cos, sin

    def head_step(self, x: torch.Tensor, step: PreparedStep) -> torch.Tensor:
        """Once per step, after the layers: final norm and LM head, only where logits are
        needed (a chunk's last token, each decode)."""
        h = self.norm(x.index_select(0, step.logits_rows))
        return F.linear(h, self.head_weight())


def build_model(cfg: ModelConfig, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32, seed: int = 0) -> LlamaModel:
    """A seeded random `LlamaModel` materialised directly on `device` in `dtype`, eval mode,
    no gradients."""
    with torch.device("meta"):
        model = LlamaModel(cfg).to(dtype)  # free on meta: shapes only
    model = model.to_empty(device=device)
    model.init_weights(seed)  # also rebuilds the RoPE buffers in fp32
    model.eval().requires_grad_(False)
    return model
