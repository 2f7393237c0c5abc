"""Model shapes for the profiler: named presets and local Hugging Face `config.json` files.

Torch-free on purpose: grid pruning and the CLI's input checks need the KV and weight
byte counts before (or without) importing torch. Only shapes matter for latency, so the
weights themselves are random (see `model.py`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}
"""Bytes per element of each supported dtype name (float64 is for reference tests only)."""


def dtype_name(dtype: object) -> str:
    """Canonical name of a dtype given as a name (`"bfloat16"`) or a `torch.dtype`."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not supported; use one of {sorted(DTYPE_BYTES)}")
    return name


@dataclass(frozen=True)
class MoeConfig:
    """A mixture-of-experts FFN (Mixtral, Qwen3-MoE, DeepSeek-V3): a router picks `top_k`
    of `num_experts` SwiGLU experts per token; shared experts see every token."""

    num_experts: int
    """Routed experts per MoE layer (HF `num_local_experts` / `num_experts` /
    `n_routed_experts`)."""
    top_k: int
    """Experts each token is routed to (HF `num_experts_per_tok`)."""
    expert_intermediate_size: int
    """One expert's SwiGLU inner width (HF `moe_intermediate_size`, Mixtral's
    `intermediate_size`)."""
    shared_experts: int = 0
    """Experts every token passes through, each `expert_intermediate_size` wide (HF
    `n_shared_experts`; 0 for Mixtral and Qwen3-MoE)."""
    dense_layers: int = 0
    """Leading layers with the dense MLP of `ModelConfig.intermediate_size` instead (HF
    `first_k_dense_replace`); counted in the weights, priced as MoE layers."""

    def __post_init__(self) -> None:
        for name in ("num_experts", "top_k", "expert_intermediate_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"moe {name}={v!r}; it must be an integer >= 1")
        if self.top_k > self.num_experts:
            raise ValueError(f"moe top_k={self.top_k} exceeds num_experts="
                             f"{self.num_experts}; a token picks distinct experts")
        if self.shared_experts < 0 or self.dense_layers < 0:
            raise ValueError(f"moe shared_experts={self.shared_experts}, dense_layers="
                             f"{self.dense_layers}; both must be >= 0")

    def ffn_params(self, hidden: int) -> int:
        """Parameters of one MoE layer's FFN: routed and shared experts and the router."""
        per_expert = 3 * hidden * self.expert_intermediate_size
        return (self.num_experts + self.shared_experts) * per_expert + hidden * self.num_experts


@dataclass(frozen=True)
class MlaConfig:
    """DeepSeek's multi-head latent attention: what the KV cache holds and the attention
    weights. The torch decoder does not run it (the profiler refuses such a model); the
    shapes give the KV bytes and the weights."""

    q_lora_rank: int
    """Query down-projection width (HF `q_lora_rank`)."""
    kv_lora_rank: int
    """The cached latent's width (HF `kv_lora_rank`)."""
    qk_nope_head_dim: int
    """Per-head query/key width without RoPE (HF `qk_nope_head_dim`)."""
    qk_rope_head_dim: int
    """Per-head RoPE width, its key part shared by all heads and cached (HF
    `qk_rope_head_dim`)."""
    v_head_dim: int
    """Per-head value width (HF `v_head_dim`)."""

    def attn_params(self, hidden: int, heads: int) -> int:
        """Attention weights of one layer (projections and the two latent norms)."""
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
        kv = (hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
              + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
        return q + kv + heads * self.v_head_dim * hidden

    @property
    def cached_width(self) -> int:
        """Values one token caches per layer: the latent and the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama-style decoder (RMSNorm, RoPE, GQA attention, SwiGLU MLP), or of a
    mixture-of-experts one (`moe`)."""

    name: str
    """Label written to the profile (`tiny`, `llama-3.1-8b`, or the config file's stem)."""
    n_layers: int
    """Decoder blocks (HF `num_hidden_layers`)."""
    hidden_size: int
    """Residual stream width (HF `hidden_size`)."""
    n_heads: int
    """Query heads per layer (HF `num_attention_heads`)."""
    n_kv_heads: int
    """Key/value heads per layer (HF `num_key_value_heads`); must divide `n_heads` (GQA)."""
    head_dim: int
    """Width of one head (HF `head_dim`, else `hidden_size // n_heads`); even, for RoPE."""
    intermediate_size: int
    """SwiGLU inner width (HF `intermediate_size`)."""
    vocab_size: int
    """Embedding / LM-head rows (HF `vocab_size`)."""
    max_position: int
    """Longest sequence (prior + new tokens) the RoPE table covers (HF
    `max_position_embeddings`)."""
    rope_theta: float = 10000.0
    """RoPE base frequency (HF `rope_theta`). Llama-3 `rope_scaling` is ignored: it changes
    the frequencies, not the cost."""
    rms_eps: float = 1e-5
    """RMSNorm epsilon (HF `rms_norm_eps`)."""
    tie_embeddings: bool = False
    """Whether the LM head reuses the embedding matrix (HF `tie_word_embeddings`)."""
    qkv_bias: bool = False
    """Whether the Q/K/V projections carry a bias (Qwen2 does)."""
    moe: MoeConfig | None = None
    """The mixture-of-experts FFN (None: the dense SwiGLU MLP)."""
    mla: MlaConfig | None = None
    """Multi-head latent attention (None: grouped-query attention)."""

    def __post_init__(self) -> None:
        for field_name in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim",
                           "intermediate_size", "vocab_size", "max_position"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"model {self.name!r}: {field_name}={value!r}; it must be an integer >= 1"
                )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model {self.name!r}: n_heads={self.n_heads} is not a multiple of "
                f"n_kv_heads={self.n_kv_heads}; grouped-query attention needs n_kv_heads to "
                f"divide n_heads"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"model {self.name!r}: head_dim={self.head_dim} is odd; RoPE rotates pairs, "
                f"so use an even head_dim"
            )
        if not self.rope_theta > 0 or not self.rms_eps > 0:
            raise ValueError(
                f"model {self.name!r}: rope_theta={self.rope_theta}, rms_eps={self.rms_eps}; "
                f"both must be > 0"
            )

    @property
    def q_size(self) -> int:
        """Width of the concatenated query heads."""
        return self.n_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the concatenated key (or value) heads."""
        return self.n_kv_heads * self.head_dim

    def n_params(self) -> int:
        """Parameter count (biases and norms included)."""
        attn = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * self.hidden_size
        if self.qkv_bias:
            attn += self.q_size + 2 * self.kv_size
        if self.mla is not None:
            attn = self.mla.attn_params(self.hidden_size, self.n_heads)
        mlp = 3 * self.hidden_size * self.intermediate_size
        norms = 2 * self.hidden_size  # two RMSNorm weights
        body = self.n_layers * (attn + mlp + norms)
        if self.moe is not None:
            moe_layers = self.n_layers - self.moe.dense_layers
            body += moe_layers * (self.moe.ffn_params(self.hidden_size) - mlp)
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else embed
        return body + embed + head + self.hidden_size  # + final norm

    def weights_bytes(self, dtype: object) -> int:
        """Parameter bytes at `dtype` (a name or a `torch.dtype`)."""
        return self.n_params() * DTYPE_BYTES[dtype_name(dtype)]

    def kv_bytes_per_token(self, dtype: object) -> int:
        """KV-cache bytes one token occupies: K and V, every layer, every KV head (with MLA:
        the latent and the shared RoPE key, every layer)."""
        width = self.mla.cached_width if self.mla is not None else 2 * self.kv_size
        return self.n_layers * width * DTYPE_BYTES[dtype_name(dtype)]

    def as_dict(self) -> dict:
        """The fields the profile JSON's `model` entry records (`moe` / `mla` only when
        set, so a dense model's entry is what it always was)."""
        d = asdict(self)
        for key in ("moe", "mla"):
            if d[key] is None:
                del d[key]
        return d


