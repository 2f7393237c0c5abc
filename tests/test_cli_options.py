"""Flags derived from the config dataclasses: one field is one flag, its docstring the help,
and every policy knob reaches the policy it belongs to (or is refused)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.cli.options import bundle, options_of
from chunksim.core.knobs import field_docs, flag_names, knob
from chunksim.policies import POLICIES
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions

RUNNER = CliRunner()


def _help(*cmd: str) -> str:
    res = RUNNER.invoke(app, [*cmd, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    return " ".join(res.output.replace("│", " ").split())


def _run_json(*args: str) -> dict:
    res = RUNNER.invoke(app, ["run", "-n", "12", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output.strip().splitlines()[-1])


def _flagged(cls):
    return [f for f in fields(cls) if "flag" in f.metadata and not f.metadata["flag"].hidden]


@pytest.mark.parametrize("cls", [WorkloadOptions, RunConfig, EngineConfig, *POLICIES.values()])
def test_every_knob_is_a_flag_of_sim_run_with_its_docstring_as_help(cls):
    text = _help("run")
    docs = field_docs(cls)
    shared = {f.name for f in fields(RunConfig)} if cls in POLICIES.values() else set()
    for f in _flagged(cls):
        if f.name in shared:  # chunk's own `chunk` is RunConfig's --chunk
            continue
        assert flag_names(cls, f.name)[0] in text, f.name
        assert docs[f.name] and docs[f.name][:40] in text, f.name


def test_grid_commands_take_every_knob_but_the_single_policy_ones():
    text = _help("compare")
    assert "--max-num-batched-tokens" in text and "--workload" in text
    assert "--policies" in text and "--policy " not in text and "--variant" not in text


def test_vllm_flag_names_reach_the_policy():
    s = _run_json("--policy", "budget", "--max-num-batched-tokens", "512",
                  "--long-prefill-token-threshold", "128", "--max-num-partial-prefills", "2",
                  "--max-num-seqs", "7", "--no-enable-prefix-caching")
    p = s["policy_params"]
    assert (p["max_num_batched_tokens"], p["long_prefill_token_threshold"],
            p["max_num_partial_prefills"], p["max_num_seqs"]) == (512, 128, 2, 7)
    assert s["prefix_caching"] is False and s["policy_defaults"] == {}


def test_old_spellings_still_work():
    s = _run_json("--policy", "budget", "--chunk", "256", "--long-prefill-threshold", "64",
                  "--max-partial-prefills", "1", "--no-prefix-caching")
    p = s["policy_params"]
    assert (p["max_num_batched_tokens"], p["long_prefill_token_threshold"],
            p["max_num_partial_prefills"]) == (256, 64, 1)
    assert s["prefix_caching"] is False


def test_unset_device_defaults_are_reported():
    s = _run_json("--policy", "chunk", "--chunk", "128")
    assert s["policy_params"]["chunk"] == 128
    assert set(s["policy_defaults"]) == {"max_num_seqs"}
    assert "default on CPU" in s["policy_defaults"]["max_num_seqs"]["why"]
    assert s["policy_params"]["max_num_seqs"] == 128


@pytest.mark.parametrize("args,message", [
    (["--policy", "whole", "--long-prefill-token-threshold", "8"], "knob of budget, sjf"),
    (["--policy", "chunk", "--max-num-batched-tokens", "8"], "does not apply to --policy chunk"),
    (["--policy", "budget", "--variant", "mixed"], "--variant does not apply"),
])
def test_a_knob_of_another_policy_is_refused(args, message):
    res = RUNNER.invoke(app, ["run", "-n", "5", *args])
    assert res.exit_code != 0 and message in str(res.exception)


@dataclass(frozen=True)
class Toy:
    depth: int = knob(3, "--depth", "-d", min=1, panel="Toy")
    """How deep to go, in levels."""
    wide: bool = knob(False, "--wide/--narrow")
    """Go wide."""


def test_a_new_knob_is_one_field():
    toy = typer.Typer()
    seen = {}

    @toy.command()
    @bundle(options_of(Toy), lambda v: Toy(**v), "cfg")
    def go(cfg: Toy) -> None:
        seen["cfg"] = cfg

    assert RUNNER.invoke(toy, ["-d", "5", "--wide"]).exit_code == 0
    assert seen["cfg"] == Toy(5, True)
    assert RUNNER.invoke(toy, ["--depth", "0"]).exit_code != 0  # min=1 enforced
    text = " ".join(RUNNER.invoke(toy, ["--help"], env={"COLUMNS": "300"}).output.split())
    assert "How deep to go, in levels." in text and "--narrow" in text


def test_field_docs_reads_docstrings_through_base_classes():
    docs = field_docs(POLICIES["sjf"])  # every knob is declared on TokenBudgetPolicy
    assert docs["max_num_batched_tokens"].startswith("Token budget per step")
    assert "\n" not in docs["priority_scheduling"]
