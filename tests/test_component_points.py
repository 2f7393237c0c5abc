"""Component points in looks (each point keeps its lowest), the checkpoint and `--resume`,
and the pinned host allocator the CPU profiler and live loop run with."""

import platform
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.latency.profile import load_profile
from chunksim.profiler.component_points import checkpoint, measure_points, point_id, row
from chunksim.profiler.timing import Timing

WORK = [("dense", 1), ("dense", 16), ("embed", 16), ("prefill_attn", (16, 0)),
        ("decode_attn", (2, 16, 1.5, [20, 12])), ("head", 4)]


def _timing(s: float) -> Timing:
    return Timing(s, s, s, s, 3)


class Clock:
    """A fake point timer: each call returns the next figure of the point's list."""

    def __init__(self, figures: dict, fail_after: int | None = None) -> None:
        self.figures, self.calls, self.fail_after = figures, [], fail_after

    def __call__(self, name, key):
        if self.fail_after is not None and len(self.calls) == self.fail_after:
            raise KeyboardInterrupt
        i = sum(1 for c in self.calls if c == (name, str(key)))
        self.calls.append((name, str(key)))
        return _timing(self.figures[(name, str(key))][i])


def _figures(slow: float = 0.5) -> dict:
    """Per point: a first look and a second; `dense 16` is slow (one look only)."""
    f = {(n, str(k)): [0.010 + i * 1e-3, 0.008 + i * 1e-3] for i, (n, k) in enumerate(WORK)}
    f[("dense", "16")] = [slow, slow / 2]
    f[("head", "4")] = [0.004, 0.006]  # the first look is the lower
    return f


def test_each_point_keeps_its_lowest_look_and_slow_points_get_one(tmp_path):
    ckpt = checkpoint(tmp_path / "c.csv")
    ckpt.start({"run": 1})
    clock = Clock(_figures())
    rows, relooked = measure_points(WORK, clock, looks=2, relook_below_s=0.05, seed=0,
                                    ckpt=ckpt, show_progress=False)
    assert [r["component"] for r in rows] == [n for n, _ in WORK]  # work's order
    by = {(r["component"], r["tokens"], r["logits"]): r["median_s"] for r in rows}
    assert by[("dense", 1, 0)] == 0.008  # second look, lower
    assert by[("dense", 16, 0)] == 0.5  # slow: never looked at again
    assert by[("head", 0, 4)] == 0.004  # first look, lower
    assert relooked == len(WORK) - 1 and len(clock.calls) == 2 * len(WORK) - 1
    decode = rows[4]
    assert (decode["decode_count"], decode["kv_len"], decode["kv_max"]) == (2, 16, 20)
    saved, _ = ckpt.load({"run": 1})
    assert sorted(look for _, look in saved) == [1] * len(WORK) + [2] * (len(WORK) - 1)


def test_resume_times_only_what_the_checkpoint_lacks(tmp_path):
    ckpt = checkpoint(tmp_path / "c.csv")
    ckpt.start({"run": 1})
    clock = Clock(_figures(), fail_after=8)
    with pytest.raises(KeyboardInterrupt):
        measure_points(WORK, clock, 2, 0.05, 0, ckpt, show_progress=False)
    with ckpt.csv_path.open("a") as f:
        f.write("dense,1,0,0,0,0")  # torn by the kill: dropped, that timing is redone
    done, _ = ckpt.load({"run": 1})
    assert len(done) == 8
    clock.fail_after = None  # the same clock: a point's next call is its next look
    rows, _ = measure_points(WORK, clock, 2, 0.05, 0, ckpt, done, show_progress=False)
    assert len(clock.calls) == 2 * len(WORK) - 1
    fresh, _ = measure_points(WORK, Clock(_figures()), 2, 0.05, 0,
                              checkpoint(tmp_path / "d.csv"), show_progress=False)
    assert [r["median_s"] for r in rows] == [r["median_s"] for r in fresh]
    with pytest.raises(ValueError, match="different run"):
        ckpt.load({"run": 2})


def test_point_ids_are_the_table_keys():
    r = row("decode_attn", _timing(1.0), decode_count=4, kv_len=64, kv_max=96)
    assert point_id(r) == ("decode_attn", 0, 0, 0, 4, 64, 96, 0)


@pytest.mark.torch
@pytest.mark.slow  # times a small model
def test_an_interrupted_component_run_resumes_from_the_cli(tmp_path, monkeypatch):
    from test_component_profiler import MICRO

    from chunksim.profiler import component_grid, components

    monkeypatch.setitem(component_grid.PRESETS, "quick", replace(MICRO, preset="quick"))
    real, calls = components.LayerBench.dense, []

    def dense_then_stop(self, tokens):
        calls.append(tokens)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(self, tokens)

    out = tmp_path / "c.csv"
    args = ["profile", "--kind", "components", "--model", "tiny", "--device", "cpu",
            "--grid", "quick", "--no-calibrate", "--quiet", "--out", str(out)]
    monkeypatch.setattr(components.LayerBench, "dense", dense_then_stop)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 130, res.output
    assert "saved in" in res.output and "--resume" in res.output
    partial = tmp_path / "c.partial.csv"
    saved = partial.read_text().splitlines()[1:]
    assert sum(r.startswith("dense,") for r in saved) == 3 and not out.exists()
    monkeypatch.setattr(components.LayerBench, "dense", real)
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "--resume" in str(res.exception)  # never clobbered
    res = CliRunner().invoke(app, args + ["--resume"])
    assert res.exit_code == 0, res.output
    p = load_profile(str(out))
    assert p.provenance["components"]["looks"] == 2 and not partial.exists()
    assert len(p.table) == p.provenance["points"]


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the host allocator is pinned on glibc only")
@pytest.mark.torch
def test_the_host_allocator_is_pinned_once():
    from chunksim.decoder.device import HOST_ALLOCATOR, pin_host_allocator

    first = pin_host_allocator()
    assert first == {"glibc": HOST_ALLOCATOR}
    assert pin_host_allocator() is first
