"""One simulation run from config to records and summary: the library entry point that
`sim run`, `sim compare`, `sim capacity` and `sim sweep` share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chunksim import atomic
from chunksim.core.knobs import knob
from chunksim.core.kv_cache import KVConfig
from chunksim.core.spec import Workload
from chunksim.latency.profile import Profile
from chunksim.latency.select import latency_model
from chunksim.policies import chosen_defaults, knob_owners, make_policy
from chunksim.sim.coverage import describe_ranges, extrapolation_warnings, grid_ranges
from chunksim.sim.engine import Engine, EngineConfig, SimResult
from chunksim.sim.fleet_config import FleetConfig
from chunksim.sim.metrics import parse_class_slos, parse_slos, summarize, summarize_classes
from chunksim.sim.outputs import OutputFormat, table_bytes, table_names
from chunksim.sim.records import StepLog
from chunksim.sim.settle import SloWatch
from chunksim.sim.spread_guard import SpreadGuard, widest_sigma

_E = "Engine and KV cache"


def _ms_to_s(ms: float) -> float:
    return ms / 1000.0


@dataclass(frozen=True)
class RunConfig:
    """A policy on a profile, with the engine and KV settings."""

    policy: str = knob("budget", "--policy", panel="Policy")
    """Scheduling policy (a knob of another policy is refused)."""
    chunk: int | None = knob(None, "--chunk", panel="Policy", min=1)
    """The policy's chunk size: chunk: prefill tokens per request per step (default 1024);
    budget, sjf: tokens per step, decodes included (= --max-num-batched-tokens; default
    8192 on H100/H200-class profiles, else 2048)."""
    knobs: tuple[tuple[str, Any], ...] = ()
    """Policy knobs the user set, (field name, value) sorted by name (a mapping is
    accepted and normalized); the rest take the modelled system's defaults
    (`policies.make_policy`)."""
    kv_blocks: int | None = knob(None, "--kv-blocks", panel=_E, min=1)
    """KV capacity in blocks (default: from the profile, device memory x utilization -
    weights)."""
    block_size: int = knob(16, "--block-size", panel=_E, min=1)
    """Tokens per KV block."""
    gpu_memory_utilization: float = knob(0.9, "--gpu-memory-utilization", panel=_E)
    """Memory fraction for weights + KV when deriving --kv-blocks."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Jitter, seed, fast-forward, max_model_len, wake-up."""
    step_overhead_s: float | None = knob(None, "--step-overhead-ms", panel=_E, min=0.0,
                                         parse=_ms_to_s)
    """Flat per-step CPU overhead added to every step, ms (default: the profile's fit, base
    + per request in the step, measured on the live loop)."""
    slos_s: dict = knob(None, "--goodput", panel=_E, default_factory=dict,
                        cli_type=list[str], parse=parse_slos)
    """SLO for goodput, METRIC=MS with METRIC ttft, tpot, e2el or itl (repeat the flag)."""
    class_slos_s: dict = knob(None, "--class-slo", panel=_E, default_factory=dict,
                              cli_type=list[str], parse=parse_class_slos)
    """Per request-class SLO, CLASS:METRIC=MS (overrides --goodput for that class; repeat
    the flag)."""
    prefix_caching: bool = knob(True, "--prefix-caching/--no-prefix-caching",
                                "--enable-prefix-caching/--no-enable-prefix-caching",
                                panel=_E)
    """vLLM V1 automatic prefix caching: cached full blocks cost no budget, freed blocks
    stay cached (LRU) so preempted requests re-prefill cheaply."""
    fleet: FleetConfig = field(default_factory=FleetConfig)
    """Replicas and router, or P/D pools (default: one engine)."""

    def __post_init__(self) -> None:
        if not isinstance(self.knobs, tuple):  # a mapping given: normalize, hashable
            object.__setattr__(self, "knobs", tuple(sorted(dict(self.knobs).items())))
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1] "
                "(--gpu-memory-utilization)")

    def variant(self, policy: str | None = None, chunk: int | None = None,
                seed: int | None = None, variant: str | None = None) -> RunConfig:
        """This configuration with another policy family (its variant, chunk size) or seed:
        what comparisons, capacity searches and sweeps vary. A knob the new family lacks
        is dropped, except one the user set for it."""
        cfg = self
        if policy is not None:
            knobs = dict(self.knobs)
            knobs.pop("variant", None)
            if variant is not None:
                knobs["variant"] = variant
            owners = knob_owners()
            keep = {k: v for k, v in knobs.items() if policy in owners.get(k, ())}
            cfg = replace(cfg, policy=policy, chunk=chunk, knobs=tuple(sorted(keep.items())))
        if seed is not None:
            cfg = replace(cfg, engine=replace(cfg.engine, seed=seed))
        return cfg

    def make_policy(self, device_name: str | None = None):
        """The policy this configuration runs on a profile of `device_name`."""
        return make_policy(self.policy, dict(self.knobs), self.chunk, device_name)


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


