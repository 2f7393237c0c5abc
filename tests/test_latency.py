"""The latency model: exact on multilinear laws, flags extrapolation, both paths agree."""

import math

import numpy as np
import pytest
from factories import linear_time, make_profile

from chunksim.core.shape import BatchShape
from chunksim.latency.model import LatencyModel
from chunksim.latency.profile import load_profile


@pytest.mark.parametrize("c,p,d,k", [
    (100, 0, 0, 0), (700, 0, 3, 500), (3000, 2000, 10, 3000), (16, 0, 200, 10000),
    (0, 0, 37, 1234.5), (5000, 12000, 0, 0),
])
def test_interpolation_reproduces_a_multilinear_law(linear_profile, c, p, d, k):
    lat = LatencyModel(linear_profile)
    t, out = lat.step_s(BatchShape(c, p, d, k))
    assert t == pytest.approx(linear_time(c, p, d, k), rel=1e-12)
    assert not out


def test_outside_the_grid_extrapolates_linearly_and_is_flagged(linear_profile):
    lat = LatencyModel(linear_profile)
    t, out = lat.step_s(BatchShape(20000, 0, 0, 0))  # grid stops at 16384
    assert out
    assert t == pytest.approx(linear_time(20000, 0, 0, 0), rel=1e-9)
    assert lat.step_s(BatchShape(0, 0, 300, 100))[1]  # 300 decodes > 256
    assert lat.step_s(BatchShape(100, 20000, 0, 0))[1]  # prior beyond grid


def _falling(c: float, p: float, d: float, k: float) -> float:
    """A noisy table's shape: at the far-end cells time falls, from 64 to 256 decodes, from
    4096 to 16384 context tokens and from 4096 to 16384 chunk tokens."""
    t = linear_time(c, p, d, 4096 if d and k == 16384 else k) * (0.9 if d and k == 16384
                                                                 else 1.0)
    t *= 0.3 if d == 256 else 1.0
    return t * (0.2 if c == 16384 else 1.0)


def test_beyond_the_far_end_a_step_is_never_priced_below_the_edge(tmp_path):
    lat = LatencyModel(make_profile(tmp_path, _falling))
    edge_d = lat.step_s(BatchShape(0, 0, 256, 1024))[0]
    for d in (300, 2000, 50000):  # the falling edge cell would reach 0 by ~5000 decodes
        t, out = lat.step_s(BatchShape(0, 0, d, 1024))
        assert out and t == edge_d
        assert lat.step_s(BatchShape(64, 0, d, 1024))[0] == lat.step_s(
            BatchShape(64, 0, 256, 1024))[0]
    edge_c = lat.step_s(BatchShape(16384, 0, 0, 0))[0]
    assert lat.step_s(BatchShape(60000, 0, 0, 0)) == (edge_c, True)
    edge_k = lat.step_s(BatchShape(0, 0, 16, 16384))[0]
    kv = np.array([100.0, 16384.0, 20000.0, 1e6])
    vec, flags = lat.decode_steps_s(16, kv)
    assert vec[2] == vec[3] == edge_k and flags.tolist() == [False, False, True, True]
    for i, k in enumerate(kv):  # both paths floor alike
        assert lat.step_s(BatchShape(0, 0.0, 16, float(k)))[0] == vec[i]


def test_vectorized_decode_path_is_bit_identical_to_the_scalar_path(linear_profile):
    lat = LatencyModel(linear_profile)
    kv = np.array([1.0, 17.5, 255.0, 256.0, 3000.25, 16383.0, 20000.0])
    z = np.linspace(-2, 2, len(kv))
    for d in (1, 5, 64, 300):
        for zz in (None, z):
            vec, flags = lat.decode_steps_s(d, kv, zz)
            for i, k in enumerate(kv):
                t, out = lat.step_s(BatchShape(0, 0.0, d, float(k)),
                                    None if zz is None else float(zz[i]))
                assert vec[i] == t  # exact: the engine's fast-forward relies on it
                assert flags[i] == out


def test_the_vector_path_takes_points_in_any_order(linear_profile):
    """Contexts not in a stretch's order (descending, mixed, beyond the grid's ends) are
    priced as the scalar path prices each; a stretch's, read as one (`stepwise`), alike."""
    lat = LatencyModel(linear_profile)
    kv = np.array([300.0, 20000.0, 17.5, 3000.25, 1.0, 16383.0, 310.0])  # ends: one cell
    vec, flags = lat.decode_steps_s(5, kv)
    for i, k in enumerate(kv):
        assert (vec[i], flags[i]) == lat.step_s(BatchShape(0, 0.0, 5, float(k)))
    ordered = np.sort(kv)
    assert np.array_equal(lat.decode_steps_s(5, ordered, stepwise=True)[0],
                          lat.decode_steps_s(5, ordered)[0])


def test_jitter_follows_the_measured_spread(linear_profile):
    lat = LatencyModel(linear_profile)  # spread p90/p10 = 1.5
    shape = BatchShape(256, 0, 4, 1024)
    med = lat.step_s(shape)[0]
    z = 1.2815515655446004  # the 90th percentile of a standard normal
    assert lat.step_s(shape, z)[0] == pytest.approx(med * math.sqrt(1.5), rel=1e-9)
    assert lat.step_s(shape, 0.0)[0] == med


def test_pruned_points_are_filled_and_flagged(tmp_path):
    prof = make_profile(tmp_path)
    t = prof.table
    drop = (t["decode_count"] == 256) & (t["kv_len"] == 16384)
    lat = LatencyModel(prof.with_table(t[~drop]))
    assert lat.filled_cells > 0
    val, out = lat.step_s(BatchShape(0, 0, 256, 16384))
    assert out
    assert val == pytest.approx(linear_time(0, 0, 256, 16384), rel=1e-6)
    assert not lat.step_s(BatchShape(0, 0, 16, 1024))[1]


def test_profile_errors_name_the_file_and_the_fix(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("chunk_len,decode_count\n1,2\n")
    with pytest.raises(ValueError, match="lacks column"):
        load_profile(str(bad))
    with pytest.raises(ValueError, match="neither a CSV file nor a bundled profile"):
        load_profile("no-such-profile")
    prof = make_profile(tmp_path, name="edited")
    (tmp_path / "edited.csv").write_text(
        (tmp_path / "edited.csv").read_text().replace("0.002", "0.003", 1))
    with pytest.raises(ValueError, match="edited after profiling"):
        load_profile(str(tmp_path / "edited.csv"))
    assert prof.sha256
