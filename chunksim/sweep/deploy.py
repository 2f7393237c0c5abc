"""A recommended configuration as the commands that run it: `vllm serve` flags (and
SGLang's where an equivalent exists), P/D instances with their KV transfer, and a `vllm
bench serve` line that replays the workload at the recommended rate, whose saved result
goes back into `sim validate --against`.

The configuration is built as the recommendation's runs were (`sweep.job.run_config`), so
every knob they simulated, speculative decoding and a CPU KV tier included, reaches the
lines. `sim validate --against` replays one engine: replicas get a bench of one instance
at its share of the rate for the validate line to replay; P/D gets no validate line and a
statement of what to check instead.

Every flag comes from `engine_flags` (the one table, with the engine versions checked).
Where a policy has no engine equivalent the deployment says so (`exact` False, a note)
and gives the closest flags rather than pretend.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, replace

from chunksim.core.kv_cache import usable_blocks
from chunksim.core.vllm_version import GPU_MEMORY_UTILIZATION, Device, vllm_defaults
from chunksim.latency.profile import engine_devices
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.engine_flags import (
    ENGINE_VERSIONS,
    SGLANG_SERVE,
    VLLM_BENCH,
    VLLM_SERVE,
    command_text,
    flag_args,
    parse_command,
)
from chunksim.workloads.options import WorkloadOptions

MODEL_IDS: dict[str, str] = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
}
"""Profile model name -> the Hugging Face id to serve (others: the profile's name as is)."""

EAGLE_HEADS: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
}
"""Served model -> a published EAGLE head for it (others: EAGLE_HEAD, to be replaced)."""

EAGLE_PLACEHOLDER = "EAGLE_HEAD"
"""Stands for the EAGLE head of a model this table does not know; a note says so."""

NIXL = "NixlConnector"
"""vLLM's KV connector for P/D (NIXL over UCX: NVLink within a node, RDMA across)."""


@dataclass(frozen=True)
class ServeCommand:
    """One kind of engine instance: how many, and the command each runs."""

    engine: str
    """`vllm` or `sglang`."""
    role: str
    """serve, prefill or decode."""
    count: int
    text: str
    """The shell line (flags from the table only)."""


@dataclass(frozen=True)
class Deployment:
    """The commands of one recommended configuration."""

    label: str
    model: str
    gpus: int
    """GPUs the deployment occupies (instances x tensor-parallel size)."""
    vllm: tuple[ServeCommand, ...]
    sglang: tuple[ServeCommand, ...]
    """Empty when SGLang has no equivalent."""
    exact: bool
    """Whether the vLLM flags run the policy chunksim modelled (False: the closest)."""
    notes: tuple[str, ...]
    bench: str
    """`vllm bench serve` at the recommended rate."""
    validate: str | None
    """The `sim validate --against` line a bench result goes to (None: no form replays
    this deployment; `check` says what to do instead)."""
    instance_bench: str | None = None
    """Replicas: `vllm bench serve` against one instance alone at its share of the rate,
    whose result the validate line replays (`sim validate --against` replays one engine)."""
    check: str | None = None
    """How the validate line relates to the deployment, or what to do instead of one."""

    @property
    def versions(self) -> str:
        return f"vLLM {ENGINE_VERSIONS['vllm']}, SGLang {ENGINE_VERSIONS['sglang']}"


def model_id(provenance: dict) -> str:
    m = provenance.get("model")
    name = m.get("name") if isinstance(m, dict) else None
    return MODEL_IDS.get(name or "", name or "MODEL")


