"""Every next step a verdict prints works as printed. Each answer (compare, capacity,
`--gpus`, `--target-rate`, a speculative recommendation) is run with the CLI; every command
it ends with is pasted back: the engine's (`vllm serve`, SGLang, `vllm bench serve`)
through the flag table, chunksim's own (`sim validate --against`, with a bench file made
up the way examples/make_made_up_results.py makes one) with the CLI. A fleet with no
validate form says what to do instead."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.latency.profile import load_profile
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.engine_flags import parse_command
from chunksim.validate.bench_format import vllm_result
from chunksim.workloads.options import WorkloadOptions, build_workload

pytestmark = pytest.mark.slow  # each case runs an answer, then its commands

RUNNER = CliRunner()
SMALL = ["-n", "40", "--seeds", "0"]
CAP = [*SMALL, "--tol", "0.3", "--workers", "1"]
SPEC = ["--speculative-method", "eagle", "--num-speculative-tokens", "2",
        "--spec-acceptance-rate", "0.7"]

CASES = {
    "compare-knobs": ["compare", *SMALL, "--policies", "budget,chunk", "--chunks", "512",
                      "--max-num-seqs", "64", "--no-prefix-caching", "--async-scheduling",
                      "--block-size", "32", "--max-model-len", "16384", "--out", "{tmp}/c"],
    "compare-pd": ["compare", *SMALL, "--policies", "budget", "--chunks", "512", "--pd", "1:1",
                   "--out", "{tmp}/c"],
    "capacity-offload": ["capacity", *CAP, "--policies", "budget,chunk", "--chunks", "512",
                         "--kv-offload-gib", "1", "--out", "{tmp}/c"],
    "capacity-gpus": ["capacity", *CAP, "--gpus", "2", "--policies", "budget",
                      "--chunks", "512"],
    "capacity-target-rate": ["capacity", *SMALL, "--workers", "1", "--policies", "budget",
                             "--chunks", "512", "--target-rate", "20", "--max-gpus", "2"],
    "compare-speculative": ["compare", *SMALL, "--policies", "budget", "--chunks", "512",
                            *SPEC, "--out", "{tmp}/c"],
    "capacity-speculative-ngram": ["capacity", *CAP, "--policies", "budget", "--chunks",
                                   "512", "--speculative-method", "ngram",
                                   "--num-speculative-tokens", "3", "--spec-acceptance",
                                   "0.6,0.4,0.2"],
}


def emitted(text: str) -> dict[str, list[str]]:
    """The commands an answer's console ends with, by kind (the `N× role:` prefix off)."""
    out: dict[str, list[str]] = {"serve": [], "sglang": [], "bench": [], "validate": []}
    for line in text.splitlines():
        line = re.sub(r"^(\d+× )?((prefill|decode): )?", "", line.strip())
        line = line.removeprefix("Check it on the hardware: ").removeprefix("then: ")
        if line.startswith("vllm serve "):
            out["serve"].append(line)
        elif line.startswith("python -m sglang.launch_server"):
            out["sglang"].append(line)
        elif line.startswith("vllm bench serve "):
            out["bench"].append(line)
        elif line.startswith("sim validate "):
            out["validate"].append(line)
    return out


