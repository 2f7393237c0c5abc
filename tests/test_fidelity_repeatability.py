"""benchmarks/fidelity_repeatability.py on hand-made suite folders: the live spread, the
simulator's error and the in-range count by hand; different workloads refused; the
extract reproduces the figures."""

from __future__ import annotations

import json

import pytest
from factories import load_script

from chunksim.validate.compare import TARGET_KEYS, metric_keys


def _suite(root, name, measured, predicted, arrivals=(0.0, 0.5)):
    """One suite folder with scenario `s1`: every metric measured/predicted as given."""
    d = root / name / "s1"
    d.mkdir(parents=True)
    (d / "live_requests.csv").write_text(
        "request_id,arrival_s,prompt_tokens,output_tokens\n"
        + "".join(f"{i},{a},100,8\n" for i, a in enumerate(arrivals)))
    metrics = {k: {"predicted": predicted, "measured": measured,
                   "error_pct": (predicted - measured) / measured * 100}
               for k in metric_keys()}
    (d / "validation.json").write_text(json.dumps(
        {"metrics": metrics, "policy": "budget", "policy_params": {"chunk": 512},
         "workload": "poisson", "workload_params": {"rate": 4}, "kv_blocks": 96,
         "block_size": 16, "max_model_len": 2048}))
    return root / name


def test_spread_error_and_range_by_hand(tmp_path, capsys):
    mod = load_script("fidelity_repeatability")
    a = _suite(tmp_path, "a", measured=10.0, predicted=11.0)   # error +10 %
    b = _suite(tmp_path, "b", measured=12.0, predicted=9.0)    # error -25 %
    c = _suite(tmp_path, "c", measured=8.0, predicted=8.8)     # error +10 %
    extract = tmp_path / "x.csv"
    res = mod.main([str(a), str(b), str(c), "--save", str(extract)])
    cell = res["scenarios"]["s1"]["mean_ttft_ms"]
    assert cell["spread_pct"] == pytest.approx(50.0)  # 12 / 8 - 1
    # ordered pairs: 2/12, 2/10, 4/8, 4/12, 2/8, 2/10 -> median (0.2 + 0.25) / 2
    assert cell["pairwise_pct"] == pytest.approx(22.5)
    assert cell["median_abs_error_pct"] == pytest.approx(10.0)
    assert cell["predictions_in_range"] == 3  # 11, 9, 8.8 all within [8, 12]
    assert set(res["scenarios"]["s1"]) == set(TARGET_KEYS) and res["cells"] == 6
    assert res["predictions"] == 18 and res["predictions_in_range"] == 18
    out = capsys.readouterr().out.strip().splitlines()
    assert "3 live runs" in out[0] and json.loads(out[-1]) == res
    assert mod.main([str(extract)]) == res  # the extract alone reproduces it
    assert capsys.readouterr().out.strip().splitlines() == out  # and prints the same report


def test_runs_of_different_workloads_are_refused(tmp_path):
    mod = load_script("fidelity_repeatability")
    a = _suite(tmp_path, "a", measured=10.0, predicted=11.0)
    b = _suite(tmp_path, "b", measured=12.0, predicted=9.0, arrivals=(0.0, 0.6))
    with pytest.raises(SystemExit, match="s1: the runs served different workloads"):
        mod.main([str(a), str(b)])
    with pytest.raises(SystemExit, match="two or more"):
        mod.main([str(a)])
    with pytest.raises(SystemExit, match="no SCENARIO/validation.json"):
        mod.main([str(a), str(tmp_path)])
