"""A progress bar on stderr for a long lint on a terminal (a cold run of a large engine takes a while).

Shown only once a run has taken DELAY seconds, so quick and warm runs print nothing extra; the command
turns it off for machine formats and when stderr is not a terminal. rich is imported only then.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DELAY = 2.0  # seconds before the bar appears


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.bar = None  # rich.progress.Progress, once shown
        self.task = None
        self.description = ""
        self.total = 0
        self.done = 0

    def phase(self, description: str, total: int) -> Callable[[], None]:
        """Start counting `total` steps of a phase; returns the function that counts one step."""
        self.description, self.total, self.done = description, total, 0
        if self.bar is not None:
            self.bar.update(self.task, description=description, total=total, completed=0)
        return self.advance

    def advance(self) -> None:
        self.done += 1
        if self.bar is None and time.monotonic() - self.started >= DELAY:
            self._show()
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        self.bar = Bar(TextColumn("graphready lint: {task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(self.description, total=self.total, completed=self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
