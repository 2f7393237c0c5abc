"""Capacity bisection: a monotone synthetic capacity is found within the tolerance."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from chunksim.sweep.search import RateSearch, find_max_rate


@given(capacity=st.floats(0.01, 900.0), start=st.floats(0.05, 50.0),
       tol=st.sampled_from([0.02, 0.03, 0.05, 0.2]))
def test_monotone_capacity_found_within_tolerance(capacity, start, tol):
    s = find_max_rate(lambda r: r <= capacity, start=start, tol=tol, min_rate=1e-3,
                      max_rate=1e3)
    assert s.lo is not None and s.hi is not None
    assert s.lo <= capacity < s.hi  # the bracket holds the true capacity
    assert s.hi / s.lo <= 1 + tol
    assert capacity / s.capacity <= 1 + tol
    assert not s.capped


def test_probe_count_is_logarithmic():
    s = find_max_rate(lambda r: r <= 37.0, start=1.0, tol=0.03)
    # 6 doublings to 64, then ~log2(log(2)/log(1.03)) ~ 5 bisections, then 2 checks above
    assert len(s.probes) <= 14
    assert [r for r, _ in s.probes[:7]] == [1, 2, 4, 8, 16, 32, 64]


def test_halves_down_when_the_start_is_too_fast():
    s = find_max_rate(lambda r: r <= 0.3, start=8.0, tol=0.05)
    assert s.probes[0] == (8.0, False)
    assert 0.3 / 1.05 <= s.capacity <= 0.3


def test_capped_when_slos_hold_at_max_rate():
    s = find_max_rate(lambda r: True, start=1.0, max_rate=100.0)
    assert s.capacity == 100.0 and s.capped


def test_zero_when_no_rate_meets_the_slos():
    s = find_max_rate(lambda r: False, start=1.0, min_rate=0.01)
    assert s.capacity == 0.0 and not s.capped
    assert min(r for r, _ in s.probes) >= 0.01


def test_searches_share_a_rate_lattice():
    """Two configurations with capacities in the same bracket end on the same rate."""
    a = find_max_rate(lambda r: r <= 10.0, start=1.0, tol=0.05)
    b = find_max_rate(lambda r: r <= 10.2, start=1.0, tol=0.05)
    assert a.capacity == b.capacity
    assert math.isclose(a.capacity, b.capacity)


@pytest.mark.parametrize("kw", [{"tol": 0.0}, {"tol": 1.5}, {"start": 0.0},
                                {"start": 10.0, "max_rate": 5.0}, {"verify": (1.0,)}])
def test_bad_parameters_raise(kw):
    with pytest.raises(ValueError):
        RateSearch(**kw)


def test_a_pass_above_the_bracket_resumes_the_search():
    """Feasibility with a dip (a noisy tail failing 3.67 and 4.0 while 4.5-7.3 pass): a
    plain bisection stops at ~3.59; the checks above the bracket find the real edge."""
    def feasible(r):
        return r <= 3.6 or 4.5 <= r <= 7.3

    plain = find_max_rate(feasible, start=1.0, tol=0.03, verify=())
    assert plain.capacity < 3.7
    s = find_max_rate(feasible, start=1.0, tol=0.03)
    assert 7.3 / 1.03 <= s.capacity <= 7.3
    assert s.non_monotone and all(3.6 < r < 4.5 for r in s.non_monotone)
    assert s.hi / s.lo <= 1.03 and not s.capped


def test_checks_above_stop_at_max_rate():
    s = find_max_rate(lambda r: r <= 90.0, start=1.0, tol=0.05, max_rate=100.0)
    assert max(r for r, _ in s.probes) <= 100.0 and 90 / 1.05 <= s.capacity <= 90


def test_halvings_are_the_rates_a_failing_search_probes_next():
    s = RateSearch(start=8.0, min_rate=0.3)
    assert s.halvings() == []  # nothing probed yet
    s.report(8.0, False)
    mid = math.sqrt(8.0 * 4.0)  # the first octave's midpoint comes first
    assert s.halvings() == [mid, 4.0, 2.0, 1.0, 0.5]
    assert [s.next_rate() for _ in range(1)] == [mid]
    s.floor_fails = True  # those rates are known to miss: the search is over
    assert s.next_rate() is None and s.done and s.capacity == 0.0
    t = RateSearch(start=8.0)
    t.report(8.0, True)
    t.floor_fails = True  # ignored once a rate met: the search doubles and bisects on
    assert t.halvings() == [] and t.next_rate() == 16.0


class _Halving(RateSearch):
    """The search as it was: an octave down at a time, the octave's midpoint after."""

    def _below(self, hi: float) -> float:
        return hi / 2


@given(capacity=st.floats(0.01, 900.0), start=st.floats(0.05, 50.0),
       tol=st.sampled_from([0.02, 0.03, 0.05, 0.2]))
