"""One simulation run from config to records and summary: the library entry point that
`sim run`, `sim compare`, `sim capacity` and `sim sweep` share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from chunksim import atomic
from chunksim.policies import PolicyKnobs, make_policy
from chunksim.sim.engine import Engine, EngineConfig, SimResult
from chunksim.sim.kv_cache import KVConfig
from chunksim.sim.latency import LatencyModel
from chunksim.sim.metrics import summarize, summarize_classes
from chunksim.sim.profile import Profile
from chunksim.workloads.spec import Workload


@dataclass(frozen=True)
class RunConfig:
    """A policy on a profile, with the engine and KV settings."""

    policy: str = "budget"
    """Policy family: whole, chunk or budget."""
    knobs: PolicyKnobs = field(default_factory=PolicyKnobs)
    """Policy knobs (None fields take the modelled system's defaults)."""
    kv_blocks: int | None = None
    """KV capacity in blocks; None derives it from the profile (see `default_kv_blocks`)."""
    block_size: int = 16
    """Tokens per KV block."""
    gpu_memory_utilization: float = 0.9
    """Fraction of device memory for weights + KV when deriving `kv_blocks` (vLLM's knob)."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Jitter, seed, fast-forward, max_model_len."""
    step_overhead_s: float | None = None
    """Per-step CPU overhead; None takes the profile's measured `step_overhead_s`."""
    slos_s: dict = field(default_factory=dict)
    """Goodput SLOs in seconds, keyed ttft / tpot / e2el / itl."""
    class_slos_s: dict = field(default_factory=dict)
    """Per request-class SLOs overriding `slos_s`: {class: {metric: seconds}}."""
    prefix_caching: bool = True
    """vLLM V1-style automatic prefix caching (vLLM V1's default: on)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")


def default_kv_blocks(profile: Profile, block_size: int, utilization: float) -> int:
    """vLLM-style capacity: (device memory * utilization - weights) / bytes per block.
    Activation memory is not subtracted (it is small next to KV at these sizes)."""
    p = profile.provenance
    try:
        mem, weights, per_tok = (int(p["device_memory_bytes"]), int(p["weights_bytes"]),
                                 int(p["kv_bytes_per_token"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"profile {profile.path} has no device_memory_bytes / weights_bytes / "
            "kv_bytes_per_token in its provenance; give --kv-blocks") from None
    free = mem * utilization - weights
    blocks = int(free // (block_size * per_tok))
    if blocks < 1:
        raise ValueError(
            f"profile {profile.path}: weights ({weights / 2**30:.1f} GiB) leave no KV room in "
            f"{mem / 2**30:.1f} GiB at utilization {utilization}; give --kv-blocks")
    return blocks


def simulate(workload: Workload, profile: Profile, cfg: RunConfig) -> tuple[SimResult, dict]:
    """Run one configuration; returns the records and the summary dict."""
    policy = make_policy(cfg.policy, cfg.knobs, profile.provenance.get("device_name"))
    latency = LatencyModel(profile, cfg.step_overhead_s)
    blocks = cfg.kv_blocks or default_kv_blocks(profile, cfg.block_size,
                                                cfg.gpu_memory_utilization)
    kv = KVConfig(blocks, cfg.block_size, cfg.prefix_caching, workload.prefix_block_tokens)
    engine = Engine(workload, policy, latency, kv, cfg.engine)
    result = engine.run()
    meta = dict(result.meta)
    meta.update(profile=profile.path.rsplit("/", 1)[-1], profile_label=profile.label,
                profile_filled_cells=latency.filled_cells)
    summary = summarize(result.requests, result.steps, result.itl_s, cfg.slos_s, meta)
    by_class = summarize_classes(result.requests, result.itl_by_class_s, cfg.slos_s,
                                 cfg.class_slos_s)
    if by_class:
        summary["by_class"] = by_class
    return result, summary


def write_outputs(out_dir: str | Path, result: SimResult, summary: dict) -> None:
    """summary.json, requests.csv, steps.csv, each written atomically."""
    out = Path(out_dir)
    atomic.write_csv(out / "requests.csv", result.requests)
    atomic.write_csv(out / "steps.csv", result.steps)
    atomic.write_json(out / "summary.json", summary)