def _policy_flags(policy) -> tuple[list, list | None, bool, list[str]]:
    """(vLLM pairs, SGLang pairs or None, exact, notes) of one policy's knobs."""
    fam = policy.name
    notes: list[str] = []
    v: list = []
    s: list | None = []
    exact = True
    if fam in ("budget", "sjf", "vllm"):  # (vllm: vLLM's own scheduler, the same flags)
        v += [("--max-num-batched-tokens", policy.max_num_batched_tokens),
              ("--max-num-seqs", policy.max_num_seqs)]
        if policy.enable_chunked_prefill:
            v.append(("--enable-chunked-prefill", None))
            s += [("--chunked-prefill-size", policy.max_num_batched_tokens),
                  ("--enable-mixed-chunk", None)]
            notes.append("SGLang's --chunked-prefill-size counts prefill tokens only; with "
                         "--enable-mixed-chunk decodes ride along on top of it, so its step "
                         "holds up to max-running-requests more tokens than vLLM's budget")
        else:
            v.append(("--no-enable-chunked-prefill", None))
            s += [("--chunked-prefill-size", -1),
                  ("--max-prefill-tokens", policy.max_num_batched_tokens)]
        s.append(("--max-running-requests", policy.max_num_seqs))
        if policy.long_prefill_token_threshold:
            v.append(("--long-prefill-token-threshold", policy.long_prefill_token_threshold))
            notes.append("SGLang has no per-request cap on prefill tokens per step "
                         "(--long-prefill-token-threshold)")
        if policy.priority_scheduling:
            v.append(("--scheduling-policy", "priority"))
            s.append(("--enable-priority-scheduling", None))
        if policy.max_num_partial_prefills:
            exact = False
            notes.append(f"--max-num-partial-prefills {policy.max_num_partial_prefills} is "
                         "not emitted: vLLM V1's scheduler does not enforce a cap on "
                         "requests mid-prefill")
        if not policy.reserve_full_prompt:
            exact = False
            notes.append("--no-reserve-full-prompt models an older vLLM admission check; "
                         "no flag selects it")
        if policy.class_chunk_caps:
            exact = False
            notes.append("per-class chunk caps (--class-chunk) have no engine flag")
        if fam == "sjf":
            exact = False
            s = None
            notes.append("shortest-prompt-first has no vLLM or SGLang scheduling policy; "
                         "these are the token-budget flags it shares with vLLM's FCFS")
    elif fam == "chunk":
        exact = False
        budget = policy.prefill_budget + policy.max_num_seqs
        v += [("--max-num-batched-tokens", budget), ("--max-num-seqs", policy.max_num_seqs),
              ("--enable-chunked-prefill", None),
              ("--long-prefill-token-threshold", policy.chunk)]
        s = None
        notes.append(
            f"Sarathi's fixed chunk ({policy.variant}) has no engine equivalent; closest in "
            f"vLLM V1: each request capped at {policy.chunk} prefill tokens a step "
            f"(--long-prefill-token-threshold) under a budget of the prefill budget plus "
            f"one token per seat ({budget})"
            + ("; V1 always mixes decodes into the step, so the "
               f"{policy.variant} step shape is not reproduced" if policy.variant != "mixed"
               else ""))
    elif fam == "whole":
        v += [("--max-num-batched-tokens", policy.max_num_batched_tokens),
              ("--max-num-seqs", policy.max_num_seqs), ("--no-enable-chunked-prefill", None)]
        s += [("--chunked-prefill-size", -1),
              ("--max-prefill-tokens", policy.max_num_batched_tokens),
              ("--max-running-requests", policy.max_num_seqs)]
        if policy.variant == "prefill-first":
            exact = False
            notes.append("whole prefill-first is vLLM V0's scheduler, which V1 no longer "
                         "has; V1 without chunking mixes decodes into a prompt's step "
                         "(whole:mixed). SGLang without chunking runs prefill-only batches "
                         "first, as prefill-first does")
        else:
            notes.append("SGLang runs prefill and decode batches apart without chunking; "
                         "only the vLLM flags run whole:mixed")
            s = None
    else:  # a policy added without a mapping: say so rather than print guesses
        exact, s = False, None
        notes.append(f"no engine mapping for --policy {fam}")
    return v, s, exact, notes


_SGLANG_SPEC = {"eagle": "EAGLE", "mtp": "NEXTN", "draft-model": "STANDALONE"}
"""chunksim's --speculative-method -> SGLang's --speculative-algorithm (ngram: none)."""


def _draft_model(spec) -> str:
    """The served id of a draft-model's profile (its provenance's model)."""
    from chunksim.latency.profile import load_profile

    try:
        return model_id(load_profile(spec.draft_profile).provenance)
    except (OSError, ValueError):
        return str(spec.draft_profile)


