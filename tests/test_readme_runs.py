"""`sim run` answers exactly as recorded: tests/fixtures/readme_runs.json holds summary.json
of the README's kinds of command (every policy and variant, traces, prefix caching,
priority, jitter, a GPU profile), each saying which profile it covers. Every key must
match to the byte. When summary.json gains a key, tests/fixtures/record_readme_runs.py
adds it, refusing if any recorded answer changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chunksim.cli import app

FIXTURE = Path(__file__).parent / "fixtures" / "readme_runs.json"
RUNS = json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("run", RUNS, ids=lambda r: " ".join(r["args"][1:6]))
def test_summary_is_unchanged(run, tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # sample paths are relative
    res = CliRunner().invoke(app, [*run["args"], "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    now = (tmp_path / "summary.json").read_text()
    assert json.loads(now) == json.loads(run["summary_json"])
    assert now.rstrip("\n") == run["summary_json"]  # same keys, order and bytes
