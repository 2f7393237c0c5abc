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
class ModelConfig:
    """Shape of a Llama-style decoder (RMSNorm, RoPE, GQA attention, SwiGLU MLP)."""

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
        mlp = 3 * self.hidden_size * self.intermediate_size
        per_layer = attn + mlp + 2 * self.hidden_size  # two RMSNorm weights
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else embed
        return self.n_layers * per_layer + embed + head + self.hidden_size  # + final norm

    def weights_bytes(self, dtype: object) -> int:
        """Parameter bytes at `dtype` (a name or a `torch.dtype`)."""
        return self.n_params() * DTYPE_BYTES[dtype_name(dtype)]

    def kv_bytes_per_token(self, dtype: object) -> int:
        """KV-cache bytes one token occupies: K and V, every layer, every KV head."""
        return 2 * self.n_layers * self.kv_size * DTYPE_BYTES[dtype_name(dtype)]

    def as_dict(self) -> dict:
        """The fields the profile JSON's `model` entry records."""
        return asdict(self)


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
}


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


def _config_from_hf(path: Path, raw: dict, n_heads: int) -> ModelConfig:
    head_dim = raw.get("head_dim") or raw["hidden_size"] // n_heads
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
    )
