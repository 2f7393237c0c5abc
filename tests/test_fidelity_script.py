"""benchmarks/fidelity.py on CPU: `--dry-run` end to end, then `--resimulate` on what it
recorded, which with the simulator unchanged must reproduce every error exactly."""

from __future__ import annotations

import json

import pytest
from factories import load_script

from chunksim.validate.compare import TARGET_KEYS

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # the benchmark script end to end
pytest.importorskip("torch")


def test_resimulating_recorded_runs_reproduces_their_errors(tmp_path, capsys):
    mod = load_script("fidelity")
    ran = mod.main(["--dry-run", "--passes", "2", "--live-runs", "2", "--no-plot", "--out",
                    str(tmp_path)])
    spread = ran["live_spread_pct"]  # each workload served twice: the machine's own noise
    assert set(spread) == set(ran["scenarios"])
    assert all(set(s) == set(TARGET_KEYS) for s in spread.values())
    assert all(v is None or v >= 0 for s in spread.values() for v in s.values())
    again = mod.main(["--dry-run", "--resimulate", "--out", str(tmp_path)])
    assert again["resimulated"] and again["profile_sha256"] == ran["profile_sha256"]
    assert len(ran["scenarios"]) == 2 and again["scenarios"] == ran["scenarios"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == json.loads(
        json.dumps(again))
