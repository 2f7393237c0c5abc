"""Progress on long runs: the engine reports how many requests are done; `sim run` shows
a bar once a run has taken a while, and only on a terminal."""

from __future__ import annotations

from factories import workload
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.progress import DelayedProgress, ProgressBar
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate


class FakeBar:
    made: list[FakeBar] = []

    def __init__(self, label, total=0, **kw):
        self.label, self.total, self.done, self.closed = label, total, 0, False
        FakeBar.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True

    def advance(self, n=1):
        self.done += n


def test_engine_reports_progress_up_to_every_request(const_profile):
    # 3,000 requests of 20 tokens arriving one by one: many steps, many reports
    w = workload([(i * 0.02, 20, 20) for i in range(3000)] + [(100.0, 10**9, 5)])
    seen: list[tuple[int, int]] = []
    for fast in (True, False):
        seen.clear()
        _, s = simulate(w, const_profile, RunConfig(engine=EngineConfig(fast_forward=fast)),
                        progress=lambda done, total, sim_s=None: seen.append((done, total)))
        assert s["completed"] == 3000 and s["rejected"] == 1
        assert len(seen) >= 3  # the start, at least one stretch, the end
        assert all(t == 3001 for _, t in seen)
        dones = [d for d, _ in seen]
        assert dones == sorted(dones) and dones[-1] == 3001 and dones[0] < 3001


def test_delayed_progress_stays_silent_on_short_work():
    now = [0.0]
    FakeBar.made.clear()
    with DelayedProgress("x", after_s=2.0, clock=lambda: now[0], bar=FakeBar) as p:
        p(10, 100)
        now[0] = 1.9
        p(50, 100)
        now[0] = 2.5
        p(100, 100)  # finished: no bar for work already done
    assert FakeBar.made == []


def test_delayed_progress_shows_a_bar_once_work_runs_long():
    now = [0.0]
    FakeBar.made.clear()
    with DelayedProgress("x", after_s=2.0, clock=lambda: now[0], bar=FakeBar) as p:
        p(10, 100)
        now[0] = 3.0
        p(40, 100)
        p(100, 100)
        (bar,) = FakeBar.made
        assert bar.total == 100 and bar.done == 100 and not bar.closed
    assert bar.closed
    FakeBar.made.clear()
    with DelayedProgress("x", after_s=0.0, enabled=False, bar=FakeBar) as p:
        p(1, 100)
    assert FakeBar.made == []


def test_sim_run_always_reports_progress(monkeypatch, linear_profile):
    """On a terminal the bar, off one plain lines (`PlainLines`): `sim run` never turns
    its progress off; the form is the bar's choice."""
    import chunksim.progress as progress

    made: list[DelayedProgress] = []

    class Eager(DelayedProgress):
        def __init__(self, label, enabled=True, **kw):
            super().__init__(label, after_s=0.0, enabled=enabled, bar=FakeBar)
            made.append(self)

    monkeypatch.setattr(progress, "DelayedProgress", Eager)
    args = ["run", "--profile", linear_profile.path, "-n", "300", "--rate", "50"]
    FakeBar.made.clear()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert made[-1].enabled
    assert FakeBar.made[0].done == 300 and FakeBar.made[0].closed


def test_plain_lines_off_a_terminal_estimate_the_time_left():
    from chunksim.progress import PlainLines

    now = [0.0]
    lines: list[str] = []
    p = PlainLines("sweep", total=100, after_s=10.0, every_s=60.0, clock=lambda: now[0],
                   write=lines.append)
    now[0] = 5.0
    p.advance(5)
    assert lines == []  # short jobs stay silent
    now[0] = 20.0
    p.advance(5)  # 10 of 100 in 20 s: 90 more take 180 s
    assert lines == ["sweep: 10 of 100 done, 20 s elapsed, about 3 min 0 s left"]
    now[0] = 30.0
    p.advance(10)
    assert len(lines) == 1  # at most one line a minute
    now[0] = 81.0
    p.advance(10)
    assert len(lines) == 2 and lines[1].startswith("sweep: 30 of 100 done, 1 min 21 s")


def test_an_open_ended_search_shows_no_time_left():
    """A search adds its probes as it goes: an estimate from the probes found so far
    would run low, so none is shown."""
    from chunksim.progress import PlainLines

    now = [0.0]
    lines: list[str] = []
    p = PlainLines("capacity probes", total=27, after_s=10.0, clock=lambda: now[0],
                   write=lines.append, open_ended=True)
    now[0] = 11.0
    p.advance(16)
    assert lines == ["capacity probes: 16 done of 27 found so far, 11 s elapsed"]
    bar = ProgressBar("x", total=3, terminal=False, open_ended=True)
    with bar:
        assert bar._lines is not None and bar._lines.open_ended


def test_progress_bar_off_a_terminal_uses_plain_lines():
    bar = ProgressBar("x", total=3, terminal=False)
    with bar:
        assert bar._progress is None and bar._lines is not None
        bar.add(2)
        bar.advance()
        assert bar._lines.total == 5 and bar._lines.done == 1
