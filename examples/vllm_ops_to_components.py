"""Convert a per-op profile in the style of a serving engine's layer-wise profiler into the
component files `sim profile import` reads.

The input (a made-up example: examples/data/vllm_style_ops.csv) has one row per timed op
of one decoder layer, or of the once-per-step parts, with the step's composition beside
it and its time in microseconds:

    op, num_tokens, chunk_len, prior_len, num_decodes, decode_ctx_mean, decode_ctx_max,
    num_logits, cuda_time_us

Ops are mapped to components (DENSE, ATTENTION, ONCE below) and summed per key:

    python examples/vllm_ops_to_components.py examples/data/vllm_style_ops.csv out/ops
    sim profile import out/ops --out out/profiles/imported.csv --model llama-3.1-8b \\
        --device-name "example GPU" --device-memory-gib 80
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

DENSE = {"input_layernorm", "qkv_proj", "rotary_emb", "o_proj", "post_attention_layernorm",
         "gate_up_proj", "act_fn", "down_proj", "kv_cache_write"}
"""Per-layer ops whose cost depends on the step's token count alone."""
ATTENTION = {"attn_prefill": "prefill_attn", "attn_decode": "decode_attn"}
ONCE = {"embed_tokens": "embed", "norm": "head", "lm_head": "head", "sampler": "head",
        "step_other": "fixed"}
KEYS = {"dense": ("num_tokens",), "embed": ("num_tokens",),
        "prefill_attn": ("chunk_len", "prior_len"),
        "decode_attn": ("num_decodes", "decode_ctx_mean", "decode_ctx_max"),
        "head": ("num_logits",), "fixed": ()}
HEADERS = {"dense": ("tokens",), "embed": ("tokens",),
           "prefill_attn": ("chunk_len", "prior_len"),
           "decode_attn": ("decode_count", "kv_len", "kv_max"), "head": ("logits",),
           "fixed": ()}


def convert(src: Path, out: Path) -> dict[str, int]:
    """Write one CSV per component into `out`; returns rows per component."""
    sums: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    with src.open(newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            op = row["op"]
            comp = "dense" if op in DENSE else ATTENTION.get(op) or ONCE.get(op)
            if comp is None:
                raise SystemExit(f"{src} line {line}, column op: unknown op {op!r}")
            key = tuple(row[k] for k in KEYS[comp])
            sums[comp][key] += float(row["cuda_time_us"])
    out.mkdir(parents=True, exist_ok=True)
    for comp, by_key in sums.items():
        with (out / f"{comp}.csv").open("w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow((*HEADERS[comp], "time_us"))
            for key, t in sorted(by_key.items(), key=lambda kv: [float(x) for x in kv[0]]):
                w.writerow((*key, f"{t:.3f}"))
    return {c: len(v) for c, v in sums.items()}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: vllm_ops_to_components.py OPS.csv OUT_DIR")
    counts = convert(Path(sys.argv[1]), Path(sys.argv[2]))
    print(", ".join(f"{c}: {n} rows" for c, n in counts.items()))