# `tiny` is sized for one CPU thread: the shipped default grid (chunks to 8192 over 16384
# tokens of prior context, 256 decodes over 16384-token caches) must profile in minutes on
# a loaded 2-core machine, and a 2048-token step should take tens of ms. head_dim 64 (not
# 32) because CPU SDPA runs about twice the FLOP/s at 64; GQA ratio 2 still exercises the
# grouped-head paths; vocab 8192 keeps the LM head from dwarfing a 128-wide body.
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        name="tiny", n_layers=2, hidden_size=128, n_heads=2, n_kv_heads=1, head_dim=64,
        intermediate_size=384, vocab_size=8192, max_position=32768, rope_theta=10000.0,
        tie_embeddings=True,
    ),
    "llama-3.1-8b": ModelConfig(
        name="llama-3.1-8b", n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8,
        head_dim=128, intermediate_size=14336, vocab_size=128256, max_position=131072,
        rope_theta=500000.0, rms_eps=1e-5,
    ),
    "qwen2.5-0.5b": ModelConfig(
        name="qwen2.5-0.5b", n_layers=24, hidden_size=896, n_heads=14, n_kv_heads=2,
        head_dim=64, intermediate_size=4864, vocab_size=151936, max_position=32768,
        rope_theta=1000000.0, rms_eps=1e-6, tie_embeddings=True, qkv_bias=True,
    ),
    # Mistral-7B-v0.3 (v0.1's 4096-token sliding window is gone from v0.2 on).
    "mistral-7b": ModelConfig(
        name="mistral-7b", n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8,
        head_dim=128, intermediate_size=14336, vocab_size=32768, max_position=32768,
        rope_theta=1000000.0, rms_eps=1e-5,
    ),
    # 70B-class shapes, from the models' published config.json (rope_scaling ignored).
    "llama-3.1-70b": ModelConfig(
        name="llama-3.1-70b", n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8,
        head_dim=128, intermediate_size=28672, vocab_size=128256, max_position=131072,
        rope_theta=500000.0, rms_eps=1e-5,
    ),
    "qwen2.5-72b": ModelConfig(
        name="qwen2.5-72b", n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8,
        head_dim=128, intermediate_size=29568, vocab_size=152064, max_position=32768,
        rope_theta=1000000.0, rms_eps=1e-6, qkv_bias=True,
    ),
    # Llama-3.1-70B's proportions at CPU size: the same 64 query / 8 KV heads (GQA 8, so
    # --tp 2, 4 and 8 shard it as they shard the 70B), MLP 3.5 x hidden, vocabulary ~16 x
    # hidden; head_dim 8 and 4 layers keep a whole-model step in milliseconds.
    "llama-3.1-70b-mini": ModelConfig(
        name="llama-3.1-70b-mini", n_layers=4, hidden_size=512, n_heads=64, n_kv_heads=8,
        head_dim=8, intermediate_size=1792, vocab_size=8192, max_position=32768,
        rope_theta=500000.0, rms_eps=1e-5,
    ),
    # Mixture-of-experts shapes, from the models' published config.json. A MoE preset's
    # `intermediate_size` is its dense MLP's (DeepSeek-V3's first layers; unused by the
    # others). Qwen3's per-head q/k norms (2 x head_dim weights a layer) are left out.
    "mixtral-8x7b": ModelConfig(
        name="mixtral-8x7b", n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8,
        head_dim=128, intermediate_size=14336, vocab_size=32000, max_position=32768,
        rope_theta=1000000.0, rms_eps=1e-5,
        moe=MoeConfig(num_experts=8, top_k=2, expert_intermediate_size=14336),
    ),
    "qwen3-30b-a3b": ModelConfig(
        name="qwen3-30b-a3b", n_layers=48, hidden_size=2048, n_heads=32, n_kv_heads=4,
        head_dim=128, intermediate_size=6144, vocab_size=151936, max_position=40960,
        rope_theta=1000000.0, rms_eps=1e-6,
        moe=MoeConfig(num_experts=128, top_k=8, expert_intermediate_size=768),
    ),
    # MLA: a token caches 512 + 64 values a layer, not K and V of 128 heads. The torch
    # decoder does not run MLA, so this preset gives KV bytes and weights, not a profile.
    # The multi-token-prediction module (14B) is not counted.
    "deepseek-v3": ModelConfig(
        name="deepseek-v3", n_layers=61, hidden_size=7168, n_heads=128, n_kv_heads=128,
        head_dim=192, intermediate_size=18432, vocab_size=129280, max_position=163840,
        rope_theta=10000.0, rms_eps=1e-6,
        moe=MoeConfig(num_experts=256, top_k=8, expert_intermediate_size=2048,
                      shared_experts=1, dense_layers=3),
        mla=MlaConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                      qk_rope_head_dim=64, v_head_dim=128),
    ),
    # `tiny`'s body with 8 experts of half its MLP width, top-2: the MoE terms (router,
    # tokens per expert, EP) measured on one CPU thread in seconds.
    "tiny-moe": ModelConfig(
        name="tiny-moe", n_layers=2, hidden_size=128, n_heads=2, n_kv_heads=1, head_dim=64,
        intermediate_size=384, vocab_size=8192, max_position=32768, rope_theta=10000.0,
        tie_embeddings=True,
        moe=MoeConfig(num_experts=8, top_k=2, expert_intermediate_size=192),
    ),
}