def _spec_flags(cfg: RunConfig, model: str) -> tuple[list, list | None, list[str]]:
    """(vLLM pairs, SGLang pairs or None, notes) of the run's speculative decoding: vLLM's
    `--speculative-config` and SGLang's `--speculative-*` flags, k drafts in one chain."""
    spec = cfg.engine.speculative
    if not spec.enabled:
        return [], [], []
    k = spec.num_speculative_tokens
    method = spec.speculative_method
    notes: list[str] = []
    doc: dict = {"method": method.replace("-", "_"), "num_speculative_tokens": k}
    draft = None
    if method == "eagle":
        draft = EAGLE_HEADS.get(model, EAGLE_PLACEHOLDER)
        if draft == EAGLE_PLACEHOLDER:
            notes.append(f"replace {EAGLE_PLACEHOLDER} with the EAGLE head trained for "
                         f"{model}: chunksim prices a head of --draft-head-layers "
                         f"{spec.head_layers:g} target layers, not a named checkpoint")
    elif method == "draft-model":
        draft = _draft_model(spec)
    if draft is not None:
        doc["model"] = draft
    v = [("--speculative-config", doc)]
    rates = ",".join(f"{r:.3g}" for r in spec.position_rates)
    notes.append(f"speculative decoding as modelled: {method}, {k} drafts a step, "
                 f"per-position acceptance {rates} (an input: the engine measures its own, "
                 "reported by `vllm bench serve` as the acceptance rate)")
    algo = _SGLANG_SPEC.get(method)
    if algo is None:
        notes.append("SGLang's n-gram speculation takes other parameters than vLLM's; no "
                     "SGLang equivalent is given for --speculative-method ngram")
        return v, None, notes
    s: list = [("--speculative-algorithm", algo)]
    if draft is not None:
        s.append(("--speculative-draft-model-path", draft))
    s += [("--speculative-num-steps", k), ("--speculative-eagle-topk", 1),
          ("--speculative-num-draft-tokens", k + 1)]
    return v, s, notes


def _offload_flags(cfg: RunConfig) -> tuple[list, bool, list[str]]:
    """(vLLM pairs, exact, notes) of the CPU KV tier of --kv-offload-gib: vLLM's
    OffloadingConnector writes through, so a write-back tier gets its closest flags."""
    gib = cfg.offload.kv_offload_gib
    if not gib:
        return [], True, []
    v = [("--kv-offloading-size", float(gib)), ("--kv-offloading-backend", "native")]
    if not cfg.offload.write_back:
        return (v, True, ["SGLang's hierarchical cache (--enable-hierarchical-cache) is its "
                          "nearest CPU tier; not emitted: it stores and loads blocks by "
                          "other rules than the vLLM tier modelled"])
    return (v, False, ["--kv-offload-write-policy write-back models SGLang HiCache's "
                       "write_back (a block goes to the CPU tier when the GPU evicts it); "
                       "vLLM's offloading connector stores every prompt block as it is "
                       "computed, so these flags run a write-through tier, the closest",
                       "SGLang's hierarchical cache with --hicache-write-policy write_back "
                       "is the tier modelled; not emitted: its flags are not among those "
                       "this table checks"])


