"""A rich progress bar on stderr (stdout stays clean for tables and JSON)."""

from __future__ import annotations

from types import TracebackType


class ProgressBar:
    """`with ProgressBar("compare", total=9) as bar: ... bar.advance()`; `add` grows the
    total for searches that discover their work round by round; `describe` relabels the
    bar (e.g. the item in progress); `completed` starts it part done (a resumed job)."""

    def __init__(self, label: str, total: int = 0, enabled: bool = True,
                 completed: int = 0) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.completed = completed
        self._progress = None
        self._task = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self.total,
                                                 completed=self.completed)
        return self

    def add(self, n: int) -> None:
        """Announce `n` more jobs."""
        self.total += n
        if self._progress is not None:
            self._progress.update(self._task, total=self.total)

    def describe(self, text: str) -> None:
        """Show `text` as the bar's label."""
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def advance(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
