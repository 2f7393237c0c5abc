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
    # 12. the run board tells the truth; help reads at 80 columns and in a pipe
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