def deployment(config: Config, run: RunConfig, provenance: dict, rate: float | None,
               workload: WorkloadOptions | None = None, profile_name: str = "PROFILE",
               result_dir: str = "bench") -> Deployment:
    """The commands of `config` under `run`'s engine settings, on the profile described by
    `provenance`; `rate` (req/s) and `workload` (the flags of the requests it replays, at
    that rate) shape the bench line."""
    from chunksim.sweep.job import SimJob, run_config

    # the configuration the recommendation simulated, built as its runs were
    cfg = run_config(SimJob(workload or WorkloadOptions(), run, config))
    device = Device.of(provenance)
    policy = cfg.make_policy(device)
    v, s, exact, notes = _policy_flags(policy)
    model = model_id(provenance)
    spec_v, spec_s, spec_notes = _spec_flags(cfg, model)
    off_v, off_exact, off_notes = _offload_flags(cfg)
    exact = exact and off_exact
    v += spec_v + off_v
    if s is not None and spec_s is not None:
        s += spec_s
    elif spec_s is None and s is not None:
        s = None
    notes += spec_notes + off_notes
    tp = engine_devices(provenance)
    common_v: list = [("--tensor-parallel-size", tp)]
    common_s: list = [("--tp-size", tp)]
    ep = ((provenance.get("components") or {}).get("moe") or {}).get("ep")
    if isinstance(ep, int) and ep > 1:  # experts split across the engine's GPUs
        common_v.append(("--enable-expert-parallel", None))
        common_s.append(("--ep-size", ep))
    common_v.append(("--enable-prefix-caching" if cfg.prefix_caching
                     else "--no-enable-prefix-caching", None))
    if not cfg.prefix_caching:
        common_s.append(("--disable-radix-cache", None))
    if cfg.engine.async_scheduling:
        common_v.append(("--async-scheduling", None))
    else:
        if not device.cpu:  # the modelled vLLM schedules asynchronously on GPUs by default
            common_v.append(("--no-async-scheduling", None))
        common_s.append(("--disable-overlap-schedule", None))
    mml = cfg.engine.max_model_len
    chunked = getattr(policy, "enable_chunked_prefill", policy.name != "whole")
    cap = getattr(policy, "max_num_batched_tokens", None)
    if not chunked and cap is not None and (mml is None or mml > cap):
        mml = cap  # vLLM refuses max_model_len > max_num_batched_tokens without chunking
        notes.append(f"--max-model-len {cap}: without chunked prefill vLLM needs the model "
                     "length within the step budget (chunksim rejects longer requests too)")
    if mml is not None:
        common_v.append(("--max-model-len", mml))
        common_s.append(("--context-length", mml))
    block_size = cfg.block_size_on(device)
    if block_size != vllm_defaults(device).block_size:
        common_v.append(("--block-size", block_size))
        common_s.append(("--page-size", block_size))
    if cfg.kv_blocks is not None:
        common_v.append(("--num-gpu-blocks-override", cfg.kv_blocks))
        # --kv-blocks is vLLM's num_gpu_blocks, its null block included: SGLang's token
        # pool gets the tokens the other N - 1 blocks hold
        common_s.append(("--max-total-tokens", usable_blocks(cfg.kv_blocks) * block_size))
    else:
        common_v.append(("--gpu-memory-utilization", cfg.gpu_memory_utilization))
    fleet = cfg.fleet
    pd = fleet.pd_counts if fleet.active else None
    replicas = fleet.replicas or 1
    if pd is not None:
        roles = (("prefill", pd[0], "kv_producer"), ("decode", pd[1], "kv_consumer"))
        vllm = tuple(ServeCommand("vllm", role, n, command_text("vllm serve", flag_args(
            VLLM_SERVE, *v, *common_v,
            ("--kv-transfer-config", {"kv_connector": NIXL, "kv_role": kv_role})), model))
            for role, n, kv_role in roles)
        sg = () if s is None else tuple(ServeCommand("sglang", role, n, command_text(
            "sglang", flag_args(SGLANG_SERVE, ("--model-path", model), *s, *common_s,
                                ("--disaggregation-mode", role),
                                ("--disaggregation-transfer-backend", "nixl"))))
            for role, n, _ in roles)
        notes.append(f"P/D {pd[0]}:{pd[1]}: a router (vLLM's disaggregated-serving proxy "
                     "example) sends each request to a prefill instance, then to a decode "
                     f"instance; chunksim's link `{fleet.kv_link}` is the transport NIXL "
                     "uses, not a flag")
        instances = sum(pd)
    else:
        vllm = (ServeCommand("vllm", "serve", replicas, command_text(
            "vllm serve", flag_args(VLLM_SERVE, *v, *common_v), model)),)
        sg = () if s is None else (ServeCommand("sglang", "serve", replicas, command_text(
            "sglang", flag_args(SGLANG_SERVE, ("--model-path", model), *s, *common_s))),)
        instances = replicas
    if replicas > 1 and pd is None:
        notes.append(f"{replicas} instances behind a load balancer routing as chunksim's "
                     f"`{fleet.router or 'round-robin'}` router (no engine flag)")
    bench, bench_notes = bench_command(model, rate, workload, result_dir, config.label)
    notes += bench_notes
    instance_bench = check = None
    name = _result_name(config.label)
    if pd is not None:
        validate = None
        check = (f"`sim validate --against` replays one engine and has no P/D form: read "
                 f"the bench's TTFT and ITL percentiles against {config.label}'s row of "
                 "the table, or validate the policy on one engine (`sim validate --against` "
                 "with a bench of a single `vllm serve` instance)")
    else:
        if replicas > 1:
            name = _result_name(f"{config.label} one instance")
            instance_bench, _ = bench_command(model, rate, workload, result_dir,
                                              f"{config.label} one instance", share=replicas)
            share = parse_command(instance_bench)[1]["--request-rate"]
            check = (f"`sim validate --against` replays one engine, so bench one "
                     f"instance alone at its share of the rate ({share} req/s, 1/{replicas} "
                     "of the fleet's; the bench above checks the whole fleet against the "
                     "table)")
        validate = shlex.join(
            ["sim", "validate", "--against", f"{result_dir}/{name}",
             "--profile", profile_name, "--policy", config.policy.family,
             *(["--variant", config.policy.variant] if config.policy.variant else []),
             *(["--chunk", str(cfg.chunk)] if cfg.chunk is not None else []),
             *sim_flags(cfg), "--out", f"validate-{name.removesuffix('.json')}"])
    return Deployment(config.label, model, instances * tp, vllm, sg, exact, tuple(notes),
                      bench, validate, instance_bench, check)