def test_the_midpoint_first_ends_on_the_halvings_floats_without_its_passing_probe(
        capacity, start, tol):
    """Where passing is monotone in the rate, the search ends on the bracket pure halving
    ends on, float for float; it probes no rate that halving would not, but the first
    octave's midpoint, and below a failed start it never probes more rates that pass
    (a pass runs in full), one fewer when the capacity lies in the octave's upper half."""
    new = find_max_rate(lambda r: r <= capacity, start=start, tol=tol)
    old = _Halving(start, tol)
    while (r := old.next_rate()) is not None:
        old.report(r, r <= capacity)
    assert (new.lo, new.hi) == (old.lo, old.hi)
    mid = math.sqrt(start * (start / 2))
    assert {r for r, _ in new.probes} <= {r for r, _ in old.probes} | {mid}
    passed_new = sum(ok for _, ok in new.probes)
    passed_old = sum(ok for _, ok in old.probes)
    if capacity < start:
        assert passed_new <= passed_old
        if mid <= capacity:
            assert passed_new == passed_old - 1
    assert len(new.probes) <= len(old.probes) + 1


def _on_lattice(rate: float, start: float, tol: float) -> bool:
    n = RateSearch(start, tol).steps_per_octave
    x = math.log2(rate / start) * n
    return abs(x - round(x)) < 1e-6


@given(capacity=st.floats(0.05, 400.0), start=st.sampled_from([1.0, 4.0, 5.0, 8.0]),
       hint=st.floats(0.01, 900.0), tol=st.sampled_from([0.02, 0.03, 0.05, 0.2]))
def test_a_hinted_search_ends_where_the_cold_one_does(capacity, start, hint, tol):
    """Under monotone feasibility the walk from any hint brackets and bisects onto the
    bracket the cold search ends on: the same capacity, the same checks above it."""
    assume(not _on_lattice(capacity, start, tol))  # a float tie either side could take
    kw = dict(start=start, tol=tol, min_rate=1e-3, max_rate=1e3)
    cold = find_max_rate(lambda r: r <= capacity, **kw)
    warm = find_max_rate(lambda r: r <= capacity, hint=hint, **kw)
    assert math.isclose(warm.capacity, cold.capacity, rel_tol=1e-9)
    assert math.isclose(warm.hi, cold.hi, rel_tol=1e-9)
    for m in warm.verify:  # both checked the same rates above the bracket
        assert any(math.isclose(r, warm.hi * m, rel_tol=1e-9) for r, _ in warm.probes)


@given(capacity=st.floats(0.5, 300.0), tol=st.sampled_from([0.02, 0.03, 0.05]),
       side=st.sampled_from(["lo", "hi"]))
def test_a_hint_on_the_bracket_ends_in_two_probes_and_the_checks(capacity, tol, side):
    cold = find_max_rate(lambda r: r <= capacity, start=4.0, tol=tol)
    assume(cold.lo is not None and cold.hi is not None)
    warm = find_max_rate(lambda r: r <= capacity, start=4.0, tol=tol,
                         hint=cold.lo if side == "lo" else cold.hi * (1 + 1e-12))
    assert len(warm.probes) == 2 + len(warm.verify) < len(cold.probes)
    assert math.isclose(warm.capacity, cold.capacity, rel_tol=1e-9)


def test_aim_rounds_the_hint_down_onto_the_lattice():
    s = RateSearch(start=4.0, tol=0.03)
    assert s.steps_per_octave == 32  # 2^(1/32) = 1.022 <= 1.03 < 2^(1/16)
    s.aim(6.0)
    assert s.hint == pytest.approx(4.0 * 2 ** (18 / 32)) and s.hint <= 6.0
    assert s.next_rate() == s.hint
    s.report(s.hint, True)
    assert s.next_rate() == pytest.approx(4.0 * 2 ** (19 / 32))  # one step up
    with pytest.raises(ValueError, match="already probed"):
        s.aim(5.0)
    with pytest.raises(ValueError, match="> 0"):
        RateSearch(start=4.0).aim(0.0)


def test_the_walk_doubles_its_steps_then_halves_beyond_an_octave():
    s = RateSearch(start=1.0, tol=0.2)  # 2^(1/4) = 1.19: four steps an octave
    assert s.steps_per_octave == 4
    s.aim(16.0)
    rates = []
    while (r := s.next_rate()) is not None and len(rates) < 6:
        rates.append(r)
        s.report(r, False)
    steps = [round(math.log2(16.0 / r) * 4) for r in rates]
    assert steps == [0, 1, 2, 4, 8, 12]  # the hint, 1, 2, 4 steps, then halvings


@given(hint=st.floats(0.5, 200.0), min_rate=st.sampled_from([0.01, 0.3, 0.9]))
def test_halvings_of_a_hinted_search_are_what_it_probes_while_missing(hint, min_rate):
    s = RateSearch(start=1.0, min_rate=min_rate, max_rate=1e3)
    s.aim(hint)
    s.report(s.next_rate(), False)
    ahead = s.halvings()
    seen = []
    while (r := s.next_rate()) is not None:
        seen.append(r)
        s.report(r, False)
    assert seen == ahead and all(r >= min_rate for r in seen)
    assert s.capacity == 0.0
