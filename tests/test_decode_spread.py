"""profiler.decode_spread: unequal-context decode steps against equal-length ones."""

from __future__ import annotations

import pytest
from factories import SMALL

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from chunksim.decoder.kv import KVPool  # noqa: E402
from chunksim.decoder.model import build_model  # noqa: E402
from chunksim.decoder.step import prepare_step  # noqa: E402
from chunksim.profiler.decode_spread import (  # noqa: E402
    _batch,
    decode_spread_ratios,
    format_decode_spread,
    spread_lengths,
)


@pytest.mark.parametrize(("n", "mean", "spread"), [(8, 512, 0.5), (7, 100, 0.25), (32, 1024,
                                                   0.002), (1, 300, 0.5), (5, 64, 0.0)])
def test_spread_lengths_keep_the_mean_and_the_range(n, mean, spread):
    lens = spread_lengths(n, mean, spread)
    assert len(lens) == n and sum(lens) == n * mean  # same tokens as the equal-length step
    assert min(lens) >= max(1, int(mean * (1 - spread)) - 1)
    assert max(lens) <= mean * (1 + spread) + n  # the rounding rest stays small
    assert (len(set(lens)) > 1) == (n > 1 and mean * spread >= 1)


def test_the_spread_step_is_one_masked_padded_group_and_the_equal_one_is_not():
    pools = [KVPool(SMALL, 8, 800, "cpu", torch.float32)]
    equal = prepare_step(_batch([512] * 8), pools, "cpu").decode_groups
    spread = prepare_step(_batch(spread_lengths(8, 512, 0.5)), pools, "cpu").decode_groups
    assert len(equal) == len(spread) == 1
    assert equal[0].mask is None and isinstance(equal[0].slots, slice)
    assert spread[0].mask is not None and isinstance(spread[0].slots, slice)  # adjacent
    assert spread[0].members * spread[0].kv_end / spread[0].kv_tokens == pytest.approx(
        1.5, abs=0.01)


def test_ratios_over_cases():
    model = build_model(SMALL, "cpu", torch.float32, seed=0)
    cases = ((4, 128, 0.5), (8, 256, 0.002))
    rows = decode_spread_ratios(model, "cpu", torch.float32, lambda: None, cases=cases,
                                rounds=2, warmup=1, repeats=3)
    assert [(r["decodes"], r["mean_kv"], r["spread"]) for r in rows] == list(cases)
    assert rows[0]["padded_read"] == pytest.approx(193 * 4 / (4 * 129))
    assert rows[1]["padded_read"] < 1.01
    for r in rows:
        assert r["equal_s"] > 0 and r["spread_s"] > 0
        assert r["ratio"] == pytest.approx(r["spread_s"] / r["equal_s"])
    text = format_decode_spread(rows)
    assert len(text.splitlines()) == 2 + len(cases) and "ratio" in text
    with pytest.raises(ValueError, match="max_position"):
        decode_spread_ratios(model, "cpu", torch.float32, lambda: None,
                             cases=((2, 2000, 0.5),))