def _result_name(label: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in label).strip("-")
    while "--" in safe:
        safe = safe.replace("--", "-")
    return f"{safe or 'result'}.json"


def bench_command(model: str, rate: float | None, opts: WorkloadOptions | None,
                  result_dir: str, label: str, share: int = 1) -> tuple[str, list[str]]:
    """`vllm bench serve` replaying the workload of `opts` at `rate` (its request count,
    mean lengths and their spread, its burstiness and seed); notes where the bench tool
    cannot draw what chunksim drew. `share` N: one instance of N, at 1/N of the rate and
    of the requests."""
    notes: list[str] = []
    pairs: list = [("--backend", "vllm"), ("--model", model), ("--dataset-name", "random")]
    n, burst, seed = 1000, 1.0, 0
    if opts is not None:
        import numpy as np

        from chunksim.workloads.options import WorkloadKind, build_workload

        seed = opts.seed
        at_rate = replace(opts, rate=rate) if rate and rate > 0 else opts
        built = build_workload(at_rate)
        reqs = built.requests
        if not (rate and rate > 0) and built.duration_s > 0:  # the workload's own rate
            rate = (len(reqs) - 1) / built.duration_s
        if hasattr(reqs, "prompt_tokens") and not isinstance(reqs, tuple):
            prompt = np.asarray(reqs.prompt_tokens, dtype=float)
            output = np.asarray(reqs.output_tokens, dtype=float)
        else:
            prompt = np.array([r.prompt_tokens for r in reqs], dtype=float)
            output = np.array([r.output_tokens for r in reqs], dtype=float)
        n = len(prompt)
        p_mean, o_mean = max(1, round(prompt.mean())), max(1, round(output.mean()))
        # uniform on [L(1-r), L(1+r)] has std L r / sqrt(3): match the workload's spread
        cv = max(prompt.std() / prompt.mean(), output.std() / output.mean())
        ratio = min(0.99, round(math.sqrt(3) * float(cv), 2))
        pairs += [("--random-input-len", p_mean), ("--random-output-len", o_mean),
                  ("--random-range-ratio", ratio)]
        notes.append(f"the bench draws prompt and output lengths uniformly around the "
                     f"workload's means ({p_mean}, {o_mean} tokens, ratio {ratio}); its "
                     "saved per-request lengths and arrivals are what `sim validate "
                     "--against` replays, so the check is like for like")
        kind = WorkloadKind.TRACE if opts.trace is not None else opts.workload
        if kind is WorkloadKind.GAMMA and opts.burstiness:
            burst = float(opts.burstiness)
        elif kind is WorkloadKind.TRACE:
            notes.append("a trace's own arrival times cannot be given to `vllm bench "
                         "serve`; it draws Poisson gaps at the trace's mean rate")
        elif kind is WorkloadKind.FIXED_RATE:
            burst = 100.0
            notes.append("`vllm bench serve` has no constant-rate arrivals; --burstiness "
                          "100 draws gamma gaps with CV 0.1")
        elif kind is WorkloadKind.BURST:
            rate = None
        elif kind in (WorkloadKind.LONG_PROMPT, WorkloadKind.SHARED_PREFIX):
            notes.append(f"the bench's random dataset has no {kind.value} structure "
                         "(one long prompt at a set time, shared system prompts)")
    if share > 1:
        n = max(1, math.ceil(n / share))
        rate = rate / share if rate and rate > 0 else rate
    pairs.append(("--ignore-eos", None))
    pairs.append(("--request-rate", float(f"{rate:.4g}") if rate and rate > 0
                  else float("inf")))
    pairs += [("--burstiness", burst), ("--num-prompts", n), ("--seed", seed),
              ("--percentile-metrics", "ttft,tpot,itl,e2el"),
              ("--metric-percentiles", "50,90,95,99"),
              ("--save-result", None), ("--save-detailed", None),
              ("--result-dir", result_dir), ("--result-filename", _result_name(label))]
    return command_text("vllm bench serve", flag_args(VLLM_BENCH, *pairs)), notes


