"""One engine of a configuration: `RunConfig` (a policy on a profile, with the engine, KV
and fleet settings) and `build_engine`, the one place an `Engine` is assembled: a lone
run's, every replica's of a fleet, both pools' of P/D."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from chunksim.core.knobs import knob
from chunksim.core.kv_cache import KVConfig, usable_blocks
from chunksim.core.spec import Workload
from chunksim.core.vllm_version import GPU_MEMORY_UTILIZATION, Device, vllm_defaults
from chunksim.latency.profile import Profile
from chunksim.latency.select import latency_model
from chunksim.policies import knob_owners, make_policy
from chunksim.sim.engine.core import request_rejection
from chunksim.sim.engine.engine import Engine, EngineConfig
from chunksim.sim.engine.offload_config import OffloadConfig
from chunksim.sim.engine.spread_guard import SpreadGuard
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.metrics.metrics import parse_class_slos, parse_slos
from chunksim.sim.records.records import StepLog

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
    by device, as the modelled vLLM: 16384 on GPUs of 160 GiB or more, 8192 of 70 GiB or
    more, A100 excepted, else 2048, and 2048 per device on CPU)."""
    knobs: tuple[tuple[str, Any], ...] = ()
    """Policy knobs the user set, (field name, value) sorted by name (a mapping is
    accepted and normalized); the rest take the modelled system's defaults
    (`policies.make_policy`)."""
    kv_blocks: int | None = knob(None, "--kv-blocks", panel=_E, min=2)
    """KV capacity in blocks, vLLM's `num_gpu_blocks`: as in vLLM, one is its null block,
    so N blocks hold KV in N - 1 (default: from the profile, device memory x utilization
    - weights)."""
    block_size: int | None = knob(None, "--block-size", panel=_E, min=1)
    """Tokens per KV block (default by device, as the modelled vLLM: 128 on CPU, 16 on
    GPUs)."""
    gpu_memory_utilization: float = knob(GPU_MEMORY_UTILIZATION, "--gpu-memory-utilization",
                                         panel=_E)
    """Memory fraction for weights + KV when deriving --kv-blocks (default 0.92, the
    modelled vLLM's)."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Jitter, seed, fast-forward, max_model_len, wake-up."""
    step_overhead_s: float | None = knob(None, "--step-overhead-ms", panel=_E, min=0.0,
                                         parse=_ms_to_s)
    """Flat per-step CPU overhead added to every step, ms (default: the profile's fit, base
    + per request in the step, measured on the live loop)."""
    expert_skew: float | None = knob(None, "--expert-skew", panel=_E, min=0.0)
    """MoE profiles: Zipf exponent of expert popularity, the i-th most used expert routed
    in proportion to 1 / i^s (0: uniform routing; default: the profile's, uniform unless
    it records one); the busiest expert-parallel device sets the layer's time."""
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
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    """A CPU tier for the KV cache (default: none)."""

    def __post_init__(self) -> None:
        if not isinstance(self.knobs, tuple):  # a mapping given: normalize, hashable
            object.__setattr__(self, "knobs", tuple(sorted(dict(self.knobs).items())))
        if self.offload.active and not self.prefix_caching:
            raise ValueError(
                f"--kv-offload-gib {self.offload.kv_offload_gib:g} keeps blocks the prefix "
                "cache evicts, so it needs prefix caching: drop --no-prefix-caching or "
                "--kv-offload-gib")
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

    def make_policy(self, device_name: Device | str | None = None):
        """The policy this configuration runs on a profile of `device_name` (a
        `core.vllm_version.Device`, or a device name)."""
        return make_policy(self.policy, dict(self.knobs), self.chunk, device_name)

    def block_size_on(self, device: Device | str | None) -> int:
        """Tokens per KV block on `device`: --block-size, else the modelled vLLM's default
        there (`core.vllm_version.vllm_defaults`)."""
        return self.block_size or vllm_defaults(device).block_size


def default_kv_blocks(profile: Profile, block_size: int, utilization: float) -> int:
    """vLLM-style capacity, its `num_gpu_blocks`: (device memory * utilization - weights)
    / bytes per block. Activation memory is not subtracted (it is small next to KV at
    these sizes)."""
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
    if blocks < 2:  # (one is vLLM's null block)
        raise ValueError(
            f"profile {profile.path}: weights ({weights / 2**30:.1f} GiB) leave no KV room in "
            f"{mem / 2**30:.1f} GiB at utilization {utilization}; give --kv-blocks")
    return blocks


@dataclass(frozen=True)
class EngineParts:
    """What every engine of one profile in a configuration shares."""

    device: Device
    """The profile's device (policy and block-size defaults depend on it, as vLLM's do)."""
    latency: Any
    """The step-cost model (`latency.select.latency_model`), with the drafter's cost when
    the engine speculates."""
    kv: KVConfig
    """The KV cache, with its CPU tier when there is one."""
    engine: EngineConfig
    """The engine settings, --max-model-len defaulting to the profile model's maximum
    position, as vLLM rejects longer requests."""


