"""`sim run` answers exactly as recorded: tests/fixtures/readme_runs.json holds summary.json
of the README's kinds of command (every policy and variant, traces, prefix caching,
priority, jitter, a GPU profile), recorded before the package was reorganized. Every key
must match to the byte; a key the recording lacks is allowed only if listed here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chunksim.cli import app

FIXTURE = Path(__file__).parent / "fixtures" / "readme_runs.json"
ADDED_KEYS = {"policy_defaults", "waiting_order", "profile_kind"}
"""Keys summary.json gained since the recording (reported defaults, queue discipline, the
kind of profile that priced the run)."""

RUNS = json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("run", RUNS, ids=lambda r: " ".join(r["args"][1:6]))
def test_summary_is_unchanged(run, tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # sample paths are relative
    res = CliRunner().invoke(app, [*run["args"], "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    now = json.loads((tmp_path / "summary.json").read_text())
    then = json.loads(run["summary_json"])
    assert set(now) - set(then) == ADDED_KEYS
    assert {k: now[k] for k in then} == then
    # the recorded keys keep their order and bytes: the old document is the new one's prefix
    old_text = json.dumps(then, indent=2)
    kept = json.dumps({k: now[k] for k in now if k in then}, indent=2)
    assert kept == old_text
