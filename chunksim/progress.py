"""Progress on stderr (stdout stays clean for tables and JSON): a rich bar on a terminal;
off one (a log, a pipe, CI), a plain line now and then for long jobs, the first with an
estimate of the time left."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType


class ProgressBar:
    """`with ProgressBar("compare", total=9) as bar: ... bar.advance()`; `add` grows the
    total for searches that discover their work round by round; `describe` relabels the
    bar (e.g. the item in progress); `completed` starts it part done (a resumed job).
    `open_ended`: the total is only the work found so far (a search adds probes as it
    goes), so no time left is shown, as any would run low."""

    def __init__(self, label: str, total: int = 0, enabled: bool = True,
                 completed: int = 0, terminal: bool | None = None,
                 open_ended: bool = False) -> None:
        self.label = label
        self.total = total
        self.open_ended = open_ended
        self.enabled = enabled
        self.completed = completed
        self._progress = None
        self._task = None
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self._lines: PlainLines | None = None

    def __enter__(self) -> ProgressBar:
        if self.enabled and not self.terminal:
            self._lines = PlainLines(self.label, self.total, self.completed,
                                     open_ended=self.open_ended)
        elif self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            left = () if self.open_ended else (TimeRemainingColumn(),)
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), *left, console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self.total,
                                                 completed=self.completed)
        return self

    def add(self, n: int) -> None:
        """Announce `n` more jobs."""
        self.total += n
        if self._progress is not None:
            self._progress.update(self._task, total=self.total)
        if self._lines is not None:
            self._lines.total = self.total

    def describe(self, text: str) -> None:
        """Show `text` as the bar's label."""
        if self._progress is not None:
            self._progress.update(self._task, description=text)
        if self._lines is not None:
            self._lines.label = text

    def advance(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)
        if self._lines is not None:
            self._lines.advance(n)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()


class PlainLines:
    """Progress as plain lines on stderr, for output that is not a terminal: silent for
    `after_s`, then a line every `every_s` (`label: 12 of 40 done, 1 min 3 s elapsed,
    about 2 min 6 s left`); the first line left says when the job will end, so a run
    of more than a minute says so early. `open_ended` (a search): `12 found so far`, and
    no time left."""

    def __init__(self, label: str, total: int, done: int = 0, after_s: float = 10.0,
                 every_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None,
                 open_ended: bool = False) -> None:
        self.label, self.total, self.done = label, total, done
        self.open_ended = open_ended
        self.first_done = done
        self.after_s, self.every_s, self.clock = after_s, every_s, clock
        self.start = clock()
        self.next_at = self.start + after_s
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if now < self.next_at or self.done >= self.total:
            return
        self.next_at = now + self.every_s
        self.write(self.line(now))

    def line(self, now: float) -> str:
        elapsed = now - self.start
        if self.open_ended:
            return (f"{self.label}: {self.done} done of {self.total} found so far, "
                    f"{clock_text(elapsed)} elapsed")
        txt = f"{self.label}: {self.done} of {self.total} done, {clock_text(elapsed)} elapsed"
        ran = self.done - self.first_done
        if ran > 0 and self.total > self.done:
            left = elapsed / ran * (self.total - self.done)
            txt += f", about {clock_text(left)} left"
        return txt


class DelayedProgress:
    """A progress callback, `progress(done, total)`, that shows a bar only once the work
    has run `after_s` seconds: short runs stay silent, long ones show how far they are.
    `close()` (or leaving the `with` block) removes the bar."""

    def __init__(self, label: str, after_s: float = 2.0, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 bar: Callable[..., ProgressBar] = ProgressBar) -> None:
        self.label = label
        self.after_s = after_s
        self.enabled = enabled
        self.clock = clock
        self.make_bar = bar
        self.start = clock()
        self.bar: ProgressBar | None = None
        self.shown = 0

    def __call__(self, done: int, total: int, sim_s: float | None = None) -> None:
        """`done` of `total` items; `sim_s`, when given, is shown in the label (a
        simulator's clock: how far into the workload the run is)."""
        if not self.enabled:
            return
        if self.bar is None:
            if self.clock() - self.start < self.after_s or done >= total:
                return
            self.bar = self.make_bar(self.label, total=total).__enter__()
        self.bar.advance(done - self.shown)
        self.shown = done
        describe = getattr(self.bar, "describe", None)
        if sim_s is not None and describe is not None:
            describe(f"{self.label} ({clock_text(sim_s)} simulated)")

    def __enter__(self) -> DelayedProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def clock_text(seconds: float) -> str:
    """`42 s`, `12 min 5 s`, `3 h 07 min`, `2 d 04 h`: a duration for a progress label."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"
