"""Answers that deploy: every command a verdict prints is built from the one flag table
(`sweep.engine_flags`) and parses back under it, for every policy, variant and knob
combination; the flags carry the knobs they claim; cost follows its closed form."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.latency.profile import load_profile
from chunksim.policies import POLICIES, VARIANTS
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config, PolicySpec
from chunksim.sweep.cost import GPU_PRICES, CostConfig, gpu_hours_per_day, usd_per_mtok
from chunksim.sweep.deploy import deployment
from chunksim.sweep.engine_flags import (
    COMMANDS,
    ENGINE_VERSIONS,
    SGLANG_SERVE,
    VLLM_BENCH,
    VLLM_SERVE,
    flag_args,
    parse_command,
)
from chunksim.sweep.fleets import FleetSpec
from chunksim.workloads.options import WorkloadKind, WorkloadOptions

H200 = load_profile("llama-3.1-8b-h200")
RUNNER = CliRunner()


def _commands(d) -> list[str]:
    return [c.text for c in (*d.vllm, *d.sglang)] + [d.bench]


def _parsed(d) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for text in _commands(d):
        name, flags = parse_command(text)
        out.setdefault(name, []).append(flags)
    return out


policy_specs = st.sampled_from([PolicySpec(f, v or None) for f in POLICIES
                                for v in (VARIANTS[f] or ("",))])
budget_knobs = st.fixed_dictionaries({}, optional={
    "long_prefill_token_threshold": st.integers(0, 4096),
    "max_num_partial_prefills": st.integers(0, 4),
    "priority_scheduling": st.booleans(),
    "enable_chunked_prefill": st.booleans(),
    "reserve_full_prompt": st.booleans(),
    "max_num_seqs": st.integers(1, 2048),
})


@settings(max_examples=60, deadline=None)
@given(spec=policy_specs, chunk=st.integers(16, 32768), knobs=budget_knobs,
       prefix=st.booleans(), async_=st.booleans(), kv_blocks=st.none() | st.integers(2, 10**6),
       block=st.sampled_from([16, 32]), mml=st.none() | st.integers(64, 131072),
       fleet=st.none() | st.integers(1, 4).map(lambda n: FleetSpec(replicas=n))
       | st.tuples(st.integers(1, 3), st.integers(1, 3)).map(lambda p: FleetSpec(pd=p)),
       rate=st.none() | st.floats(0.1, 500))
def test_every_emitted_flag_is_in_the_table_and_parses(spec, chunk, knobs, prefix, async_,
                                                       kv_blocks, block, mml, fleet, rate):
    from chunksim.policies import knob_owners

    owners = knob_owners()
    own = {k: v for k, v in knobs.items() if spec.family in owners[k]}
    if spec.family in ("budget", "vllm") and own.get("enable_chunked_prefill") is False:
        mml = None  # vLLM refuses max_model_len > budget without chunking; not our subject
    run = RunConfig(knobs=own, prefix_caching=prefix, kv_blocks=kv_blocks, block_size=block,
                    engine=EngineConfig(async_scheduling=async_, max_model_len=mml))
    cfg = Config(spec, chunk if spec.chunked else None, fleet)
    try:  # a combination the policy itself refuses (e.g. sjf with --priority) is no case
        run.variant(spec.family, cfg.chunk, variant=spec.variant).make_policy("NVIDIA H200")
    except ValueError:
        assume(False)
    d = deployment(cfg, run, H200.provenance, rate, WorkloadOptions(num_requests=20))
    parsed = _parsed(d)  # raises on any flag outside the table
    assert set(parsed) <= set(COMMANDS)
    for flags in parsed["vllm serve"]:
        assert set(flags) <= set(VLLM_SERVE)
        # the knobs reach the flags that carry them
        assert ("--enable-prefix-caching" in flags) == prefix
        assert ("--no-enable-prefix-caching" in flags) == (not prefix)
        assert ("--async-scheduling" in flags) == async_
        # the modelled vLLM schedules asynchronously on GPUs unless told not to
        assert ("--no-async-scheduling" in flags) == (not async_)
        if kv_blocks is not None:
            assert flags["--num-gpu-blocks-override"] == str(kv_blocks)
        if mml is not None and "--no-enable-chunked-prefill" not in flags:
            assert flags["--max-model-len"] == str(mml)
        if spec.family in ("budget", "sjf", "vllm"):
            assert flags["--max-num-batched-tokens"] == str(chunk)
            assert (flags.get("--scheduling-policy") == "priority") == bool(
                own.get("priority_scheduling"))
            chunked = own.get("enable_chunked_prefill", True)
            assert ("--enable-chunked-prefill" in flags) == chunked
            assert ("--no-enable-chunked-prefill" in flags) == (not chunked)
        if spec.family == "chunk":
            assert flags["--long-prefill-token-threshold"] == str(chunk)
        if spec.family == "whole":
            assert "--no-enable-chunked-prefill" in flags
        if "--no-enable-chunked-prefill" in flags:  # else vLLM refuses to start
            assert int(flags["--max-model-len"]) <= int(flags["--max-num-batched-tokens"])
    for flags in parsed.get("sglang", []):
        assert set(flags) <= set(SGLANG_SERVE)
        assert ("--disable-radix-cache" in flags) == (not prefix)
        # --kv-blocks N is vLLM's num_gpu_blocks: its null block holds no KV, so SGLang's
        # token pool is the N - 1 others (`core.kv_cache.usable_blocks`)
        assert flags.get("--max-total-tokens") == (
            None if kv_blocks is None else str((kv_blocks - 1) * block))
    (bench,) = parsed["vllm bench serve"]
    assert {"--save-result", "--save-detailed", "--seed", "--num-prompts"} <= set(bench)
    if rate is not None:
        assert math.isclose(float(bench["--request-rate"]), rate, rel_tol=1e-3)
    if fleet is not None and fleet.pd is not None:
        roles = {c.role: c for c in d.vllm}
        assert roles["prefill"].count == fleet.pd[0] and roles["decode"].count == fleet.pd[1]
        for c, kv_role in ((roles["prefill"], "kv_producer"), (roles["decode"], "kv_consumer")):
            kv = json.loads(parse_command(c.text)[1]["--kv-transfer-config"])
            assert kv == {"kv_connector": "NixlConnector", "kv_role": kv_role}
        # `--against` replays one engine: no validate line, and the check says what to do
        assert d.validate is None and "no P/D form" in d.check
        assert d.gpus == sum(fleet.pd)
    elif fleet is not None:
        assert d.vllm[0].count == fleet.replicas and d.gpus == fleet.replicas
    if fleet is not None and fleet.pd is None and fleet.replicas > 1:
        # one instance benched alone at its share, and that is what the line replays
        one = parse_command(d.instance_bench)[1]
        assert d.validate.split()[3] == f"bench/{one['--result-filename']}"
        if rate is not None:
            assert math.isclose(float(one["--request-rate"]), rate / fleet.replicas,
                                rel_tol=1e-3)
        assert int(one["--num-prompts"]) == -(-20 // fleet.replicas)
    if d.validate is not None:
        assert "--replicas" not in d.validate and "--pd" not in d.validate
        assert "--out" in d.validate.split()


@pytest.mark.parametrize("spec, exact", [
    (PolicySpec("budget"), True), (PolicySpec("whole", "mixed"), True),
    (PolicySpec("whole"), False), (PolicySpec("sjf"), False),
    (PolicySpec("chunk"), False), (PolicySpec("chunk", "two-pass"), False),
    (PolicySpec("chunk", "alternate"), False)])
def test_policies_without_an_engine_equivalent_say_so(spec, exact):
    d = deployment(Config(spec, 512 if spec.chunked else None), RunConfig(),
                   H200.provenance, 4.0)
    assert d.exact is exact
    if not exact:
        assert any("equivalent" in n or "V0" in n or "no vLLM" in n for n in d.notes)
    # SGLang is given only where it runs the policy: not for sjf, chunk, whole:mixed
    assert bool(d.sglang) == (spec.family == "budget" or spec.label == "whole")


def test_parse_command_refuses_flags_outside_the_table_and_bad_values():
    ok = "vllm serve m --max-num-seqs 8 --enable-prefix-caching"
    assert parse_command(ok) == ("vllm serve", {"--max-num-seqs": "8",
                                                "--enable-prefix-caching": None})
    with pytest.raises(ValueError, match="--max-num-seq.*not in the flag table"):
        parse_command("vllm serve m --max-num-seq 8")
    with pytest.raises(ValueError, match="is not a int"):
        parse_command("vllm serve m --max-num-seqs eight")
    with pytest.raises(ValueError, match="one of fcfs\\|priority"):
        parse_command("vllm serve m --scheduling-policy sjf")
    with pytest.raises(ValueError, match="needs a value"):
        parse_command("vllm bench serve --num-prompts")
    with pytest.raises(ValueError, match="not a command"):
        parse_command("trtllm-serve m")
    with pytest.raises(KeyError):  # the builder cannot emit a flag the table lacks
        flag_args(VLLM_SERVE, ("--chunk-size", 5))


def test_the_table_names_its_versions_and_every_flag_says_what_it_carries():
    assert set(ENGINE_VERSIONS) == {"vllm", "sglang"}
    for table in (VLLM_SERVE, VLLM_BENCH, SGLANG_SERVE):
        for flag, row in table.items():
            assert flag.startswith("--") and row.carries and row.flag == flag


@settings(max_examples=50, deadline=None)
@given(gpus=st.integers(1, 64), price=st.floats(0.01, 50), tok=st.floats(1, 1e6))
def test_cost_closed_form(gpus, price, tok):
    assert math.isclose(usd_per_mtok(gpus, price, tok), gpus * price / (tok * 3600) * 1e6)
    assert gpu_hours_per_day(gpus) == 24 * gpus
    assert usd_per_mtok(gpus, price, 0.0) == math.inf


def test_cost_presets_carry_source_and_date_and_flags_refuse_both():
    for p in GPU_PRICES.values():
        assert p.usd_per_hour > 0 and p.source and re.fullmatch(r"\d{4}-\d{2}", p.date)
    assert CostConfig(gpu="h200-sxm").price.usd_per_hour == GPU_PRICES["h200-sxm"].usd_per_hour
    assert CostConfig().price is None
    with pytest.raises(ValueError, match="give one"):
        CostConfig(gpu_cost_per_hour=2.0, gpu="h100-sxm")
    with pytest.raises(ValueError, match="no price preset"):
        CostConfig(gpu="tpu")


def _printed_commands(output: str) -> list[str]:
    """Every command line the console printed."""
    lines = [ln.strip().removeprefix("then: ").removeprefix("Check it on the hardware: ")
             for ln in output.splitlines()]
    lines = [re.sub(r"^(\d+× )?(prefill: |decode: )?", "", ln) for ln in lines]
    return [ln for ln in lines if ln.startswith(("vllm ", "python -m sglang"))]


def test_compare_cli_ends_with_the_deployment_and_its_cost(tmp_path):
    out = tmp_path / "c"
    res = RUNNER.invoke(app, ["compare", "-n", "30", "--policies", "budget,whole",
                              "--chunks", "512", "--seeds", "0", "--workers", "1",
                              "--gpu-cost-per-hour", "2.5", "--no-report", "--out", str(out)])
    assert res.exit_code == 0, res.output
    printed = _printed_commands(res.output)
    assert any(c.startswith("vllm serve") for c in printed)
    assert any(c.startswith("vllm bench serve") for c in printed)
    for c in printed:
        parse_command(c)
    doc = json.loads((out / "comparison.json").read_text())
    rec = doc["verdict"]["recommended"]["config"]
    assert doc["deploy"]["label"] == rec
    costs = {c["label"]: c for c in doc["cost"]["configurations"]}
    assert set(costs) == {"budget 512", "whole"}
    rows = {r["config"]: r for r in doc["rows"]}
    for label, c in costs.items():
        tok = rows[label]["output_throughput"]
        assert math.isclose(c["usd_per_mtok"], 1 * 2.5 / (tok * 3600) * 1e6)
        assert c["gpu_hours_per_day"] == 24


@pytest.mark.slow
def test_capacity_report_reads_as_a_cost(tmp_path):
    out = tmp_path / "k"
    res = RUNNER.invoke(app, ["capacity", "-n", "40", "--policies", "budget", "--chunks",
                              "512", "--seeds", "0", "--tol", "0.3", "--workers", "1",
                              "--slo", "p99_ttft_ms=5000", "--gpu", "h100-sxm", "--no-svg",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "capacity.json").read_text())
    (c,) = doc["cost"]["configurations"]
    cap = doc["configurations"][0]
    assert c["rate"] == cap["max_rate"] > 0
    assert doc["cost"]["price"]["name"] == "h100-sxm"
    report = Path(out / "report.md").read_text()
    assert "## Deploy it" in report and "**Cost: $" in report
    assert report.index("## Deploy it") < report.index("Capacity under the SLOs")
    assert "mercatus-ai.com" in report  # the preset's source
    bench = next(ln for ln in report.splitlines() if ln.startswith("vllm bench serve"))
    assert math.isclose(float(parse_command(bench)[1]["--request-rate"]), cap["max_rate"],
                        rel_tol=1e-3)


def test_target_rate_search_deploys_the_fewest_gpus(tmp_path):
    out = tmp_path / "g"
    res = RUNNER.invoke(app, ["capacity", "-n", "40", "--target-rate", "30", "--max-gpus",
                              "2", "--policies", "budget", "--chunks", "512", "--seeds", "0",
                              "--workers", "1", "--gpu-cost-per-hour", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "gpus.json").read_text())
    if doc["fewest_gpus"] is None:
        assert "deploy" not in doc
        return
    assert doc["deploy"]["gpus"] == doc["fewest_gpus"]
    for c in doc["cost"]["configurations"]:
        assert c["rate"] == 30.0 and c["gpu_hours_per_day"] == 24 * c["gpus"]


def test_bench_line_follows_the_workload_arrivals():
    gamma = WorkloadOptions(workload=WorkloadKind.GAMMA, burstiness=0.5, num_requests=50,
                            seed=7)
    d = deployment(Config(PolicySpec("budget"), 2048), RunConfig(), H200.provenance, 3.0,
                   gamma)
    flags = parse_command(d.bench)[1]
    assert flags["--burstiness"] == "0.5" and flags["--seed"] == "7"
    assert flags["--num-prompts"] == "50" and flags["--request-rate"] == "3"
    burst = WorkloadOptions(workload=WorkloadKind.BURST, num_requests=10)
    d = deployment(Config(PolicySpec("budget"), 2048), RunConfig(), H200.provenance, 3.0,
                   burst)
    assert parse_command(d.bench)[1]["--request-rate"] == "inf"


@pytest.mark.slow
def test_gpus_split_answer_deploys_the_split_and_prices_each(tmp_path):
    out = tmp_path / "s"
    res = RUNNER.invoke(app, ["capacity", "-n", "40", "--gpus", "2", "--policies", "budget",
                              "--chunks", "512", "--seeds", "0", "--tol", "0.3", "--workers",
                              "1", "--gpu-cost-per-hour", "2", "--no-report", "--out",
                              str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "capacity.json").read_text())
    costs = doc["cost"]["configurations"]
    assert {c["label"] for c in costs} == {"2x · budget 512", "P/D 1:1 · budget 512"}
    assert all(c["gpus"] == 2 and c["gpu_hours_per_day"] == 48 for c in costs)
    dep = doc["deploy"]
    assert dep["gpus"] == 2 and sum(c["count"] for c in dep["vllm"]) == 2
    for c in dep["vllm"] + dep["sglang"]:
        parse_command(c["text"])
    parse_command(dep["bench"])


def test_the_validate_line_replays_what_was_deployed(tmp_path):
    """The settings on the `sim validate` line are chunksim flags (sim run takes them) and
    carry the deployed configuration."""
    import shlex

    run = RunConfig(knobs={"priority_scheduling": True, "max_num_seqs": 64,
                           "long_prefill_token_threshold": 128},
                    prefix_caching=False, kv_blocks=2000,
                    engine=EngineConfig(async_scheduling=True))
    d = deployment(Config(PolicySpec("budget"), 512), run, H200.provenance, 2.0,
                   profile_name="tiny-cpu")
    words = shlex.split(d.validate)
    assert words[:3] == ["sim", "validate", "--against"]
    args = words[words.index("--profile"):]
    res = RUNNER.invoke(app, ["run", *args, "-n", "5", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "v" / "summary.json").read_text())
    p = s["policy_params"]
    assert (p["max_num_batched_tokens"], p["max_num_seqs"], p["long_prefill_token_threshold"],
            p["priority_scheduling"]) == (512, 64, 128, True)
    assert s["prefix_caching"] is False and s["async_scheduling"] is True
    assert s["kv_blocks"] == 2000


@pytest.mark.parametrize("policy", [None, "write-through", "write-back"])
def test_a_cpu_kv_tier_reaches_the_serve_and_validate_lines(policy, tmp_path):
    """vLLM's offloading connector writes through: a write-back tier (SGLang HiCache's)
    gets the closest flags and says so, and the validate line replays the tier modelled."""
    import shlex

    from chunksim.sim.engine.offload_config import OffloadConfig

    run = RunConfig(offload=OffloadConfig(kv_offload_gib=64, kv_offload_write_policy=policy))
    d = deployment(Config(PolicySpec("budget"), 512), run, H200.provenance, 2.0,
                   profile_name="tiny-cpu")
    (serve,) = _parsed(d)["vllm serve"]
    assert serve["--kv-offloading-size"] == "64" and serve["--kv-offloading-backend"] == (
        "native")
    write_back = policy == "write-back"
    assert d.exact is not write_back
    assert any("write_back" in n and "closest" in n for n in d.notes) is write_back
    words = shlex.split(d.validate)
    assert words[words.index("--kv-offload-gib") + 1] == "64"
    assert ("--kv-offload-write-policy" in words) is (policy is not None)
    args = words[words.index("--profile"):]
    res = RUNNER.invoke(app, ["run", *args, "-n", "5", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "v" / "summary.json").read_text())
    assert s["kv_offload_write_policy"] == (policy or "write-through")


def test_every_bundled_gpu_has_a_price_preset():
    """`--gpu` names a preset for each device a bundled profile was measured on."""
    from chunksim.latency.profile import bundled_profiles

    devices = set()
    for name in bundled_profiles():
        dev = str(load_profile(name).provenance.get("device_name") or "").lower()
        for gpu in ("a100", "h100", "h200", "b200"):
            if gpu in dev.replace("_", " ").replace("-", " ").split() or gpu in dev:
                devices.add(gpu)
    assert "b200" in devices
    for gpu in devices:
        assert any(p.startswith(gpu) for p in GPU_PRICES), gpu
    assert CostConfig(gpu="b200").price.usd_per_hour == 5.25


@pytest.mark.slow
def test_capacity_with_rejections_is_offered_and_costs_what_is_served(tmp_path):
    """--max-reject-pct 90: the capacity met while requests are rejected is labelled as
    offered, the served rate is beside it, and the cost counts the served tokens."""
    out = tmp_path / "r"
    res = RUNNER.invoke(app, ["capacity", "-n", "200", "--max-model-len", "700",
                              "--policies", "budget", "--chunks", "512", "--seeds", "0",
                              "--max-reject-pct", "90", "--gpu", "b200", "--workers", "1",
                              "--no-svg", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "capacity.json").read_text())
    cap = doc["configurations"][0]
    at = cap["summary_at_max_rate"]
    assert at["rejected"] > 0 and cap["rejected_pct_at_max"] > 0
    assert cap["served_rate_at_max"] == at["request_throughput"] < cap["max_rate"]
    (c,) = doc["cost"]["configurations"]
    assert c["rate"] == cap["max_rate"] and c["served_rate"] == at["request_throughput"]
    assert math.isclose(c["usd_per_mtok"], 5.25 / (at["output_throughput"] * 3600) * 1e6)
    assert "max rate req/s offered" in res.output and "served req/s" in res.output
    assert f"{cap['max_rate']:.0f} req/s offered ({at['request_throughput']:.3g} req/s served" \
        in res.output
    report = (out / "report.md").read_text()
    assert "capacity req/s (offered)" in report and "served req/s" in report


def test_an_expert_parallel_profile_deploys_expert_parallel():
    """The profile's MoE layers were timed split over its GPUs: the engines split them
    too, on as many GPUs as the deployment counts."""
    moe = load_profile("qwen3-30b-a3b-h200-ep2")
    ep = moe.provenance["components"]["moe"]["ep"]
    d = deployment(Config(PolicySpec("budget"), 2048), RunConfig(), moe.provenance, 4.0)
    v = parse_command(d.vllm[0].text)[1]
    s = parse_command(d.sglang[0].text)[1]
    assert "--enable-expert-parallel" in v and s["--ep-size"] == str(ep)
    assert int(v["--tensor-parallel-size"]) == d.gpus == ep
    dense = deployment(Config(PolicySpec("budget"), 2048), RunConfig(), H200.provenance, 4.0)
    assert "--enable-expert-parallel" not in dense.vllm[0].text
