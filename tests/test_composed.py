"""The component latency model: exact composition on known laws, unequal decodes priced
where the components say so, bulk decode bit-identical to stepping, clear load errors."""

import math

import numpy as np
import pandas as pd
import pytest
from factories import (
    FIXED_S,
    component_rows,
    law_decode,
    law_step,
    make_component_profile,
    make_profile,
    workload,
)

from chunksim.core.shape import BatchShape, StepShape
from chunksim.latency.composed import ComponentModel
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate


@pytest.fixture(scope="module")
def comp(tmp_path_factory):
    return make_component_profile(tmp_path_factory.mktemp("comp"))


def _shape(chunks, kvs, logits=-1):
    kv_mean = sum(kvs) / len(kvs) if kvs else 0.0
    return BatchShape(sum(n for n, _ in chunks), 0.0, len(kvs), kv_mean, tuple(chunks),
                      float(max(kvs)) if kvs else 0.0, logits)


CASES = [
    ([(512, 0)], [], 1),
    ([(100, 3000), (37, 0), (2048, 9000)], [], 2),
    ([], [1000] * 16, 16),
    ([], [100, 200, 900, 2000, 5000, 123, 77, 4000], 8),
    ([(700, 1200)], [300, 3000, 40], 4),
    ([(16, 0), (16, 16)], [5, 5000], 0),
    ([(3000, 12000), (1, 511)], [250] * 37 + [900], 39),
]


@pytest.mark.parametrize("chunks,kvs,logits", CASES)
def test_composition_is_exact_on_known_laws(comp, chunks, kvs, logits):
    lat = latency_model(comp)
    assert isinstance(lat, ComponentModel)
    t, out = lat.step_s(_shape(chunks, kvs, logits))
    assert t == pytest.approx(law_step(chunks, kvs, logits), rel=1e-12)
    assert not out


def test_each_chunk_is_priced_with_its_own_prior(comp):
    lat = latency_model(comp)
    two = lat.step_s(_shape([(1000, 0), (1000, 8000)], [], 1))[0]
    merged = lat.step_s(_shape([(2000, 4000)], [], 1))[0]
    # prefill attention L*c is priced per chunk: 1000*8000 once, not 2000*4000
    assert two == pytest.approx(law_step([(1000, 0), (1000, 8000)], [], 1), rel=1e-12)
    assert merged - two == pytest.approx(4 * (law_step([(2000, 4000)], [], 1)
                                              - law_step([(1000, 0), (1000, 8000)], [], 1))
                                         / 4, rel=1e-9)


def test_default_shape_prices_one_chunk_and_logits_for_each_sequence(comp):
    lat = latency_model(comp)
    t = lat.step_s(BatchShape(300, 2000.0, 4, 500.0))[0]
    assert t == pytest.approx(law_step([(300, 2000)], [500] * 4, 5), rel=1e-12)


def test_unequal_decodes_cost_more_exactly_where_the_components_say(comp, tmp_path):
    lat = latency_model(comp)
    equal = [1000] * 16
    unequal = [600] * 12 + [1000, 1500, 2300, 4000]  # same mean 1000, longest 4000
    assert sum(unequal) == sum(equal)
    te, tu = (lat.step_s(_shape([], kv, 16))[0] for kv in (equal, unequal))
    diff = 4 * (law_decode(16, 1000, 4.0) - law_decode(16, 1000, 1.0))
    assert tu > te
    assert tu - te == pytest.approx(diff, rel=1e-9)
    # components whose attention ignores the longest member: unequal costs the same
    flat = latency_model(make_component_profile(
        tmp_path, "flat", decode=lambda d, k, r: law_decode(d, k, 1.0)))
    assert flat.step_s(_shape([], unequal, 16))[0] == flat.step_s(_shape([], equal, 16))[0]