def made_up_bench(bench: str, path: Path) -> None:
    """A `vllm bench serve --save-detailed` result for the bench line `bench`: its request
    count (at most 30), mean lengths, rate and seed, simulated on the tiny profile. MADE
    UP: no engine ran it."""
    flags = parse_command(bench)[1]
    rate = float(flags["--request-rate"])
    opts = WorkloadOptions(rate=rate if rate != float("inf") else 8.0,
                           num_requests=min(30, int(flags["--num-prompts"])),
                           prompt_mean=int(flags["--random-input-len"]),
                           output_mean=int(flags["--random-output-len"]),
                           seed=int(flags["--seed"]))
    result, _ = simulate(build_workload(opts), load_profile("tiny-cpu"),
                         RunConfig(policy="budget", chunk=512))
    doc = vllm_result(result.requests, request_rate=rate, model_id="made-up/tiny",
                      label="MADE UP for a test: simulated, not measured")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def run_validate(line: str, cwd: Path, monkeypatch) -> Path:
    """Paste a `sim validate` line back, in `cwd`; the folder it wrote."""
    words = shlex.split(line)
    assert words[:3] == ["sim", "validate", "--against"]
    monkeypatch.chdir(cwd)
    res = RUNNER.invoke(app, words[1:])
    assert res.exit_code == 0, (line, res.output[-2000:])
    out = cwd / words[words.index("--out") + 1]
    assert (out / "validation.json").is_file()
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_every_printed_next_step_runs_as_printed(case, tmp_path, monkeypatch):
    args = [a.replace("{tmp}", str(tmp_path)) for a in CASES[case]]
    res = RUNNER.invoke(app, args)
    assert res.exit_code == 0, res.output[-3000:]
    cmds = emitted(res.output)
    assert cmds["serve"] and cmds["bench"], res.output[-3000:]
    for line in cmds["serve"] + cmds["sglang"] + cmds["bench"]:
        parse_command(line)  # every flag in the table, every value of its kind
    serves = [parse_command(x)[1] for x in cmds["serve"]]
    if "SPEC" in case.upper() or "speculative" in case:
        k = int(args[args.index("--num-speculative-tokens") + 1])
        method = args[args.index("--speculative-method") + 1]
        for flags in serves:
            doc = json.loads(flags["--speculative-config"])
            assert doc["num_speculative_tokens"] == k and doc["method"] == method
        assert all(f"--num-speculative-tokens {k}" in v for v in cmds["validate"])
        sglang = [parse_command(x)[1] for x in cmds["sglang"]]
        if method == "ngram":
            assert not sglang and "SGLang equivalent: none" in res.output
        else:
            assert all(int(s["--speculative-num-steps"]) == k for s in sglang)
    else:
        assert all("--speculative-config" not in f for f in serves)
    if case == "compare-knobs":
        assert all(f["--max-num-seqs"] == "64" and f["--block-size"] == "32" for f in serves
                   if "--max-num-seqs" in f)
    if case == "capacity-offload":
        assert all(f["--kv-offloading-size"] == "1" for f in serves)
        assert "--kv-offload-gib 1" in cmds["validate"][0]
        # the report and capacity.json carry the same lines as the console
        report = emitted((tmp_path / "c" / "report.md").read_text())
        assert report["serve"] == cmds["serve"] and report["validate"] == cmds["validate"]
        doc = json.loads((tmp_path / "c" / "capacity.json").read_text())["deploy"]
        assert [c["text"] for c in doc["vllm"]] == cmds["serve"]
    if case == "compare-pd":
        # `sim validate --against` replays one engine: no line, and what to do instead
        assert not cmds["validate"] and "no P/D form" in res.output
        return
    (validate,) = cmds["validate"]
    against = shlex.split(validate)[3]
    # the file the line replays is the one a printed bench line saves
    benches = {f"{f['--result-dir']}/{f['--result-filename']}": line for line in cmds["bench"]
               for f in [parse_command(line)[1]]}
    assert against in benches, (against, list(benches))
    if case == "capacity-gpus":  # replicas: one instance benched alone, at its share
        assert "2x" in res.output.split("Deploy ")[1].split("(")[0]
        fleet, one = (parse_command(b)[1] for b in cmds["bench"])
        assert benches[against] == cmds["bench"][1]
        assert float(one["--request-rate"]) == pytest.approx(
            float(fleet["--request-rate"]) / 2, rel=1e-3)
    made_up_bench(benches[against], tmp_path / against)
    out = run_validate(validate, tmp_path, monkeypatch)
    report = json.loads((out / "validation.json").read_text())
    assert report  # a validation was written from the bench file


def test_a_speculative_serve_line_parses_and_carries_its_config():
    """The closed form of the case above, without the CLI: vLLM's and SGLang's flags of a
    speculative recommendation, as `sweep.deploy` builds them."""
    from chunksim.core.speculative import SpecConfig
    from chunksim.sim.engine.engine import EngineConfig
    from chunksim.sweep.configs import Config, PolicySpec
    from chunksim.sweep.deploy import deployment

    for method, k in (("eagle", 3), ("mtp", 1), ("ngram", 4), ("draft-model", 2)):
        draft = "tiny-cpu" if method == "draft-model" else None
        run = RunConfig(engine=EngineConfig(speculative=SpecConfig(
            speculative_method=method, num_speculative_tokens=k, spec_acceptance_rate=0.6,
            draft_profile=draft)))
        d = deployment(Config(PolicySpec("budget"), 2048, spec_tokens=k), run,
                       load_profile("llama-3.1-8b-h200").provenance, 4.0)
        doc = json.loads(parse_command(d.vllm[0].text)[1]["--speculative-config"])
        assert doc["method"] == method.replace("-", "_") and doc["num_speculative_tokens"] == k
        assert ("model" in doc) == (method in ("eagle", "draft-model"))
        if draft:  # the draft is the model its profile measured
            assert doc["model"] == load_profile(draft).provenance["model"]["name"]
        words = shlex.split(d.validate)
        assert words[words.index("--num-speculative-tokens") + 1] == str(k)
        assert words[words.index("--speculative-method") + 1] == method
        if method == "ngram":
            assert d.sglang == ()
        else:
            s = parse_command(d.sglang[0].text)[1]
            assert s["--speculative-num-draft-tokens"] == str(k + 1)
            assert s["--speculative-algorithm"] == {"eagle": "EAGLE", "mtp": "NEXTN",
                                                     "draft-model": "STANDALONE"}[method]


def test_the_flag_table_refuses_a_speculative_config_it_does_not_know():
    base = "vllm serve M --speculative-config "
    parse_command(base + shlex.quote('{"method":"ngram","num_speculative_tokens":2}'))
    for bad in ('{"method":"ngram"}', '{"method":"medusa","num_speculative_tokens":2}',
                '{"method":"ngram","num_speculative_tokens":0}',
                '{"method":"ngram","num_speculative_tokens":2,"temperature":1}', '[1]'):
        with pytest.raises(ValueError, match="--speculative-config"):
            parse_command(base + shlex.quote(bad))
