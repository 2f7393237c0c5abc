"""benchmarks/validate_gpu.py end to end on CPU (`--dry-run`: tiny model, tiny grid)."""

from __future__ import annotations

import json

import pytest
from factories import load_script

pytestmark = pytest.mark.torch
pytest.importorskip("torch")


@pytest.mark.slow  # the benchmark script end to end: profile, calibrate, live runs
def test_dry_run_profiles_calibrates_validates_three_policies(tmp_path, capsys):
    mod = load_script("validate_gpu")
    summary = mod.main(["--dry-run", "--out", str(tmp_path), "--duration", "1",
                        "--live-runs", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == json.loads(json.dumps(summary))
    assert set(summary["scenarios"]) == {"whole/medium", "chunk256/medium", "budget512/medium"}
    assert summary["model"] == "tiny" and summary["rate_per_s"] > 0
    assert set(summary["live_spread_pct"]) == set(summary["scenarios"])  # served twice
    spread = summary["decode_spread"]
    assert [(r["decodes"], r["mean_kv"], r["spread"]) for r in spread] == list(
        mod.DRY_SPREAD_CASES)
    assert all(r["equal_s"] > 0 and r["ratio"] == r["spread_s"] / r["equal_s"] for r in spread)
    for name in summary["scenarios"]:
        report = json.loads((tmp_path / name.replace("/", "__") / "validation.json").read_text())
        family = {"whole": "whole", "chunk256": "chunk", "budget512": "budget"}
        assert report["policy"] == family[name.split("/")[0]]
        assert set(summary["scenarios"][name]) == set(report["target_keys"])


def test_real_run_targets_8b_bf16_on_cuda(tmp_path):
    mod = load_script("validate_gpu")
    args = mod.parse_args(["--out", str(tmp_path)])
    assert args.model == "llama-3.1-8b" and not args.dry_run and args.grid == "ship"
    assert mod.parse_args(["--grid", "chat"]).grid == "chat"
    for axis, values in mod.CHAT_GRID.items():  # a cut of the shipped grid, not new points
        assert set(values.split(",")) <= set(mod.GPU_GRID[axis].split(","))
    try:
        mod.get_profile(args, tmp_path)
    except SystemExit as exc:  # no CUDA here: it must say so, not crash
        assert "CUDA" in str(exc)
        return
    pytest.skip("a CUDA device is present: the real run is the benchmark itself")