def test_layers_and_scale_multiply_as_documented(tmp_path):
    lat = latency_model(make_component_profile(
        tmp_path, layers=80, provenance={"components": {"layers": 80,
                                                        "in_sequence_scale": 1.1}}))
    t = lat.step_s(_shape([(64, 0)], [10, 20], 3))[0]
    assert t == pytest.approx(law_step([(64, 0)], [10, 20], 3, layers=80, scale=1.1),
                              rel=1e-12)


def test_beyond_the_grid_is_linear_flagged_and_never_below_the_edge(tmp_path, comp):
    lat = latency_model(comp)
    t, out = lat.step_s(_shape([(20000, 0)], [], 1))
    assert out and t == pytest.approx(law_step([(20000, 0)], [], 1), rel=1e-9)
    t, out = lat.step_s(_shape([], [20000] * 300, 300))
    assert out
    # falling measured edge: a step further out is never priced below the edge step
    rows = component_rows()
    for r in rows:
        if r["component"] == "dense" and r["tokens"] == 16384:
            r["median_s"] = r["p10_s"] = r["p90_s"] = r["mean_s"] = 1e-6
    fall = latency_model(make_component_profile(tmp_path, "fall", rows=rows))
    for n in (16385, 30000, 10**6):  # the falling slope would reach 0: held at the edge
        t, _, out = fall.dense.at(n)
        assert out and t == 1e-6
        t, out = fall.step_s(_shape([(n, 0)], [], 1))
        assert out and t > fall.step_s(_shape([(16384, 0)], [], 1))[0]


def test_spread_is_held_at_the_edge_beyond_the_grid(tmp_path):
    lat = latency_model(make_component_profile(tmp_path, spread=1.5))
    z = 1.0
    inside = lat.step_s(_shape([], [16000] * 4, 4), z)[0] / lat.step_s(
        _shape([], [16000] * 4, 4))[0]
    far = lat.step_s(_shape([], [10**6] * 4, 4), z)[0] / lat.step_s(
        _shape([], [10**6] * 4, 4))[0]
    sigma = math.log(1.5) / (2 * 1.2815515655446004)
    assert inside == pytest.approx(math.exp(sigma), rel=1e-12)
    assert far == pytest.approx(math.exp(sigma), rel=1e-12)  # not extrapolated


@pytest.mark.parametrize("jitter", [False, True])
def test_bulk_decode_is_bit_identical_to_stepping(tmp_path, jitter):
    lat = latency_model(make_component_profile(tmp_path, spread=1.4))
    rng = np.random.default_rng(3)
    for n in (1, 3, 16, 100, 300):
        ctx = rng.integers(1, 20000, n)
        k = 400
        j = np.arange(k)
        kv_mean = (int(ctx.sum()) + j * n) / n
        kv_max = (int(ctx.max()) + j).astype(float)
        z = rng.standard_normal(k) if jitter else None
        vec, flags = lat.decode_steps_s(n, kv_mean, z, kv_max)
        for i in range(k):
            kvs_max = int(ctx.max()) + i
            shape = BatchShape(0, 0.0, n, (int(ctx.sum()) + i * n) / n, (), kvs_max, n)
            t, o = lat.step_s(shape, None if z is None else float(z[i]))
            assert t == vec[i] and o == flags[i]


POLICIES = [("whole", {}), ("chunk", {}), ("budget", {}), ("sjf", {})]


@pytest.mark.parametrize("policy", [p for p, _ in POLICIES])
def test_fast_forward_changes_nothing_on_a_component_profile(tmp_path, policy):
    prof = make_component_profile(tmp_path, spread=1.3)
    rng = np.random.default_rng(7)
    arrivals = np.sort(rng.uniform(0, 0.2, 30))
    w = workload([(float(a), int(rng.integers(1, 3000)), int(rng.integers(1, 200)))
                  for a in arrivals])
    runs = []
    for ff in (True, False):
        cfg = RunConfig(policy=policy, chunk=None if policy == "whole" else 512,
                        kv_blocks=400,
                        engine=EngineConfig(jitter=True, fast_forward=ff))
        runs.append(simulate(w, prof, cfg))
    (a, sa), (b, sb) = runs
    assert sa["profile_kind"] == "components"
    np.testing.assert_array_equal(a.steps.duration_s, b.steps.duration_s)
    pd.testing.assert_frame_equal(a.requests, b.requests, rtol=1e-12)