def engine_parts(workload: Workload, profile: Profile, cfg: RunConfig) -> EngineParts:
    """The parts an engine of this configuration takes from `profile`."""
    latency = latency_model(profile, cfg.step_overhead_s, cfg.expert_skew)
    device = Device.of(profile.provenance)
    block_size = cfg.block_size_on(device)
    blocks = cfg.kv_blocks or default_kv_blocks(profile, block_size,
                                                cfg.gpu_memory_utilization)
    kv = KVConfig(usable_blocks(blocks), block_size, cfg.prefix_caching,
                  workload.prefix_block_tokens)
    spec = cfg.engine.speculative
    if spec.enabled:
        latency.drafter = make_drafter(spec, profile, latency)
        if spec.drops_last_hit_block:
            kv = replace(kv, drop_last_hit_block=True)
    if cfg.offload.active:
        kv = offload_kv(kv, profile, cfg.offload)
    engine_cfg = cfg.engine
    if engine_cfg.max_model_len is None and profile.max_position is not None:
        engine_cfg = replace(engine_cfg, max_model_len=profile.max_position)
    return EngineParts(device, latency, kv, engine_cfg)


def build_engine(workload: Workload, cfg: RunConfig, parts: EngineParts, *,
                 schedule_log: bool = False, spread_guard: SpreadGuard | None = None,
                 progress: Callable[..., None] | None = None,
                 step_log: Callable[[], StepLog] | None = None) -> Engine:
    """An engine running `workload` under `cfg`'s policy on `parts` (its own policy
    instance and KV cache). Refuses a policy that could never schedule a request of the
    --max-model-len given, as vLLM's SchedulerConfig does."""
    policy = cfg.make_policy(parts.device)
    if cfg.engine.max_model_len is not None:
        why = policy.max_model_len_error(parts.engine.max_model_len)
        if why:
            raise ValueError(why)
    return Engine(workload, policy, parts.latency, parts.kv, parts.engine, schedule_log,
                  spread_guard=spread_guard, progress=progress, step_log=step_log)


def static_rejections(workload: Workload, profile: Profile, cfg: RunConfig) -> int | None:
    """How many of `workload`'s requests a lone engine of `cfg` on `profile` rejects on
    arrival (`core.request_rejection`): exactly what a run of it rejects, at any load.
    None for a fleet, whose instances and P/D gate requests their own ways."""
    if cfg.fleet.active:
        return None
    parts = engine_parts(workload, profile, cfg)
    policy = cfg.make_policy(parts.device)
    bs, blocks, cap = parts.kv.block_size, parts.kv.num_blocks, parts.engine.max_model_len
    return sum(request_rejection(s, policy, bs, blocks, cap) is not None
               for s in workload.requests)


def make_drafter(spec, profile: Profile, latency):
    """The drafter cost of a speculating engine on `profile` (`latency.drafter`), with a
    warning when the draft profile's model cannot share the target's tokenizer."""
    from chunksim.latency.drafter import Drafter, model_layers, tokenizer_mismatch
    from chunksim.latency.profile import load_profile

    draft = None
    warning = None
    if spec.draft_profile is not None:
        dp = load_profile(spec.draft_profile)
        draft = latency_model(dp, 0.0)  # the host work of a step is priced once, by the target
        warning = tokenizer_mismatch(profile.provenance, dp.provenance)
    return Drafter(spec, latency, model_layers(profile.provenance), draft, warning)


def offload_kv(kv: KVConfig, profile: Profile, off: OffloadConfig) -> KVConfig:
    """`kv` with the CPU tier of `off`: its capacity in blocks of the profile model's
    KV size, and its link."""
    per_tok = int(kv_bytes_per_token(profile, "--kv-offload-gib",
                                     "to size host blocks and time their loads"))
    block_bytes = per_tok * kv.block_size
    if off.host_blocks(block_bytes) < 1:
        raise ValueError(
            f"--kv-offload-gib {off.kv_offload_gib:g} holds no KV block of this model "
            f"({block_bytes} bytes at --block-size {kv.block_size}); give at least "
            f"{block_bytes / 2**30:.3g} GiB, or 0 for no CPU tier")
    bw, lat = off.link
    return replace(kv, host_blocks=off.host_blocks(block_bytes), block_bytes=block_bytes,
                   host_bytes_per_s=bw, host_latency_s=lat,
                   host_write_back=off.write_back)


def kv_bytes_per_token(profile: Profile, flag: str, why: str) -> float:
    """The profile model's KV bytes per token, which `flag` needs `why`; an error naming
    both when the profile does not record it."""
    try:
        return float(profile.provenance["kv_bytes_per_token"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"{flag}: profile {profile.path} has no kv_bytes_per_token in its provenance, "
            f"needed {why}; use a profile written by `sim profile`") from None
