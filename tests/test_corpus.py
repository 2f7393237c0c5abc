"""The fault corpus: every answer that once looked right and wasn't, and every traceback
at the file system's edge, as one row each: the command, its exit status and the first
line it prints (on stderr, or on stdout where it succeeds with nothing to warn about).
Each row runs `sim` in a fresh process, as a user would.

`{d}` in a row is a folder holding the corpus's input files (`_inputs`); `{tmp}` a fresh
folder for that row's outputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # one fresh process per row

ROOT = Path(__file__).resolve().parents[1]
AZURE = "chunksim/data/workloads/azure_conv_2023_sample.csv"
LONG = "x" * 300
GENERIC = ["--trace-format", "generic", "--time-column", "t"]
BUDGET = ["--policies", "budget", "--chunks", "512", "--seeds", "0"]
REJECTING = [*BUDGET, "-n", "200", "--max-model-len", "700"]
SPEC = ["--speculative-method", "eagle", "--num-speculative-tokens", "2",
        "--spec-acceptance-rate", "0.7"]
MADE_UP = "examples/data/results"
AGAINST = ["--profile", "tiny-cpu", "--no-plot", "--out", "{tmp}/v"]
CAL = ["--profile", "llama-3.1-8b-h200", "--policy", "budget", "--max-num-batched-tokens",
       "2048", "--out", "{tmp}/c.csv"]

# (id, args, exit status, stream, first-line regex)
CORPUS: list[tuple[str, list[str], int, str, str]] = [
    # 1. rejections are part of every answer
    ("capacity-rejects", ["capacity", *REJECTING], 0, "out", r"^capacity under p99_itl_ms"),
    ("capacity-rejects-allowed", ["capacity", *REJECTING, "--max-reject-pct", "80"], 0,
     "out", r"^capacity under"),
    ("run-rejects", ["run", "-n", "200", "--max-model-len", "700"], 0, "err",
     r"^warning: 148 of 200 requests rejected \(74 %\): 148 by max_model_len \(e\.g\. "),
    # 2. clocks
    ("timestamp-1e300", ["run", "--trace", "{d}/huge.csv", *GENERIC, "--time-unit", "s"], 2,
     "err", r"^error: .*huge\.csv: the requests to replay span 1e\+300 s .*--time-unit s"),
    ("ns-read-as-s", ["run", "--trace", "{d}/ns.csv", *GENERIC, "--time-unit", "s"], 2, "err",
     r"^error: .*ns\.csv: the requests to replay span 1e\+09 s \(1\.16e\+04 days.*"
     r"check --time-unit"),
    ("ns-read-as-ns", ["run", "--trace", "{d}/ns.csv", *GENERIC, "--time-unit", "ns"], 0,
     "out", r"^budget"),
    # 3. booleans
    ("boolean-tokens", ["run", "--trace", "{d}/bool.jsonl", *GENERIC, "--time-unit", "s"], 2,
     "err", r"^error: .*bool\.jsonl: line 1: column 'prompt_tokens' = True is a boolean, "
     r"not a token count"),
    ("lengths-boolean", ["run", "-n", "5", "--prompt-dist", "empirical", "--lengths-csv",
                         "{d}/lbool.csv"], 2, "err",
     r"^error: .*lbool\.csv: column 'prompt_tokens' holds booleans"),
    # 4. profiles
    ("profile-duplicate-key", ["run", "-n", "5", "--profile", "{d}/dup.csv"], 2, "err",
     r"^error: profile .*dup\.csv: lines \d+ and \d+ both time the grid point chunk_len="),
    ("profile-unknown-format", ["run", "-n", "5", "--profile", "{d}/fmt.csv"], 2, "err",
     r"^error: profile provenance .*fmt\.json: format 'chunksim-profile/99' is not one"),
    ("profile-no-model", ["run", "-n", "5", "--profile", "{d}/nomodel.csv"], 2, "err",
     r"^error: profile provenance .*nomodel\.json: no model name"),
    # 5. flags that cannot apply
    ("class-chunk-absent", ["run", "-n", "20", "--policy", "budget", "--class-chunk",
                            "interactive=256"], 2, "err",
     r"^error: --class-chunk names class\(es\) \['interactive'\] that workload"),
    ("class-slo-absent", ["run", "-n", "20", "--class-slo", "interactive:ttft=200"], 2, "err",
     r"^error: --class-slo names class\(es\) \['interactive'\]"),
    ("workload-and-trace", ["run", "-w", "long-prompt", "--trace", AZURE], 2, "err",
     r"^error: --workload long-prompt generates its own requests and --trace"),
    ("capacity-max-rate-0", ["capacity", "-n", "20", *BUDGET, "--max-rate", "0"], 2, "err",
     r"^error: --max-rate 0: the capacity search starts at --rate 1 req/s"),
    ("compare-max-rate-unused", ["compare", "-n", "20", *BUDGET, "--max-rate", "8",
                                 "--out", "{tmp}/c"], 2, "err",
     r"^error: --max-rate caps the capacity search, which is off"),
    # 6. estimates
    ("fleet-memory", ["run", "-n", "100", "--replicas", "10000000"], 2, "err",
     r"^error: a run of 100 requests on 10,000,000 engines needs about .* GiB.*--replicas"),
    # 8. the file system's edge: one line naming the flag, any errno
    *[(f"{cmd[0]}-out-{tag}", [*cmd, "--out", path], 2, "err",
       rf"^error: --out {re.escape(path[:40])}.*: cannot write there: .*\(E[A-Z]+\)")
      for cmd in (["run", "-n", "20"], ["sweep", "-n", "20", "--policies", "budget",
                                        "--chunks", "512"],
                  ["compare", "-n", "20", *BUDGET])
      for tag, path in (("proc", "/proc/foo"), ("sys", "/sys/foo"),
                        ("long-name", "{tmp}/" + LONG))],
    # 9. a figure that cannot be drawn is left out; the report is still written
    ("figure-left-out", ["compare", *REJECTING, "--policies", "whole,budget", "--out",
                         "{tmp}/f"], 0, "out", r"^workload poisson"),
    # 11. messages that said the wrong thing
    ("azure-four-fields", ["run", "--trace", "{d}/az4.csv"], 2, "err",
     r"^error: .*az4\.csv: line 3: 4 fields, but the header has 3"),
    ("trace-is-a-dir", ["run", "--trace", "{d}"], 2, "err",
     r"^error: trace file .* is a directory"),
    ("class-slo-bad-value", ["run", "--class-slo", "interactive:ttft=abc"], 2, "err",
     r"^error: --class-slo 'interactive:ttft=abc': 'abc' is not a number of ms"),
    ("hash-column-bad-value", ["run", "--trace", "{d}/hash.csv", *GENERIC, "--time-unit", "s",
                               "--hash-column", "h", "--hash-block-tokens", "16"], 2, "err",
     r"^error: .*hash\.csv: line 2: column 'h' = '1 2 x' is not a list of integer hashes"),
    ("speedup-refused", ["run", "--speedup", "2"], 2, "err",
     r"^error: --speedup does not apply to --workload poisson \(only to --trace\); drop it$"),
    # 12. next steps as printed, capacity as served, verdicts that agree with their table
    ("deploy-speculative", ["compare", *BUDGET, "-n", "40", *SPEC, "--out", "{tmp}/c"], 0,
     "out", r"^workload poisson"),
    ("deploy-validate-out", ["capacity", *BUDGET, "-n", "40", "--tol", "0.3"], 0, "out",
     r"^capacity under"),
    ("deploy-pd-no-validate", ["compare", *BUDGET, "-n", "40", "--pd", "1:1", "--out",
                               "{tmp}/c"], 0, "out", r"^workload poisson"),
    ("deploy-replicas-one-instance", ["capacity", *BUDGET, "-n", "40", "--tol", "0.3",
                                      "--gpus", "2"], 0, "out", r"^capacity under"),
    ("capacity-offered-served", ["capacity", *REJECTING, "--max-reject-pct", "90", "--gpu",
                                 "h200-sxm"], 0, "out", r"^capacity under"),
    ("verdict-all-rejected", ["capacity", *BUDGET, "-n", "20", "--max-model-len", "64"], 0,
     "out", r"^capacity under"),
    ("verdict-rejects-past-the-cap", ["capacity", *REJECTING, "--max-reject-pct", "50"], 0,
     "out", r"^capacity under"),
    ("verdict-readme-4-gpus", ["capacity", "-w", "long-prompt", "--profile",
                               "llama-3.1-8b-h200-vllm", "--policies", "budget", "--chunks",
                               "8192", "--gpus", "4", "--fleet", "router=least-tokens",
                               "--seeds", "0", "--slo", "p99_ttft_ms=200", "--slo",
                               "p99_itl_ms=50"], 0, "out", r"^capacity under"),
    ("price-b200", ["compare", *BUDGET, "-n", "20", "--profile", "llama-3.1-8b-b200-vllm",
                    "--gpu", "b200", "--out", "{tmp}/c"], 0, "out", r"^workload poisson"),
    # 13. the results reader as strict as the trace reader; calibration says the true thing
    ("against-start-1e300", ["validate", "--against", "{d}/r_1e300.json", *AGAINST], 2, "err",
     r"^error: results file .*r_1e300\.json: field 'start_times': the requests span "
     r"1e\+300 s .*request 2"),
    ("against-boolean", ["validate", "--against", "{d}/r_bool.json", *AGAINST], 2, "err",
     r"^error: results file .*r_bool\.json: request 1: field 'output_lens' = true is a "
     r"boolean, not a number"),
    ("against-string", ["validate", "--against", "{d}/r_str.json", *AGAINST], 2, "err",
     r"^error: results file .*r_str\.json: request 3: field 'ttfts' = '0\.05' is a string"),
    ("against-itl-count", ["validate", "--against", "{d}/r_gaps.json", *AGAINST], 2, "err",
     r"^error: results file .*r_gaps\.json: request 2: field 'itls' holds 5 token gaps, more "
     r"than its 3 output tokens can have"),
    ("against-itl-sum", ["validate", "--against", "{d}/r_late.json", *AGAINST], 2, "err",
     r"^error: results file .*r_late\.json: request 1: field 'itls': TTFT plus its gaps "
     r"1\.06 s exceeds its E2E 0\.11 s"),
    ("against-numpy-repr", ["validate", "--against", "{d}/r_neg.json", *AGAINST], 2, "err",
     r"^error: results file .*r_neg\.json: request 0: field 'ttfts' = -0\.05 s is not a "
     r"number > 0"),
    ("calibrate-impossible", ["calibrate", "--against", "{d}/r_1e300.json", "--profile",
                              "tiny-cpu", "--out", "{tmp}/c.csv"], 2, "err",
     r"^error: results file .*r_1e300\.json: field 'start_times': the requests span"),
    ("against-other-model", ["validate", "--against", f"{MADE_UP}/made_up_low.json",
                             "--profile", "tiny-cpu", "--no-plot", "--out", "{tmp}/v"], 0,
     "err", r"^warning: the profile .*tiny-cpu\.csv times tiny, but made_up_low\.json "
     r"measured made-up/llama-3\.1-8b: the comparison is of another model"),
    ("against-generic-timing", ["validate", "--against", "{d}/generic.csv", *AGAINST], 0,
     "out", r"^\s*budget · generic\.csv · tiny"),
    ("against-45k-requests", ["validate", "--against", "{d}/big.json", "--profile",
                              "llama-3.1-8b-h200", "--policy", "budget", "--chunk", "2048",
                              "--out", "{tmp}/big"], 0, "err",
     r"^reading big\.json \(\d+ MiB\) \.\.\.$"),
    ("calibrate-twice", ["calibrate", "--against", f"{MADE_UP}/made_up_low.json", "--against",
                         f"{MADE_UP}/made_up_low.json", *CAL], 2, "err",
     r"^error: --against .*made_up_low\.json and --against .*made_up_low\.json are one run "
     r"\(the same file, 80 requests\)"),
    ("calibrate-split", ["calibrate", "--against", "{d}/high_a.json", "--against",
                         "{d}/high_b.json", *CAL], 2, "err",
     r"^error: run1:high_b\.json starts [\d.]+ s after run0:high_a\.json on the same clock, "
     r"while \d+ of run0:high_a\.json's requests were still in flight: one run split"),
    ("calibrate-unidentifiable", ["calibrate", "--against", f"{MADE_UP}/made_up_low.json",
                                  "--against", f"{MADE_UP}/made_up_high.json", *CAL], 2, "err",
     r"^error: cannot calibrate: the per-step framework time cannot be told apart from the "
     r"scales in these runs: \d+% .* of the runs, run\d:made_up_\w+\.json \([\d.]+ req/s, "
     r".* in flight on average\) sets it apart most"),
    ("calibrate-far-off", ["calibrate", "--against", f"{MADE_UP}/made_up_low.json",
                           "--against", f"{MADE_UP}/made_up_high.json", "--against",
                           "{d}/mid_slow.json", *CAL, "--fit", "compute,memory"], 0, "out",
     r"^fitted compute, memory: framework time 0\.000 ms/step"),
    ("calibrate-bound", ["calibrate", "--against", "{d}/low_fast.json", "--against",
                         "{d}/high_fast.json", *CAL, "--fit", "framework"], 0, "out",
     r"^fitted framework: framework time"),
    ("run-calibrated", ["run", "-n", "20", "--profile", "{d}/cal.csv"], 0, "err",
     r"^note: .*cal\.csv: calibration applied \(sim calibrate\): \+0\.000 ms framework "
     r"time per step, compute x[\d.]+, memory x[\d.]+$"),
    ("against-calibrated", ["validate", "--against", f"{MADE_UP}/made_up_mid.json",
                            "--profile", "{d}/cal.csv", "--policy", "budget", "--chunk", "2048",
                            "--no-plot", "--out", "{tmp}/v"], 0, "out",
     r"^\s*budget · made_up_mid\.json"),
    ("run-rate-1e-300", ["run", "--rate", "1e-300"], 2, "err",
     r"^error: --rate 1e-300: the requests would arrive over 2e\+302 s .* resolves less than "
     r"a microsecond and latencies round away; raise --rate$"),
    ("run-rate-1e-300-n", ["run", "--rate", "1e-300", "-n", "20"], 2, "err",
     r"^error: --rate 1e-300 req/s with 20 requests: .*give --rate at least 2\.3e-09 req/s$"),
    ("run-rate-slow-honest", ["run", "--rate", "1e-6", "-n", "20"], 0, "out", r"^budget"),
    ("readme-trace", ["run", "--trace", AZURE, "--policy", "budget", "--chunk", "2048"], 0,
     "out", r"^budget"),
    # 14. the run board tells the truth; help reads at 80 columns and in a pipe
    ("board-rejects", ["run", "-n", "200", "--max-model-len", "700", "--out", "{tmp}/b",
                       "--report"], 0, "err", r"^warning: 148 of 200 requests rejected"),
    ("help-in-a-pipe", ["run", "--help"], 0, "out", r"^ Usage: .* run \[OPTIONS\]"),
    ("help-all", ["run", "--help-all"], 0, "out", r"^ Usage: .* run \[OPTIONS\]"),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """The corpus's input files: traces and profiles, each wrong in one way."""
    d = tmp_path_factory.mktemp("corpus")
    (d / "huge.csv").write_text("t,prompt_tokens,output_tokens\n0,32,4\n1,32,4\n1e300,32,4\n")
    (d / "ns.csv").write_text("t,prompt_tokens,output_tokens\n1700000000000000000,32,4\n"
                              "1700000001000000000,32,4\n")
    (d / "bool.jsonl").write_text('{"t": 0, "prompt_tokens": true, "output_tokens": 4}\n')
    (d / "az4.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:15:46.6805900,374,44\n"
                               "2023-11-16 18:15:47.6805900,374,44,5\n")
    (d / "lbool.csv").write_text("prompt_tokens,output_tokens\nTrue,5\nFalse,3\n")
    (d / "hash.csv").write_text('t,prompt_tokens,output_tokens,h\n0,32,4,"1 2 x"\n')
    src = ROOT / "chunksim/data/profiles/tiny-cpu"
    table = src.with_suffix(".csv").read_text().splitlines()
    meta = json.loads(src.with_suffix(".json").read_text())
    meta.pop("content_sha256", None)
    for name, rows, m in (
            ("dup", [*table, table[5]], meta),
            ("fmt", table, {**meta, "format": "chunksim-profile/99"}),
            ("nomodel", table, {k: v for k, v in meta.items() if k != "model"})):
        (d / f"{name}.csv").write_text("\n".join(rows) + "\n")
        (d / f"{name}.json").write_text(json.dumps(m))
    _results_inputs(d)
    return d


