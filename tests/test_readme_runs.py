"""`sim run` answers exactly as recorded: tests/fixtures/readme_runs.json holds summary.json
of the README's kinds of command (every policy and variant, traces, prefix caching,
priority, jitter, a GPU profile), recorded before the package was reorganized. Every key
must match to the byte; a key the recording lacks is allowed only if listed here. An entry
re-recorded since carries a `note` saying why its answer had to change. The runs on the
default (component) profile are recorded by tests/fixtures/record_default_runs.py, again
whenever that profile is re-measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chunksim.cli import app

FIXTURE = Path(__file__).parent / "fixtures" / "readme_runs.json"
ADDED_KEYS = {"policy_defaults", "waiting_order", "async_scheduling", "max_model_len",
              "rejected_reasons", "warnings", "profile_kind"}
"""Keys summary.json gained since the recording (reported defaults, queue discipline,
vLLM's async scheduling switch, the length cap in force, rejections counted by reason, the
heavy-extrapolation warning, the kind of profile that priced the run)."""
ADDED_POLICY_PARAMS = {"enable_chunked_prefill"}
"""Knobs `policy_params` gained since the recording (vLLM's chunked-prefill switch)."""

RUNS = json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("run", RUNS, ids=lambda r: " ".join(r["args"][1:6]))
def test_summary_is_unchanged(run, tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # sample paths are relative
    res = CliRunner().invoke(app, [*run["args"], "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    now = json.loads((tmp_path / "summary.json").read_text())
    then = json.loads(run["summary_json"])
    assert set(then) <= set(now) and set(now) - set(then) <= ADDED_KEYS
    params = now["policy_params"]
    added = set(params) - set(then["policy_params"])
    assert added <= ADDED_POLICY_PARAMS
    now["policy_params"] = {k: v for k, v in params.items() if k not in added}
    assert {k: now[k] for k in then} == then
    # the recorded keys keep their order and bytes: the old document is the new one's prefix
    old_text = json.dumps(then, indent=2)
    kept = json.dumps({k: now[k] for k in now if k in then}, indent=2)
    assert kept == old_text
