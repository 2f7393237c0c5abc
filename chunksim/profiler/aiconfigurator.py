"""`sim profile import --from aiconfigurator`: a component profile from NVIDIA
AIConfigurator's database of measured serving-engine kernels (`aiconfigurator-core`, the
optional extra `chunksim[aic]`). Torch-free.

The database prices a model's ops (GEMMs, attention, norms, all-reduces, ...) for an
engine (`vllm`, `sglang`, `trtllm`) on a system (`h200_sxm`, ...), each value tagged as
measured on that GPU (`silicon`), modelled from formulas (`empirical`) or both (`mixed`).
Its ops are evaluated here at chunksim's grid shapes through the package's API
(`EngineHandle.compile`, `evaluate_context_ops`, `evaluate_generation_ops`; none of its data
files is copied) and summed into chunksim's components:

    dense(T)              the per-layer ops but attention and all-reduce, at T tokens
    prefill_attn(c, p)    context attention of one chunk of c tokens after p cached ones
    decode_attn(D, kv)    generation attention of D decodes, each attending kv + 1 positions
    allreduce(T)          the per-layer all-reduces (tensor parallel)
    embed(T)              the embedding (and its all-reduce)
    head(n)               the LM-head GEMM at n logits (0 at 0 logits)
    fixed                 0: the database's ops are the whole forward pass

and, for a mixture-of-experts model (every one the database and chunksim's config reader
both cover, e.g. Qwen/Qwen3-30B-A3B; `--ep` as vLLM's `--enable-expert-parallel`):

    expert(n)             one routed expert's FFN on n tokens, back-solved from the
                          database's `moe` op (below)
    alltoall(T)           the MoE dispatch and combine (`moe_pre_dispatch` +
                          `moe_post_dispatch`)

Shared experts and the router are per-token GEMMs: they stay in `dense`. The database
times a whole MoE op at T tokens under its own token distribution (a power law).
chunksim prices routed experts by tokens per expert (`chunksim.latency.moe`): under
uniform routing a step of T tokens costs (E / ep) x active(T) x expert(n(T)), with
active(T) = 1 - (1 - k / E)^T and n(T) = T k / (E active(T)). So `expert` is written at
n(T), for every T of the token grid, as moe(T) x ep / (E active(T))
(`latency.moe.expert_from_layer`): uniform routing then gives back the database's MoE
figure at each of those T exactly, with the database's skew inside `expert`
(`sim run --expert-skew` adds skew on top of it).

Per-layer ops are summed over the model's layers by the database; they are divided by the
layer count here, so that the composition multiplies back exactly. What the database lacks
is recorded, not invented: it times prefill and decode attention apart (a mixed step's
attention is the sum of its parts), decodes at one context (no spread: decodes are priced
by their mean context), and neither rotary embedding (inside its attention op), a final
norm nor a sampler. Per-step framework time (scheduling, input preparation, sampling) is
not in a kernel sum: the profile carries `FRAMEWORK_DEFAULT_S` with its source unless
`--framework-ms` gives a measured figure; the simulator adds it to every step.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from chunksim.decoder.config import ModelConfig, load_hf_config, shard_moe
from chunksim.latency.component_table import COLUMNS
from chunksim.latency.moe import Routing, expert_from_layer

PACKAGE = "aiconfigurator-core"
PINNED = "0.12.0"
BACKENDS = ("vllm", "sglang", "trtllm")
FRAMEWORK_DEFAULT_S = 1.0e-3
"""Per-step framework time when none is given: the gap between a serving engine's step
wall time and its kernel sum, about 1 ms a step for Llama-3.1-8B under vLLM on H200 in
per-layer measurements against this database (docs/profile-format.md). A default, not a
measurement: override it with `--framework-ms` (import) or `--step-overhead-ms` (run)."""
FRAMEWORK_SOURCE = ("chunksim default: a serving engine's per-step time outside its "
                    "kernels (scheduling, input preparation, sampling), about 1 ms a step "
                    "for Llama-3.1-8B under vLLM on H200; not measured for this profile")

TOKENS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
          3072, 4096, 6144, 8192, 12288, 16384)
CHUNKS = (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PRIORS = (0, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
DECODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CONTEXTS = (1, 16, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131071)
LOGITS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
"""The grid each component is evaluated on (contexts cut at the model's max position)."""

_ONCE = ("embedding", "embedding_ar", "logits_gemm", "p2p")
"""Ops the database counts once per step (every other op is per layer)."""


def _need_package():
    try:
        import aiconfigurator_core  # noqa: F401
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError:
        raise ValueError(f"sim profile import --from aiconfigurator needs the optional extra: "
                         f"pip install 'chunksim[aic]' ({PACKAGE}=={PINNED})") from None
    return EngineHandle


def _root() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent


def available_systems() -> list[str]:
    """Systems the installed database describes (its `systems/*.yaml` with a GPU)."""
    import yaml

    out = []
    for p in sorted((_root() / "systems").glob("*.yaml")):
        try:
            spec = yaml.safe_load(p.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(spec, dict) and "gpu" in spec and (_root() / "systems" /
                                                         str(spec.get("data_dir", ""))).is_dir():
            out.append(p.stem)
    return out


def available_models() -> list[str]:
    """Hugging Face ids whose config the package ships (`org/name`)."""
    return sorted(p.name[:-len("_config.json")].replace("--", "/", 1)
                  for p in (_root() / "model_configs").glob("*_config.json")
                  if not p.name.endswith("_hf_quant_config.json"))


def system_spec(system: str) -> dict:
    import yaml

    return yaml.safe_load((_root() / "systems" / f"{system}.yaml").read_text())


def model_config(model: str) -> ModelConfig:
    """chunksim's shape of `model` (an HF id the package ships a config for), experts
    included. ValueError naming --model when chunksim cannot read that config (a
    multimodal wrapper, a hybrid layer stack)."""
    path = _root() / "model_configs" / f"{model.replace('/', '--', 1)}_config.json"
    try:
        cfg = load_hf_config(path)
    except ValueError as exc:
        why = str(exc).split("' ", 1)[-1].split(";")[0]  # drop the package's file path
        raise ValueError(f"--model {model!r}: the database has it, but chunksim cannot read "
                         f"its config ({why}); import a model with a Llama-, Qwen-, "
                         f"Mixtral- or DeepSeek-style config") from None
    return replace(cfg, name=model)


def check_request(system: str, backend: str, model: str) -> None:
    """ValueError, one line listing what is available, for an unknown system/backend/model."""
    if backend not in BACKENDS:
        raise ValueError(f"--backend {backend!r}: the database covers {', '.join(BACKENDS)}")
    systems = available_systems()
    if system not in systems:
        raise ValueError(f"--system {system!r} is not in the database ({PACKAGE} "
                         f"{_version()}); available: {', '.join(systems)}")
    models = available_models()
    if model not in models:
        raise ValueError(f"--model {model!r} is not in the database ({PACKAGE} {_version()}); "
                         f"available: {', '.join(models)}")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def _data_version(system: str, backend: str, requested: str | None) -> str | None:
    from aiconfigurator_core.sdk import perf_database

    try:
        slots = perf_database.get_version_slots(system, backend)
        if slots is None:
            return requested
        return perf_database.resolve_query_version(system, backend, requested or "current")
    except Exception as exc:  # the package raises its own types for a bad version
        raise ValueError(f"--backend-version {requested!r} for {backend} on {system}: "
                         f"{str(exc).splitlines()[0]}") from None


@contextlib.contextmanager
def _quiet():
    """The package logs each fallback table it loads; keep the console to our lines."""
    logger = logging.getLogger()
    level = logger.level
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)
        logger.setLevel(level)


class Database:
    """One compiled engine: per-op seconds at a context or generation shape."""

    def __init__(self, model: str, system: str, backend: str, backend_version: str | None,
                 tp: int, ep: int, quant: str | None, moe: bool = False) -> None:
        engine_handle = _need_package()
        check_request(system, backend, model)
        self.version = _data_version(system, backend, backend_version)
        kwargs = {"tp_size": tp, "backend_version": self.version}
        if ep > 1:
            kwargs["moe_ep_size"] = ep
        elif moe and tp > 1:  # vLLM's default for a MoE model: every expert sharded tp ways
            kwargs["moe_tp_size"] = tp
        if quant:
            kwargs["gemm_quant_mode"] = quant
        with _quiet():
            try:
                self.h = engine_handle.compile(model, system, backend, **kwargs)
                shared, ctx_att, _ = self.h.mixed_step_breakdown_per_op(16, 1, 16, 2, 0)
                self.n_ctx = len(shared) + len(ctx_att)
                self.n_gen = len(self.h.decode_step_per_op(1, 16, 2))
            except Exception as exc:  # the package raises several types
                raise ValueError(f"aiconfigurator could not build {model} on {system} "
                                 f"({backend} {self.version}, tp {tp}, ep {ep}, quant "
                                 f"{quant or 'default'}): {str(exc).splitlines()[0]}; the "
                                 f"database lacks that data: choose another --system, "
                                 f"--backend, --backend-version, --tp / --ep or --quant") \
                    from None

    def context(self, tokens: int, prior: int = 0, batch: int = 1) -> list[tuple]:
        """(name, seconds, source) of every context op at `batch` x `tokens` after `prior`."""
        ops = self.h.evaluate_context_ops(list(range(self.n_ctx)), batch_size=batch,
                                          s=tokens, prefix=prior)
        return [(_bare(n), ms / 1e3, src) for n, ms, _, src in ops]

    def generation(self, decodes: int, positions: int) -> list[tuple]:
        """(name, seconds, source) of every generation op: `decodes` sequences, each
        attending `positions` positions."""
        ops = self.h.evaluate_generation_ops(list(range(self.n_gen)), batch_size=decodes,
                                             s=positions)
        return [(_bare(n), ms / 1e3, src) for n, ms, _, src in ops]


def _bare(name: str) -> str:
    return name.removeprefix("context_").removeprefix("generation_")


def component_of(op: str) -> str:
    """The chunksim component a database op belongs to."""
    if op in ("embedding", "embedding_ar", "p2p"):
        return "embed"
    if op == "logits_gemm":
        return "head"
    if op == "attention":
        return "attention"
    if op.startswith("ar_") or op.endswith("_ar"):
        return "allreduce"
    if op == "moe" or op.endswith("_moe"):
        return "expert"
    if op.endswith(("moe_pre_dispatch", "moe_post_dispatch")):
        return "alltoall"
    return "dense"


def _row(component: str, seconds: float, **keys) -> dict:
    r = dict.fromkeys(COLUMNS[1:8], 0)
    r.update(keys)
    return {"component": component, **r, "median_s": seconds, "p10_s": seconds,
            "p90_s": seconds, "mean_s": seconds, "repeats": 0}


def build_rows(db: Database, layers: int, max_position: int,
               routing: Routing | None = None) -> tuple[list[dict], dict]:
    """The component rows and, per component, how many op values were of each source.
    `routing`: a MoE model's, which turns the database's per-step MoE op into `expert`
    rows (module docstring); None for a dense model."""
    sources: dict[str, dict[str, int]] = {}
    ops: dict[str, set[str]] = {}

    def add(component: str, op: str, src: str) -> None:
        tally = sources.setdefault(component, {})
        tally[src] = tally.get(src, 0) + 1
        ops.setdefault(component, set()).add(op)

    rows: list[dict] = []
    for t in TOKENS:
        sums = {"dense": 0.0, "embed": 0.0, "allreduce": 0.0, "expert": 0.0, "alltoall": 0.0}
        for op, s, src in db.context(t):
            comp = component_of(op)
            if comp in sums:
                sums[comp] += s
                add(comp, op, src)
        rows.append(_row("dense", sums["dense"] / layers, tokens=t))
        rows.append(_row("embed", sums["embed"], tokens=t))
        rows.append(_row("allreduce", sums["allreduce"] / layers, tokens=t))
        if routing is not None:
            n, sec = expert_from_layer(t, sums["expert"] / layers, routing)
            rows.append(_row("expert", sec, tokens=round(n, 9)))
            rows.append(_row("alltoall", sums["alltoall"] / layers, tokens=t))
    for n in LOGITS:
        head = 0.0
        if n:
            for op, s, src in db.generation(n, 2):
                if component_of(op) == "head":
                    head += s
                    add("head", op, src)
        rows.append(_row("head", head, logits=n))
    for c in CHUNKS:
        for p in PRIORS:
            if c + p > max_position:
                continue
            att = [(s, src) for op, s, src in db.context(c, p) if op == "attention"]
            for _, src in att:
                add("prefill_attn", "attention", src)
            rows.append(_row("prefill_attn", sum(s for s, _ in att) / layers,
                             chunk_len=c, prior_len=p))
    for d in DECODES:
        for kv in CONTEXTS:
            if kv >= max_position:
                continue
            att = [(s, src) for op, s, src in db.generation(d, kv + 1) if op == "attention"]
            for _, src in att:
                add("decode_attn", "attention", src)
            rows.append(_row("decode_attn", sum(s for s, _ in att) / layers,
                             decode_count=d, kv_len=kv, kv_max=kv))
    rows.append(_row("fixed", 0.0))
    return _fill_priors(rows), {k: {"sources": sources.get(k, {}),
                                    "ops": sorted(ops.get(k, ()))} for k in sources}


def _fill_priors(rows: list[dict]) -> list[dict]:
    """Chunk x prior points beyond the model's max position are absent; the table needs
    the full product: hold each chunk's longest-prior figure there."""
    pre = [r for r in rows if r["component"] == "prefill_attn"]
    have = {(r["chunk_len"], r["prior_len"]): r for r in pre}
    priors = sorted({p for _, p in have})
    for c in sorted({c for c, _ in have}):
        last = None
        for p in priors:
            if (c, p) in have:
                last = have[(c, p)]
            elif last is not None:
                rows.append({**last, "prior_len": p})
    return rows


def import_aiconfigurator(out_csv: Path, system: str, backend: str, model: str, tp: int = 1,
                          ep: int = 1, quant: str | None = None,
                          backend_version: str | None = None,
                          framework_s: float | None = None) -> dict:
    """Build `out_csv` (+ JSON) from the database; returns the JSON written."""
    import time

    from chunksim.latency.profile import load_profile
    from chunksim.profiler.component_write import _model_entry, write_components

    if out_csv.suffix != ".csv":
        raise ValueError(f"--out {str(out_csv)!r}: give the CSV path, ending in .csv")
    if tp < 1 or ep < 1:
        raise ValueError(f"--tp {tp} / --ep {ep}: use 1 or more")
    if framework_s is not None and not (framework_s >= 0 and math.isfinite(framework_s)):
        raise ValueError(f"--framework-ms {framework_s * 1e3}: give a time >= 0")
    start = time.perf_counter()
    _need_package()
    check_request(system, backend, model)
    cfg = model_config(model)
    if ep > 1 and cfg.moe is None:
        raise ValueError(f"--ep {ep}: expert parallelism applies to mixture-of-experts "
                         f"models; {model} is dense")
    shard = shard_moe(cfg, tp, ep)
    routing = None if cfg.moe is None else Routing(cfg.moe.num_experts, cfg.moe.top_k, ep)
    db = Database(model, system, backend, backend_version, tp, ep, quant,
                  moe=cfg.moe is not None)
    with _quiet():
        rows, sources = build_rows(db, cfg.n_layers, cfg.max_position, routing)
    for comm in ("allreduce", "alltoall"):  # no such op in the database: no such cost
        if comm not in sources or (comm == "allreduce" and tp == 1):
            rows = [r for r in rows if r["component"] != comm]
            sources.pop(comm, None)
    spec = system_spec(system)
    weight_bytes = 1 if quant and "fp8" in quant else 2
    measured = {k: ("measured" if set(v["sources"]) == {"silicon"} else
                    "modelled" if set(v["sources"]) <= {"empirical"} else "partly measured")
                for k, v in sources.items()}
    framework = (FRAMEWORK_DEFAULT_S, FRAMEWORK_SOURCE) if framework_s is None else (
        framework_s, "--framework-ms, given at import")
    meta = {
        "label": (f"imported from {PACKAGE} {_version()} ({backend} {db.version} kernel data on "
                  f"{system}); kernel times plus framework time, not measured by chunksim"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": "imported",
        "device_name": f"{system} ({backend} {db.version} kernel data, aiconfigurator database)",
        "device_memory_bytes": int(spec["gpu"]["mem_capacity"]),
        "dtype": "bfloat16",
        "threads": None,
        "model": _model_entry(cfg),
        "weights_bytes": cfg.n_params() * weight_bytes // tp,
        "kv_bytes_per_token": shard.kv_bytes_per_token("bfloat16"),
        "step_overhead_s": framework[0],
        "framework": {"step_s": framework[0], "source": framework[1]},
        "components": {"layers": cfg.n_layers, "timed_layers": None,
                       "in_sequence_scale": 1.0, "tp": tp, "link": None,
                       **({} if routing is None else {"moe": _moe_entry(routing)}),
                       "mixed_attention": "sum-of-parts (the database times prefill and "
                                          "decode attention apart)",
                       "decode_spread": "mean only (the database times equal contexts)",
                       "terms": {"rotary": "inside the database's attention op",
                                 "final_norm": "absent (not in the database)",
                                 "sampler": "absent (not in the database); framework time"}},
        "calibration": None,
        "source": {"kind": "aiconfigurator", "package": PACKAGE, "package_version": _version(),
                   "system": system, "backend": backend, "data_version": db.version,
                   "model": model, "tp": tp, "ep": ep, "quant": quant or "default",
                   "gpu": {"mem_bw_bytes_per_s": spec["gpu"].get("mem_bw"),
                           "bfloat16_flops": spec["gpu"].get("bfloat16_tc_flops")},
                   "measured": measured, "components": sources},
    }
    meta = write_components(out_csv, rows, meta)
    meta["elapsed_s"] = round(time.perf_counter() - start, 3)
    try:
        load_profile(str(out_csv))
    except ValueError as exc:  # pragma: no cover - the rows fill their grids by construction
        out_csv.unlink(missing_ok=True)
        out_csv.with_suffix(".json").unlink(missing_ok=True)
        raise ValueError(f"sim profile import --from aiconfigurator: {exc}") from None
    return meta


def _moe_entry(routing: Routing) -> dict:
    """The profile's `components.moe`: the routing `sim run` prices `expert` with."""
    return {"num_experts": routing.num_experts, "top_k": routing.top_k, "ep": routing.ep,
            "experts_per_device": routing.experts_per_device, "skew": 0.0,
            "alltoall": "the database's moe_pre_dispatch + moe_post_dispatch",
            "expert": ("back-solved from the database's moe op (power-law token "
                       "distribution) so that uniform routing reproduces it at every grid "
                       "token count")}
