"""Which waiting job a pipelined capacity search hands its pool next (`probe_drive._Dispatch`):
probes before fill-in runs before closing runs, first come first served within a kind, and
never more jobs on the pool than its slots."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.sweep.probe_drive import _Dispatch

# pipelined's key kinds: 0 a probe's run, 1 a closing run, 2 a run filling in figures
_KINDS = st.sampled_from([0, 1, 2])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.lists(st.one_of(st.tuples(st.just("add"), _KINDS),
                                             st.tuples(st.just("take"), st.integers(0, 5))),
                                   max_size=60))
def test_the_most_urgent_waiting_job_goes_first_within_the_slots(slots, ops):
    d = _Dispatch(slots)
    waiting: list[tuple[int, int]] = []  # (kind, serial) as added, not yet taken
    taken: list[int] = []
    serial = 0
    for op, arg in ops:
        if op == "add":
            d.add((arg, serial), f"job{serial}")
            waiting.append((arg, serial))
            serial += 1
            continue
        out = d.take(arg)
        assert len(out) == max(0, min(slots - arg, len(waiting)))
        for key, job in out:
            # the job handed over is the most urgent left: probes, fill-ins, closing runs;
            # the earliest added within its kind
            best = min(waiting, key=lambda w: ({0: 0, 2: 1, 1: 2}[w[0]], w[1]))
            assert key == best and job == f"job{key[1]}"
            waiting.remove(best)
            taken.append(key[1])
    # the rest come out too, in the same order, each job once in all
    while out := d.take(0):
        for key, _ in out:
            best = min(waiting, key=lambda w: ({0: 0, 2: 1, 1: 2}[w[0]], w[1]))
            assert key == best
            waiting.remove(best)
            taken.append(key[1])
    assert not waiting and sorted(taken) == list(range(serial))

def test_a_probe_submitted_after_closing_runs_passes_them():
    d = _Dispatch(2)
    d.add((1, 0), "closing a")
    d.add((1, 1), "closing b")
    d.add((2, 0, 0), "fill")
    d.add((0, 3, 1), "probe")
    assert [job for _, job in d.take(0)] == ["probe", "fill"]
    assert d.take(2) == []  # the pool is full: both slots held
    assert [job for _, job in d.take(1)] == ["closing a"]
    assert [job for _, job in d.take(0)] == ["closing b"]
    assert d.take(0) == []
