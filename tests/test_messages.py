"""Messages and help speak to the user: errors name flags, not internal fields; ranges in
--help are the ones enforced; help text reads as sentences at 80 columns; `sim --version`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chunksim

pytestmark = pytest.mark.slow  # each case runs the sim command in a fresh process

ROOT = Path(__file__).resolve().parents[1]
FIELDS = re.compile(r"\b(rate_per_s|duration_s|long_arrival_s|max_tokens|min_tokens|"
                    r"mean_tokens|std_tokens|num_requests|start_s|max_requests)\b")


def _sim(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    return subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)


@pytest.mark.parametrize("args,flags", [
    (["--workload", "long-prompt", "--long-arrival", "40"], ["--long-arrival 40", "--duration"]),
    (["-n", "3", "--duration", "5"], ["--num-requests 3", "--duration 5"]),
    (["--prompt-min", "100", "--prompt-max", "10"], ["--prompt-max 10", "--prompt-min 100"]),
    (["--output-dist", "normal", "--output-mean", "0"], ["--output-mean"]),
    (["--workload", "gamma", "--burstiness", "0"], ["--burstiness"]),
    (["--trace", "chunksim/data/workloads/azure_conv_2023_sample.csv", "--start", "1e12"],
     ["--start"]),
])
def test_errors_name_flags_not_fields(args, flags):
    proc = _sim("run", *args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for flag in flags:
        assert flag in proc.stderr, proc.stderr
    assert not FIELDS.search(proc.stderr), proc.stderr


def test_rate_zero_is_refused_and_help_says_so():
    proc = _sim("run", "--rate", "0")
    assert proc.returncode == 2 and "--rate" in proc.stderr and "x>0" in proc.stderr
    helptext = _sim("run", "--help", columns=400).stdout
    line = next(ln for ln in helptext.splitlines() if "--rate" in ln)
    assert "x>0" in line and "x>=0" not in line


def test_seeds_example_is_a_seed_list():
    proc = _sim("sweep", "-n", "3", "--seeds", "a", "--out", "/tmp/never-written.csv")
    assert proc.returncode == 2
    assert "'a' is not an integer" in proc.stderr and "--seeds 0,1,2" in proc.stderr
    assert "256,512" not in proc.stderr


def test_version():
    proc = _sim("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"sim {chunksim.__version__}"


def _description(text: str) -> list[str]:
    """The command's own help text (above the option panels), line by line."""
    head = text.split("╭", 1)[0]
    return [ln.strip() for ln in head.splitlines()]


def _broken_sentences(text: str) -> list[str]:
    """A description line that ends well short of the width and mid-sentence, continued
    on the next line: the docstring's own hard line break."""
    lines = _description(text)
    return [f"{a!r} / {b!r}" for a, b in zip(lines, lines[1:], strict=False)
            if a and b and len(a) < 60 and not a.endswith((".", ":", ";", "`"))]


@pytest.mark.parametrize("cmd", [[], ["capacity"], ["sweep"], ["validate"], ["run"]])
def test_help_text_is_not_broken_mid_sentence(cmd):
    out = _sim(*cmd, "--help").stdout
    assert len(_description(out)) > 3
    assert not _broken_sentences(out), _broken_sentences(out)


def _option_column(text: str) -> list[str]:
    """First cell of each option-panel row (the option names), '' where empty."""
    out = []
    for ln in text.splitlines():
        if ln.startswith("│"):
            cell = ln.strip("│").strip().split("  ")[0]
            out.append(cell.lstrip("* ").strip())
    return out


@pytest.mark.parametrize("cmd", [["run"], ["compare"], ["sweep"], ["capacity"]])
def test_option_names_are_not_cut_at_80_columns(cmd):
    out = _sim(*cmd, "--help").stdout
    assert "…" not in out
    col = _option_column(out)
    i = next(i for i, c in enumerate(col) if c.startswith("--gpu-memory-u"))
    assert col[i].split()[0] == "--gpu-memory-utilization"  # whole on its line


def test_validate_example_names_a_profile_a_fresh_clone_has():
    out = _sim("validate", "--help", columns=200).stdout
    assert "out/profiles/" not in out
    assert "--profile tiny-cpu" in out


def test_long_prompt_rate_is_described_as_it_runs():
    from chunksim.workloads.scenarios import LONG_PROMPT_DEFAULT_RATE_PER_S as rate

    script = (ROOT / "examples" / "long_prompt_report.sh").read_text()
    assert f" {rate:g} req/s stream" in script
    assert f"{rate:g} req/s" in _sim("run", "--help-all", columns=200).stdout