def engine_parts(workload: Workload, profile: Profile, cfg: RunConfig):
    """(device name, latency model, KV config) of one engine of this configuration."""
    device = profile.provenance.get("device_name")
    latency = latency_model(profile, cfg.step_overhead_s)
    blocks = cfg.kv_blocks or default_kv_blocks(profile, cfg.block_size,
                                                cfg.gpu_memory_utilization)
    kv = KVConfig(blocks, cfg.block_size, cfg.prefix_caching, workload.prefix_block_tokens)
    return device, latency, kv


def engine_config(profile: Profile, cfg: RunConfig) -> EngineConfig:
    """The engine settings of one engine: --max-model-len defaults to the profile model's
    maximum position, as vLLM rejects longer requests."""
    engine_cfg = cfg.engine
    if engine_cfg.max_model_len is None and profile.max_position is not None:
        engine_cfg = replace(engine_cfg, max_model_len=profile.max_position)
    return engine_cfg


def summarize_run(result: SimResult, profile: Profile, cfg: RunConfig,
                  latency, device: str | None) -> dict:
    """The summary of a run's records (its meta completed with the profile's facts, and
    a warning when many steps were priced outside the profile's grid)."""
    meta = dict(result.meta)
    meta.update(profile=profile.path.rsplit("/", 1)[-1], profile_label=profile.label,
                profile_kind=profile.kind,
                profile_filled_cells=latency.filled_cells,
                policy_defaults=chosen_defaults(cfg.policy, dict(cfg.knobs), cfg.chunk, device))
    steps = result.steps if result.step_totals is None else result.step_totals
    summary = summarize(result.requests, steps, result.itl_s, cfg.slos_s, meta)
    by_class = summarize_classes(result.requests, result.itl_by_class_s, cfg.slos_s,
                                 cfg.class_slos_s)
    if by_class:
        summary["by_class"] = by_class
    summary["warnings"] = extrapolation_warnings(steps, grid_ranges(profile.table))
    return summary


def simulate(workload: Workload, profile: Profile, cfg: RunConfig,
             schedule_log: bool = False,
             progress: Callable[..., None] | None = None,
             steps_keep: int = 1, steps_sink=None,
             settle_slos_ms: Mapping[str, float] | None = None) -> tuple[SimResult, dict]:
    """Run one configuration (one engine, or a fleet: `cfg.fleet`); returns the records and
    the summary dict. With `schedule_log`, the records include every scheduling decision
    (`SimResult.schedule`; one engine only).

    Requests longer than --max-model-len (default: the profile model's maximum position)
    are rejected, as vLLM rejects them. A jittered step beyond what the profile's spread
    allows raises ValueError (`spread_guard`). The summary's `warnings` says when more
    than 5 % of the steps were priced outside the profile's grid (`coverage`). `progress`
    is called as progress(requests done, requests, sim_s=...) now and then (`Engine`).

    `SimResult.steps` keeps every `steps_keep`-th step (1: all, 0: none), or none when
    `steps_sink(columns)` takes them as they are recorded (a streaming writer); the
    summary counts every step either way. A fleet keeps every step.

    With `settle_slos_ms` ({summary key: bound, ms}), the run stops as soon as one of
    those bounds has certainly failed, raising `settle.Settled` (`settle.SloWatch`)."""
    if cfg.fleet.active:
        if schedule_log:
            raise ValueError("--schedule-log logs one engine's decisions; drop it with "
                             "--replicas / --pd")
        from chunksim.sim.fleet_run import simulate_fleet

        result, summary = simulate_fleet(workload, profile, cfg, settle_slos_ms)
        steps = result.steps
        if steps_keep != 1:
            steps = steps.iloc[::steps_keep] if steps_keep else steps.iloc[:0]
        if steps_sink is not None:
            if len(steps):
                steps_sink({k: steps[k].to_numpy() for k in steps.columns})
            steps = steps.iloc[:0]
        result.steps = steps.reset_index(drop=True)
        return result, summary
    device, latency, kv = engine_parts(workload, profile, cfg)
    policy = cfg.make_policy(device)
    engine_cfg = engine_config(profile, cfg)
    mml = engine_cfg.max_model_len
    if (not getattr(policy, "enable_chunked_prefill", True) and cfg.engine.max_model_len
            is not None and mml > policy.max_num_batched_tokens):
        raise ValueError(  # vLLM's SchedulerConfig refuses this too
            f"--max-model-len {mml} exceeds --max-num-batched-tokens "
            f"{policy.max_num_batched_tokens} with --no-enable-chunked-prefill: a prompt "
            "that long could never be scheduled; raise the budget or lower --max-model-len")
    guard = (SpreadGuard(widest_sigma(profile.table), describe_ranges(grid_ranges(
        profile.table))) if engine_cfg.jitter else None)
    ranges = grid_ranges(profile.table)
    engine = Engine(workload, policy, latency, kv, engine_cfg, schedule_log,
                    spread_guard=guard, progress=progress,
                    step_log=lambda: StepLog(keep=steps_keep, sink=steps_sink, ranges=ranges))
    if settle_slos_ms:
        SloWatch(settle_slos_ms, workload).attach([engine], lone=True)
    result = engine.run()
    return result, summarize_run(result, profile, cfg, latency, device)


def nothing_completed(result: SimResult, summary: dict) -> str | None:
    """When no request completed: why, per kind of rejection with the first example of
    each (None when some request completed)."""
    if summary["completed"]:
        return None
    parts = [f"{count} by {kind} (e.g. {result.rejected_examples.get(kind, '?')})"
             for kind, count in summary.get("rejected_reasons", {}).items()]
    return (f"all {len(result.requests)} requests were rejected, so there is no latency to "
            f"report: {'; '.join(parts) or 'no reason recorded'}")


OUTPUT_FILES = ("summary.json", *(name for fmt in OutputFormat for name in table_names(fmt)))
"""What `write_outputs` may write: the run's whole output directory."""


def write_outputs(out_dir: str | Path, result: SimResult, summary: dict,
                  fmt: OutputFormat | str = OutputFormat.PARQUET, steps: bool = True,
                  steps_file: Path | None = None) -> list[str]:
    """summary.json, requests and steps tables in `fmt` (parquet or csv; and the schedule
    when the run logged it), written as one set (`atomic.write_dir`): a reader of
    `out_dir` sees one run's files, never a mix of two. The steps table holds
    `result.steps` (as `simulate` kept them), or is `steps_file` (streamed there while the
    run went: moved in), or is left out (`steps` False: `--steps none`). Returns the
    names written."""
    req_name, steps_name, sched_name = table_names(fmt)
    files: dict[str, bytes | Path] = {req_name: table_bytes(result.requests, fmt)}
    if steps_file is not None:
        files[steps_name] = Path(steps_file)
    elif steps:
        files[steps_name] = table_bytes(result.steps, fmt)
    if result.schedule is not None:
        files[sched_name] = table_bytes(result.schedule, fmt)
    files["summary.json"] = atomic.json_bytes(summary)
    atomic.write_dir(out_dir, files, owned=OUTPUT_FILES)
    return ["summary.json", *(n for n in files if n != "summary.json")]
