"""Build the bundled MoE component profile `qwen3-30b-a3b-h200-ep2` from NVIDIA
AIConfigurator's kernel database (`pip install aiconfigurator-core`), vLLM on H200,
TP 2 with expert parallelism 2 (`vllm serve Qwen/Qwen3-30B-A3B -tp 2
--enable-expert-parallel`).

    python examples/moe_profile_aiconfigurator.py [--out chunksim/data/profiles/NAME.csv]

The database prices each op of a forward pass (ms, summed over the model's 48 layers)
at a context shape (T tokens after a prefix) or a generation shape (D decodes at a
context). Its ops become chunksim's components, per layer:

    dense(T)           add_norm_1 + qkv_gemm + proj_gemm + add_norm_2 + router_gemm
    expert(n)          back-solved from the `moe` op (below)
    alltoall(T)        moe_pre_dispatch + moe_post_dispatch
    prefill_attn(c, p) context attention of c tokens after p
    decode_attn(D, kv) generation attention of D decodes at kv + 1 positions
    embed(T)           embedding (+ its all-reduce); head(n): logits_gemm at n rows

The database times the whole MoE op of a T-token step under its own token distribution
(a power law, alpha 1.2). chunksim prices routed experts by tokens per expert
(`chunksim.latency.moe`): under uniform routing a step of T tokens costs
(E / ep) x active(T) x expert(n(T)), with active(T) = 1 - (1 - k / E)^T and
n(T) = T k / (E active(T)). So `expert` is written at n(T), for every T of the token
grid, as moe(T) x ep / (E active(T)): uniform routing then reproduces the database's MoE
figure at each of those T exactly, and the database's own skew is inside `expert`
(`--expert-skew` adds skew on top of it). Nothing is measured by chunksim: the JSON says
so (`device: modelled`, `source`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from chunksim.decoder.config import PRESETS, shard_moe
from chunksim.latency.component_table import COLUMNS
from chunksim.latency.moe import Routing, expert_from_layer
from chunksim.profiler.component_write import csv_bytes

MODEL, HF_ID, SYSTEM, BACKEND, TP, EP = "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "h200_sxm", \
    "vllm", 2, 2
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
CHUNKS = (1, 16, 64, 256, 1024, 2048, 4096, 8192, 16384)
PRIORS = (0, 512, 2048, 8192, 16384)
DECODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTEXTS = (16, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
LOGITS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DENSE_OPS = ("add_norm_1", "qkv_gemm", "proj_gemm", "add_norm_2", "router_gemm")
FRAMEWORK_S = 1.0e-3
"""Per-step framework time (scheduling, input preparation, sampling): not in a kernel sum;
about 1 ms a step for Llama-3.1-8B under vLLM on H200 (docs/profile-format.md). A default,
not measured for this model: override it with `sim run --step-overhead-ms`."""


class Database:
    def __init__(self) -> None:
        from aiconfigurator_core.sdk.engine import EngineHandle

        self.h = EngineHandle.compile(HF_ID, SYSTEM, BACKEND, tp_size=TP, moe_ep_size=EP)
        shared, ctx_att, _ = self.h.mixed_step_breakdown_per_op(16, 1, 16, 2, 0)
        self.n_ctx = len(shared) + len(ctx_att)
        self.n_gen = len(self.h.decode_step_per_op(1, 16, 2))
        self.sources: dict[str, set[str]] = {}

    def _ops(self, raw, component: str, names) -> float:
        total = 0.0
        for name, ms, _, src in raw:
            bare = name.removeprefix("context_").removeprefix("generation_")
            if bare in names:
                total += ms / 1e3
                self.sources.setdefault(component, set()).add(src)
        return total

    def context(self, component: str, names, tokens: int, prior: int = 0) -> float:
        raw = self.h.evaluate_context_ops(list(range(self.n_ctx)), batch_size=1, s=tokens,
                                          prefix=prior)
        return self._ops(raw, component, names)

    def generation(self, component: str, names, decodes: int, positions: int) -> float:
        raw = self.h.evaluate_generation_ops(list(range(self.n_gen)), batch_size=decodes,
                                             s=positions)
        return self._ops(raw, component, names)


def row(component: str, seconds: float, **keys) -> dict:
    r = dict.fromkeys(COLUMNS[1:8], 0)
    r.update(keys)
    return {"component": component, **r, "median_s": seconds, "p10_s": seconds,
            "p90_s": seconds, "mean_s": seconds, "repeats": 0}


def build(db: Database) -> list[dict]:
    cfg = PRESETS[MODEL]
    layers = cfg.n_layers
    routing = Routing(cfg.moe.num_experts, cfg.moe.top_k, EP)
    rows = []
    for t in TOKENS:
        rows.append(row("dense", db.context("dense", DENSE_OPS, t) / layers, tokens=t))
        rows.append(row("embed", db.context("embed", ("embedding", "embedding_ar"), t),
                        tokens=t))
        rows.append(row("alltoall", db.context("alltoall", ("moe_pre_dispatch",
                                                            "moe_post_dispatch"), t) / layers,
                        tokens=t))
        n, sec = expert_from_layer(t, db.context("expert", ("moe",), t) / layers, routing)
        rows.append(row("expert", sec, tokens=round(n, 9)))
    for n in LOGITS:
        head = db.generation("head", ("logits_gemm",), n, 2) if n else 0.0
        rows.append(row("head", head, logits=n))
    for c in CHUNKS:
        for p in PRIORS:
            att = db.context("prefill_attn", ("attention",), c, p) / layers
            rows.append(row("prefill_attn", att, chunk_len=c, prior_len=p))
    for d in DECODES:
        for kv in CONTEXTS:
            att = db.generation("decode_attn", ("attention",), d, kv + 1) / layers
            rows.append(row("decode_attn", att, decode_count=d, kv_len=kv, kv_max=kv))
    rows.append(row("fixed", 0.0))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path,
                    default=Path("chunksim/data/profiles/qwen3-30b-a3b-h200-ep2.csv"))
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    with contextlib.redirect_stdout(io.StringIO()):
        db = Database()
        rows = build(db)
    import yaml
    from aiconfigurator_core.sdk import perf_database

    root = Path(__import__("aiconfigurator_core").__file__).parent
    gpu = yaml.safe_load((root / "systems" / f"{SYSTEM}.yaml").read_text())["gpu"]
    cfg = PRESETS[MODEL]
    shard = shard_moe(cfg, TP, EP)
    version = metadata.version("aiconfigurator-core")
    data_version = perf_database.resolve_query_version(SYSTEM, BACKEND, "current")
    data = csv_bytes(rows)
    meta = {
        "format": "chunksim-components/1",
        "content_sha256": hashlib.sha256(data).hexdigest(),
        "label": (f"modelled from aiconfigurator-core {version} ({BACKEND} {data_version} "
                  f"data on {SYSTEM}); kernel times plus a default framework time, not "
                  f"measured by chunksim"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": "modelled",
        "device_name": f"{SYSTEM} ({BACKEND} {data_version}, aiconfigurator database)",
        "device_memory_bytes": int(gpu["mem_capacity"]),
        "dtype": "bfloat16",
        "threads": None,
        "model": cfg.as_dict(),
        "weights_bytes": cfg.weights_bytes("bfloat16") // TP,
        "kv_bytes_per_token": shard.kv_bytes_per_token("bfloat16"),
        "step_overhead_s": FRAMEWORK_S,
        "framework": {"step_s": FRAMEWORK_S, "source": (
            "chunksim default: a serving engine's per-step time outside its kernels, about "
            "1 ms a step for Llama-3.1-8B under vLLM on H200; not measured for this model")},
        "components": {
            "layers": cfg.n_layers, "timed_layers": None, "in_sequence_scale": 1.0,
            "tp": TP, "link": None,
            "moe": {"num_experts": cfg.moe.num_experts, "top_k": cfg.moe.top_k, "ep": EP,
                    "experts_per_device": cfg.moe.num_experts // EP, "skew": 0.0,
                    "alltoall": "the database's moe_pre_dispatch + moe_post_dispatch",
                    "expert": ("back-solved from the database's moe op (power-law token "
                               "distribution, alpha 1.2) so that uniform routing reproduces "
                               "it at every grid token count")},
            "mixed_attention": "sum-of-parts", "decode_spread": "mean only"},
        "calibration": None,
        "source": {"kind": "aiconfigurator", "package": "aiconfigurator-core",
                   "package_version": version, "system": SYSTEM, "backend": BACKEND,
                   "data_version": data_version, "model": HF_ID, "tp": TP, "ep": EP,
                   "measured": {k: sorted(v) for k, v in sorted(db.sources.items())},
                   "builder": "examples/moe_profile_aiconfigurator.py"},
        "points": len(rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    args.out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {args.out} ({len(rows)} points) and {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