def test_whole_step_sigma_is_held_at_the_edge(tmp_path):
    lat = latency_model(make_profile(tmp_path, spread=1.5))
    sigma = math.log(1.5) / (2 * 1.2815515655446004)
    for shape in (BatchShape(0, 0.0, 16, 10**6), BatchShape(60000, 0.0, 0, 0.0),
                  BatchShape(64, 0.0, 3000, 100.0)):
        ratio = lat.step_s(shape, 1.0)[0] / lat.step_s(shape)[0]
        assert ratio == pytest.approx(math.exp(sigma), rel=1e-12)
    kv = np.array([100.0, 16384.0, 10**5, 10**7])
    z = np.ones(4)
    vec = lat.decode_steps_s(16, kv, z)[0] / lat.decode_steps_s(16, kv)[0]
    np.testing.assert_allclose(vec, math.exp(sigma), rtol=1e-12)


def test_step_shape_carries_chunks_spread_and_logits():
    s = StepShape(300, 2, 10.0, 3, 500.0, False, ((100, 0), (200, 4000)), 900, 1)
    (b,) = s.batch_shapes()
    assert (b.chunks, b.decode_kv_max, b.logits) == (((100, 0), (200, 4000)), 900, 4)
    pre, dec = StepShape(300, 2, 10.0, 3, 500.0, True, ((100, 0), (200, 4000)), 900,
                         1).batch_shapes()
    assert (pre.logits, dec.logits, dec.decode_kv_max, pre.decode_count) == (1, 3, 900, 0)


def test_a_run_prices_unequal_decodes_it_sees(tmp_path):
    """End to end: a run whose decodes have unequal contexts costs more on components
    that price the longest member than on ones that do not (same everything else)."""
    spread = make_component_profile(tmp_path, "spread")
    flat = make_component_profile(tmp_path, "flat",
                                  decode=lambda d, k, r: law_decode(d, k, 1.0))
    w = workload([(0.0, 4000, 300), (0.0, 10, 300), (0.0, 10, 300)])
    cfg = RunConfig(policy="budget", chunk=512, kv_blocks=400)
    _, a = simulate(w, spread, cfg)
    _, b = simulate(w, flat, cfg)
    assert a["duration"] > b["duration"]


@pytest.mark.parametrize("edit,where", [
    (lambda df: df.assign(component=df.component.replace({"head": "lm_head"})), "component"),
    (lambda df: df.assign(median_s=df.median_s.astype(object).where(
        df.index != 5, "fast")), "median_s"),
    (lambda df: df.assign(chunk_len=df.chunk_len.where(df.index != 0, 64)), "chunk_len"),
    (lambda df: df.drop(columns=["kv_max"]), "kv_max"),
    (lambda df: df.assign(kv_max=df.kv_max.where(~((df.component == "decode_attn")
                                                   & (df.decode_count == 4)
                                                   & (df.kv_len == 256)
                                                   & (df.kv_max == 384)), 100)), "kv_max"),
])
def test_a_malformed_component_file_names_file_line_and_column(tmp_path, edit, where):
    df = edit(pd.DataFrame(component_rows()))
    path = tmp_path / "bad.csv"
    path.write_text(df.to_csv(index=False))
    with pytest.raises(ValueError) as exc:
        load_profile(str(path))
    msg = str(exc.value)
    assert str(path) in msg and where in msg
    if where != "kv_max" or "lacks" not in msg:
        assert "line " in msg


def test_a_missing_grid_point_is_named(tmp_path):
    df = pd.DataFrame(component_rows())
    drop = df[(df.component == "prefill_attn") & (df.chunk_len == 256)
              & (df.prior_len == 4096)].index
    path = tmp_path / "hole.csv"
    path.write_text(df.drop(index=drop).to_csv(index=False))
    with pytest.raises(ValueError, match=r"missing \{'chunk_len': 256.0, 'prior_len': 4096.0"):
        load_profile(str(path))


