"""`sim run` end to end through the command line."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from chunksim.cli import app


@pytest.fixture(scope="module")
def prof_path(linear_profile):
    return linear_profile.path


def test_run_writes_records_and_summary(prof_path, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--profile", prof_path, "--policy", "budget",
                                   "--chunk", "512", "--num-requests", "40", "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    for key in ("mean_ttft_ms", "p99_itl_ms", "median_tpot_ms", "p90_e2el_ms",
                "request_throughput", "output_throughput", "profile_sha256", "policy_params"):
        assert key in summary
    assert summary["completed"] == 40
    assert summary["policy_params"]["max_num_batched_tokens"] == 512
    reqs = pd.read_parquet(out / "requests.parquet")  # the default format
    assert len(reqs) == 40
    steps = pd.read_parquet(out / "steps.parquet")
    assert list(steps.columns[:3]) == ["start_s", "duration_s", "prefill_tokens"]
    assert len(steps) == summary["steps"]
    assert "TTFT" in res.output


def test_json_flag_prints_the_summary_last(prof_path):
    res = CliRunner().invoke(app, ["run", "--profile", prof_path, "--policy", "whole",
                                   "--workload", "long-prompt", "--duration", "8",
                                   "--long-arrival", "2", "--json"])
    assert res.exit_code == 0, res.output
    last = json.loads(res.output.strip().splitlines()[-1])
    assert last["policy"] == "whole" and last["workload"].startswith("long-prompt")


@pytest.mark.slow  # each case runs the sim command in a fresh process
@pytest.mark.parametrize("args,message", [
    (["--policy", "whole", "--variant", "alternate"], "does not apply to --policy whole"),
    (["--policy", "budget", "--chunk", "512", "--max-num-batched-tokens", "256"], "disagree"),
    (["--goodput", "ttft"], "use METRIC=MS"),
    (["--profile", "nope.csv"], "no such file"),
    (["--policy", "chunk", "--priority"], "does not apply to --policy chunk"),
    (["--policy", "budget", "--prefill-budget", "64"], "knob of chunk"),
    (["--policy", "whole", "--chunk", "64"], "--max-num-batched-tokens"),
    (["--policy", "sjf", "--priority"], "does not apply to --policy sjf"),
])
def test_bad_input_is_one_clean_line_not_a_traceback(prof_path, args, message):
    cmd = [sys.executable, "-m", "chunksim.cli", "run", "--num-requests", "5"]
    if "--profile" not in args:
        cmd += ["--profile", prof_path]
    proc = subprocess.run(cmd + args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sim_run_does_not_import_torch_or_matplotlib():
    code = ("import sys, chunksim.cli; "
            "print('torch' in sys.modules, 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr
