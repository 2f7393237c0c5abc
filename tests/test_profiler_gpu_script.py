"""benchmarks/profile_gpu.py end to end on CPU (`--dry-run`: tiny model, tiny grid)."""

from __future__ import annotations

import json

import pytest
from factories import load_script

pytestmark = pytest.mark.torch
pytest.importorskip("torch")


@pytest.mark.slow  # the benchmark script end to end: profiles the tiny model
def test_dry_run_writes_profile_and_json_line(tmp_path, capsys):
    mod = load_script("profile_gpu")
    out = tmp_path / "dry.csv"
    summary = mod.main(["--dry-run", "--out", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == json.loads(json.dumps(summary))
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["model"]["name"] == "tiny" and meta["points"] == summary["points"] > 0
    assert set(summary["median_s"]) == {label for label, *_ in mod.LANDMARKS}
    assert summary["selfcheck_rel_error"] < 1e-3
    assert summary["median_s"]["chunk 512"] > 0 and summary["median_s"]["decode 1 @ kv 1024"] > 0


def test_real_run_targets_8b_bf16_default_grid(tmp_path):
    mod = load_script("profile_gpu")
    args = mod.parse_args(["--out", str(tmp_path / "x.csv")])
    try:
        settings = mod.settings_for(args)
    except SystemExit as exc:  # no CUDA here: it must say so, not crash
        assert "CUDA" in str(exc)
        return
    assert settings.model.name == "llama-3.1-8b" and settings.dtype == "bfloat16"
    assert settings.grid.chunk_len[-1] >= 8192 and settings.device == "cuda"