def test_fixed_cost_is_one_row(comp):
    assert latency_model(comp).fixed_s == FIXED_S


def test_the_one_dimensional_memo_returns_each_keys_own_figures(comp):
    """`_Line1.at` remembers figures per token count: a key asked again, as an int or a
    float, on or off the grid, gets what a fresh line computes for it, whatever was
    asked before it."""
    lat = latency_model(comp)
    keys = [1, 7, 7.0, 300, 1, 10**7, 0.5, 2048, 300.0, 10**7]
    fresh = ComponentModel(comp)
    for line, ref in ((lat.dense, fresh.dense), (lat.head, fresh.head),
                      (lat.embed, fresh.embed)):
        for x in keys:
            assert line.at(x) == ref._at(x)
        assert set(keys) <= set(line._memo)


def test_a_profile_parses_its_table_once(comp):
    """Engines built on one Profile share its parsed grids (`Profile.components`)."""
    a, b = ComponentModel(comp), ComponentModel(comp)
    assert a.c is b.c is comp.components


def test_models_of_one_profile_object_share_decode_lines_and_price_alike(tmp_path):
    """The decode lines depend on the profile's grids alone: every model of one profile
    object reads the same ones, and a model of a changed table (a new profile object,
    same file hash) builds its own."""
    prof = make_component_profile(tmp_path, spread=1.4)
    a, b = ComponentModel(prof), ComponentModel(prof, step_overhead_s=0.002)
    kv = np.arange(300.0, 900.0)
    ta, _ = a.decode_steps_s(7, kv, None, kv + 40.0)
    assert a._lines is b._lines and a._line(7) is b._line(7)
    fresh = ComponentModel(make_component_profile(tmp_path, "again", spread=1.4))
    tf, _ = fresh.decode_steps_s(7, kv, None, kv + 40.0)
    assert fresh._lines is not a._lines and np.array_equal(ta, tf)
    t = prof.table.copy()
    t["median_s"] = t["median_s"] * 2.0
    doubled = ComponentModel(prof.with_table(t))
    td, _ = doubled.decode_steps_s(7, kv, None, kv + 40.0)
    assert doubled._lines is not a._lines and np.all(td > ta * 1.5)


@pytest.mark.parametrize("scale", [1.0, 1.13])
def test_a_decode_steps_folded_form_is_its_composition(tmp_path, scale):
    """Without jitter a decode-only step inside the grid is priced by its decode line's
    folded bilinear form; that is the composed step (layers x (dense + attention +
    allreduce) + embed + head + fixed, scaled) to rounding, on one cell or many, and a
    point outside the grid is the composed (clamped) step itself."""
    prof = make_component_profile(tmp_path, spread=1.4,
                                  provenance={"components": {"in_sequence_scale": scale}})
    lat = ComponentModel(prof)
    rng = np.random.default_rng(11)
    lo, hi = lat.kvax.lo, lat.kvax.hi
    for d in (1, 5, 64):
        line = lat._line(d)
        one_cell = (rng.uniform(lo, lo + 1.0, 5), np.full(5, 1.01))
        for kv, spread in (one_cell, (rng.uniform(lo, hi, 50), rng.uniform(1.0, 2.5, 50)),
                           (rng.uniform(0.5 * lo, 2.0 * hi, 50), rng.uniform(1.0, 2.5, 50))):
            folded, out = lat._decode(line, kv, spread, None)
            composed, out_c = lat._decode_composed(line, kv, spread, None)
            assert np.array_equal(out, out_c)
            assert np.allclose(folded, composed, rtol=1e-12, atol=0.0)
            assert np.array_equal(folded[out], composed[out])  # outside: composed
            for i in range(len(kv)):  # one step alone (`step_s`'s): the same floats
                t, o = lat._decode(line, kv[i : i + 1], spread[i : i + 1], None)
                assert t[0] == folded[i] and o[0] == out[i]