def sim_flags(cfg: RunConfig) -> list[str]:
    """The chunksim flags of the settings `cfg` sets beyond policy and chunk (the knobs
    the user gave, engine and KV settings off their defaults), for the `sim validate`
    line: the replay runs what was deployed."""
    from chunksim.core.knobs import flag_names
    from chunksim.policies import POLICIES

    cls = POLICIES[cfg.policy]
    out: list[str] = []
    for name, value in cfg.knobs:
        if name in ("variant", cls.chunk_knob):
            continue
        names = flag_names(cls, name)
        if isinstance(value, bool):  # an on/off pair: the first spelling is on
            out.append(names[0] if value else names[1])
        elif isinstance(value, tuple):  # repeated CLASS=N items
            out += [w for cls_, n in value for w in (names[0], f"{cls_}={n}")]
        else:
            out += [names[0], str(value)]
    if not cfg.prefix_caching:
        out.append("--no-prefix-caching")
    if cfg.engine.async_scheduling:
        out.append("--async-scheduling")
    for flag, value, default in (
            ("--kv-blocks", cfg.kv_blocks, None), ("--block-size", cfg.block_size, None),
            ("--gpu-memory-utilization", cfg.gpu_memory_utilization, GPU_MEMORY_UTILIZATION),
            ("--max-model-len", cfg.engine.max_model_len, None),
            ("--step-overhead-ms", None if cfg.step_overhead_s is None
             else cfg.step_overhead_s * 1000.0, None),
            ("--expert-skew", cfg.expert_skew, None),
            ("--kv-offload-gib", cfg.offload.kv_offload_gib or None, None),
            ("--kv-offload-link", cfg.offload.kv_offload_link if cfg.offload.kv_offload_gib
             else "pcie-gen5", "pcie-gen5"),
            ("--kv-offload-write-policy", cfg.offload.kv_offload_write_policy, None)):
        if value != default:
            out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    spec = cfg.engine.speculative
    if spec.enabled:
        out += ["--speculative-method", spec.speculative_method,
                "--num-speculative-tokens", str(spec.num_speculative_tokens)]
        if spec.spec_acceptance:
            out += ["--spec-acceptance", ",".join(f"{r:g}" for r in spec.spec_acceptance)]
        else:
            out += ["--spec-acceptance-rate", f"{spec.spec_acceptance_rate:g}"]
        if spec.draft_profile is not None:
            out += ["--draft-profile", str(spec.draft_profile)]
        if spec.draft_head_layers is not None:
            out += ["--draft-head-layers", f"{spec.draft_head_layers:g}"]
    return out