def sim(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.parametrize("row", CORPUS, ids=[r[0] for r in CORPUS])
def test_corpus_row(row, inputs, tmp_path):
    name, args, status, stream, first = row
    args = [a.replace("{d}", str(inputs)).replace("{tmp}", str(tmp_path)) for a in args]
    first = first.replace("\\{tmp\\}", re.escape(str(tmp_path)))
    proc = sim(*args)
    text = proc.stderr if stream == "err" else proc.stdout
    lines = [line for line in text.splitlines() if line.strip()]
    assert proc.returncode == status, (name, proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    assert lines and re.search(first, lines[0]), (name, lines[:3])
    if status == 2:  # an error is one line
        assert len([x for x in proc.stderr.splitlines() if x.strip()]) == 1, proc.stderr
    _and_then(name, proc, tmp_path)


def _and_then(name: str, proc: subprocess.CompletedProcess, tmp_path: Path) -> None:
    """What a row's first line cannot show."""
    out = proc.stdout
    if name == "capacity-rejects":
        assert "No configuration meets the SLOs" in out
        assert "148 of 200 requests rejected (74 %)" in out
        assert "≥" not in out  # no capacity claimed
    if name == "capacity-rejects-allowed":
        assert "Recommended: budget 512" in out
    if name == "figure-left-out":
        report = (tmp_path / "f" / "report.md").read_text()
        assert "step_timeline.png left out: it could not be drawn" in report
        assert not (tmp_path / "f" / "step_timeline.png").exists()
    if name == "deploy-speculative":  # the recommendation speculates; so do its lines
        serve = next(x for x in out.splitlines() if x.startswith("vllm serve"))
        assert '"num_speculative_tokens":2' in serve
        assert "--speculative-algorithm EAGLE" in out
        assert re.search(r"then: sim validate .*--num-speculative-tokens 2.* --out ", out)
    if name == "deploy-validate-out":
        assert re.search(r"^then: sim validate --against bench/\S+ .* --out \S+$", out, re.M)
    if name == "deploy-pd-no-validate":
        assert "No validate line: sim validate --against replays one engine" in out
        assert "then: sim validate" not in out
    if name == "deploy-replicas-one-instance":
        assert re.search(r"^then: sim validate --against bench/\S+-one-instance\.json", out,
                         re.M)
        assert "--replicas" not in out.split("then: sim validate")[1].splitlines()[0]
    if name == "capacity-offered-served":
        assert re.search(r"recommended: budget 512 \(\S+ req/s offered, \S+ served", out)
        assert "offered req/s" in out and "served output tok/s" in out
    if name == "verdict-all-rejected":
        assert ("No configuration meets the SLOs at any probed rate: budget 512 rejects "
                "more than --max-reject-pct 0 % of its requests (budget 512: 20 of 20 "
                "requests rejected (100 %)") in out
        assert "Closest" not in out and "tightest bound" not in out
    if name == "verdict-rejects-past-the-cap":
        assert "budget 512 rejects more than --max-reject-pct 50 % of its requests" in out
        assert "Closest" not in out and "tightest bound" not in out
    if name == "verdict-readme-4-gpus":
        assert "but best on" not in out
        assert re.search(r"Extremes: P/D 1:3 \S+ · budget 8192 is best on worst stall "
                         r"\([^)]*\) and on the long request's TTFT", out)
    if name == "price-b200":
        assert "per GPU-hour (b200: " in out
    if name == "board-rejects":
        page = (tmp_path / "b" / "report.html").read_text()
        assert "148 of 200 requests rejected (74 %): 148 by max_model_len" in page
        assert "within its bound" not in page and "--max-model-len" in page
    if name.startswith("help-"):
        assert max(len(line) for line in out.splitlines()) <= 80
        names = set(re.findall(r"--[a-z][a-z0-9-]*", out))
        assert {"--num-speculative-tokens", "--speculative-method",
                "--max-num-batched-tokens", "--gpu-memory-utilization"} <= names
        assert ("--help-all shows the whole text" in out) is (name == "help-in-a-pipe")
    if name.endswith("long-name"):
        assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
    _and_then_results(name, proc, tmp_path)


# ------------------------------------------------------------------ 12. results, calibration
def _results_inputs(d: Path) -> None:
    """Results files each wrong in one way (a vLLM bench JSON of four requests), a
    generic CSV, a 45,000-request bench, made-up runs split, slowed and sped up, and a
    calibrated profile."""
    n = 4
    good = {"backend": "vllm", "endpoint_type": "openai", "model_id": "tiny", "num_prompts": n,
            "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
            "input_lens": [100, 110, 120, 130], "output_lens": [3] * n,
            "ttfts": [0.05, 0.06, 0.07, 0.08], "itls": [[0.02, 0.03]] * n,
            "latencies": [0.1, 0.11, 0.12, 0.13], "errors": [""] * n,
            "start_times": [1000.0, 1000.5, 1001.0, 1001.5]}
    for name, field, i, value in (("r_1e300", "start_times", 2, 1e300),
                                  ("r_bool", "output_lens", 1, True),
                                  ("r_str", "ttfts", 3, "0.05"),
                                  ("r_gaps", "itls", 2, [0.01] * 5),
                                  ("r_late", "itls", 1, [0.5, 0.5]),
                                  ("r_neg", "ttfts", 0, -0.05)):
        doc = json.loads(json.dumps(good))
        doc[field][i] = value
        (d / f"{name}.json").write_text(json.dumps(doc))
    (d / "generic.csv").write_text("arrival_s,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n"
                                   "0,100,4,50,80\n1,200,4,60,90\n")
    big = 45_000  # 200 tokens each: 8,955,000 gaps, past the simulator's exact cap
    (d / "big.json").write_text(json.dumps({
        **{k: good[k] for k in ("backend", "endpoint_type", "burstiness", "max_concurrency")},
        "model_id": "meta-llama/Llama-3.1-8B", "num_prompts": big, "request_rate": 20.0,
        "input_lens": [200 + (i * 37) % 1500 for i in range(big)], "output_lens": [200] * big,
        "ttfts": [0.1] * big, "itls": [[0.01] * 199] * big, "latencies": [2.09] * big,
        "start_times": [1000 + i * 0.05 for i in range(big)], "errors": [""] * big}))
    src = ROOT / MADE_UP
    high = json.loads((src / "made_up_high.json").read_text())
    per = [k for k, v in high.items() if isinstance(v, list) and len(v) == len(high["ttfts"])]
    for part, sl in (("a", slice(None, 40)), ("b", slice(40, None))):
        (d / f"high_{part}.json").write_text(json.dumps({**high, **{k: high[k][sl]
                                                                    for k in per}}))
    mid = json.loads((src / "made_up_mid.json").read_text())  # TTFTs twice the engine's
    extra = mid["ttfts"]
    mid["latencies"] = [e + x for e, x in zip(mid["latencies"], extra, strict=True)]
    mid["ttfts"] = [2 * t for t in extra]
    (d / "mid_slow.json").write_text(json.dumps(mid))
    for name in ("low", "high"):  # every time halved: faster than the profile prices
        doc = json.loads((src / f"made_up_{name}.json").read_text())
        for k in ("ttfts", "latencies"):
            doc[k] = [t / 2 for t in doc[k]]
        doc["itls"] = [[g / 2 for g in gaps] for gaps in doc["itls"]]
        doc["start_times"] = [1000 + (t - 1000) / 2 for t in doc["start_times"]]
        (d / f"{name}_fast.json").write_text(json.dumps(doc))
    proc = sim("calibrate", *(a for n in ("low", "high", "mid")
                              for a in ("--against", f"{MADE_UP}/made_up_{n}.json")),
               *[a.replace("{tmp}", str(d)).replace("c.csv", "cal.csv") for a in CAL],
               "--fit", "compute,memory")
    assert proc.returncode == 0, proc.stderr


def _and_then_results(name: str, proc: subprocess.CompletedProcess, tmp_path: Path) -> None:
    """What the results and calibration rows' first lines cannot show."""
    out, err = proc.stdout, proc.stderr
    assert "np.float64" not in out + err
    if name == "against-generic-timing":
        assert "note: measured figures are the file's own times" in out
        assert "client-side" not in out
    if name == "against-other-model":
        assert "client-side time" in out  # a bench tool's file is timed at the client
    if name == "against-45k-requests":
        assert re.search(r"^read 45,000 requests \(8,955,000 token gaps\)", err, re.M)
        assert "EXACT_GAP_SAMPLES" not in err and "45000 requests" in out
        assert (tmp_path / "big" / "validation.png").read_bytes()[:4] == b"\x89PNG"
    if name == "calibrate-far-off":
        assert re.search(r"^warning: after the fit, run2:mid_slow\.json is still -\d+ % off on "
                         r"mean TTFT", err, re.M)
        assert "held out P99, after:  run2:mid_slow.json: TTFT" in out
        prov = json.loads((tmp_path / "c.json").read_text())
        assert prov["serving_calibration_fit"]["warnings"][0].startswith("after the fit, run2")
    if name == "calibrate-bound":
        assert re.search(r"^warning: the framework time ended at its bound: [\d.]+ ms per "
                         r"step, where 0 is the least it can be", err, re.M)
        prov = json.loads((tmp_path / "c.json").read_text())
        assert any("ended at its bound" in w for w in prov["serving_calibration_fit"]["warnings"])
    if name == "against-calibrated":
        assert "note: calibration applied (sim calibrate): +0.000 ms framework time" in out
    if name == "run-rate-slow-honest":
        ttft = re.search(r"^TTFT\s+│\s+([\d.]+)\s+│\s+([\d.]+)", out, re.M)
        assert ttft and float(ttft[2]) > 0  # the median is a real figure, not 0.00
    if name == "readme-trace":  # the README's trace example is this command, on a shipped file
        readme = (ROOT / "README.md").read_text()
        assert f"sim run --trace {AZURE} --policy budget --chunk 2048" in readme
        assert (ROOT / AZURE).is_file()
