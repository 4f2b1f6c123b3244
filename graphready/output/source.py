"""Source lines for snippets, read once per file and tolerant of files that moved or vanished."""

from __future__ import annotations

from pathlib import Path

from graphready.sourcefile import SourceText, read_source


class SourceCache:
    """Reads `root / path` lazily; a missing or undecodable file simply has no snippet."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._lines: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if self.root is None or not path:
            return None
        if path not in self._lines:
            read = read_source(self.root / path)  # never blocks on a FIFO, honours `coding:` lines
            self._lines[path] = read.text.splitlines() if isinstance(read, SourceText) else None
        return self._lines[path]

    def line(self, path: str, lineno: int) -> str | None:
        """Line `lineno` (1-based) of `path`, or None when it cannot be read."""
        lines = self.lines(path)
        if lines is None or not 1 <= lineno <= len(lines):
            return None
        return lines[lineno - 1]

    def window(self, path: str, first: int, last: int, context: int = 2) -> list[tuple[int, str]]:
        """(line number, text) pairs for `first..last` plus `context` lines each side."""
        lines = self.lines(path)
        if lines is None or not 1 <= first <= len(lines):
            return []
        start = max(1, first - context)
        stop = min(len(lines), max(first, last) + context)
        return [(n, lines[n - 1]) for n in range(start, stop + 1)]