def check_runnable(cfg: ModelConfig) -> None:
    """ValueError naming --model when the torch decoder cannot run `cfg` (MLA)."""
    if cfg.mla is not None:
        raise ValueError(f"--model {cfg.name}: multi-head latent attention, which the torch "
                         f"decoder does not run; profile a GQA model (e.g. --model "
                         f"qwen3-30b-a3b or tiny-moe)")


def shard_moe(cfg: ModelConfig, tp: int, ep: int) -> ModelConfig:
    """`shard_config`, then a MoE model's experts: with `ep` 1, each expert's width / tp
    (tensor-parallel experts, as vLLM shards them by default); with `ep` == tp (vLLM's
    --enable-expert-parallel), whole experts, num_experts / ep on each device (what the
    profile's `moe.ep` records; the shapes keep `num_experts`, the router's width).
    ValueError naming --ep when it does not fit."""
    if ep < 1:
        raise ValueError(f"--ep {ep}: use 1 or more")
    if cfg.moe is None:
        if ep > 1:
            raise ValueError(f"--ep {ep}: model {cfg.name!r} has no experts; expert "
                             f"parallelism applies to a MoE model (e.g. --model tiny-moe)")
        return shard_config(cfg, tp)
    if ep > 1 and ep != tp:
        raise ValueError(f"--ep {ep} with --tp {tp}: expert parallelism spans the engine's "
                         f"tensor-parallel devices (vLLM --enable-expert-parallel); give "
                         f"--ep equal to --tp")
    if cfg.moe.num_experts % ep:
        raise ValueError(f"--ep {ep} does not divide model {cfg.name!r}'s "
                         f"num_experts={cfg.moe.num_experts}; use a degree that does")
    width = cfg.moe.expert_intermediate_size
    if ep == 1 and width % tp:
        raise ValueError(f"--tp {tp} does not divide model {cfg.name!r}'s "
                         f"expert_intermediate_size={width}; use a degree that does, or "
                         f"--ep {tp}")
    shard = shard_config(cfg, tp)
    if ep == 1:
        shard = replace(shard, moe=replace(cfg.moe, expert_intermediate_size=width // tp))
    return shard


def shard_config(cfg: ModelConfig, tp: int) -> ModelConfig:
    """One tensor-parallel shard's shapes (Megatron-style, as vLLM shards a Llama):
    query heads / tp, KV heads / tp (replicated, one per shard, when there are fewer KV
    heads than shards), intermediate size / tp, vocabulary / tp rounded up (the embedding
    and LM head are vocabulary-parallel). ValueError naming --tp when it does not divide."""
    if tp < 1:
        raise ValueError(f"--tp {tp}: use 1 or more")
    if tp == 1:
        return cfg
    bad = [f"{name}={v}" for name, v in (("n_heads", cfg.n_heads),
                                         ("intermediate_size", cfg.intermediate_size))
           if v % tp]
    if cfg.n_kv_heads >= tp and cfg.n_kv_heads % tp:
        bad.append(f"n_kv_heads={cfg.n_kv_heads}")
    if bad:
        raise ValueError(f"--tp {tp} does not divide model {cfg.name!r}'s {', '.join(bad)}; "
                         f"use a tensor-parallel degree that does")
    kv = cfg.n_kv_heads // tp if cfg.n_kv_heads >= tp else 1
    return replace(cfg, n_heads=cfg.n_heads // tp, n_kv_heads=kv,
                   intermediate_size=cfg.intermediate_size // tp,
                   vocab_size=-(-cfg.vocab_size // tp))


def preset_config(name: str) -> ModelConfig:
    """The preset called `name`; ValueError naming `--model` and the choices otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"--model {name!r} is not a preset; use one of {', '.join(PRESETS)} "
            f"or --hf-config PATH"
        ) from None


_HF_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size")


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a local Hugging Face `config.json` (never downloads). The model is named after
    the file's folder (`.../Llama-3.2-1B/config.json` -> `Llama-3.2-1B`)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"--hf-config {str(path)!r}: no such file; pass a local config.json "
                         f"(downloads are never attempted)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"--hf-config {str(path)!r} is not valid JSON ({exc}); pass the "
                         f"model's config.json") from None
    if not isinstance(raw, dict):
        raise ValueError(f"--hf-config {str(path)!r}: expected a JSON object at top level")
    missing = [key for key in _HF_REQUIRED if key not in raw]
    if missing:
        raise ValueError(f"--hf-config {str(path)!r} lacks {', '.join(missing)}; a Llama-style "
                         f"config.json has them (is this the right file?)")
    n_heads = raw["num_attention_heads"]
    try:
        return _config_from_hf(path, raw, n_heads)
    except (TypeError, ZeroDivisionError, ValueError) as exc:
        raise ValueError(f"--hf-config {str(path)!r}: {exc}") from None


def _moe_from_hf(raw: dict) -> MoeConfig | None:
    """The `moe` section of a HF config (Mixtral, Qwen2/3-MoE, DeepSeek-V2/3), or None."""
    experts = raw.get("num_local_experts") or raw.get("num_experts") or raw.get(
        "n_routed_experts")
    if not experts:
        return None
    return MoeConfig(
        num_experts=experts, top_k=raw.get("num_experts_per_tok", 2),
        expert_intermediate_size=raw.get("moe_intermediate_size") or raw["intermediate_size"],
        shared_experts=raw.get("n_shared_experts") or 0,
        dense_layers=raw.get("first_k_dense_replace") or 0,
    )


def _mla_from_hf(raw: dict) -> MlaConfig | None:
    if not raw.get("kv_lora_rank"):
        return None
    return MlaConfig(q_lora_rank=raw.get("q_lora_rank") or raw["hidden_size"],
                     kv_lora_rank=raw["kv_lora_rank"],
                     qk_nope_head_dim=raw["qk_nope_head_dim"],
                     qk_rope_head_dim=raw["qk_rope_head_dim"], v_head_dim=raw["v_head_dim"])


def _config_from_hf(path: Path, raw: dict, n_heads: int) -> ModelConfig:
    mla = _mla_from_hf(raw)
    head_dim = raw.get("head_dim") or raw["hidden_size"] // n_heads
    if mla is not None:
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    return ModelConfig(
        name=path.parent.name or path.stem,
        n_layers=raw["num_hidden_layers"],
        hidden_size=raw["hidden_size"],
        n_heads=n_heads,
        n_kv_heads=raw.get("num_key_value_heads") or n_heads,  # absent = plain MHA
        head_dim=head_dim,
        intermediate_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        max_position=raw.get("max_position_embeddings", 4096),
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_eps=float(raw.get("rms_norm_eps", 1e-5)),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=bool(raw.get("attention_bias", raw.get("model_type") == "qwen2")),
        moe=_moe_from_hf(raw),
        mla=mla,
    )
