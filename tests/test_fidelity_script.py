"""benchmarks/fidelity.py on CPU: `--dry-run` end to end, then `--resimulate` on what it
recorded, which with the simulator unchanged must reproduce every error exactly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fidelity.py"


def _load():
    spec = importlib.util.spec_from_file_location("fidelity", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_resimulating_recorded_runs_reproduces_their_errors(tmp_path, capsys):
    mod = _load()
    ran = mod.main(["--dry-run", "--passes", "2", "--no-plot", "--out", str(tmp_path)])
    again = mod.main(["--dry-run", "--resimulate", "--out", str(tmp_path)])
    assert again["resimulated"] and again["profile_sha256"] == ran["profile_sha256"]
    assert len(ran["scenarios"]) == 2 and again["scenarios"] == ran["scenarios"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == json.loads(
        json.dumps(again))
