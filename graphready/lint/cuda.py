"""GR404 in CUDA sources: a `kernel<<<grid, block>>>` launch with no stream runs on the default
stream, outside any capture on the caller's stream."""

from __future__ import annotations

import re

from graphready.lint.analysis.candidate import Candidate

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
LAUNCH = re.compile(r"<<<(?P<config>.*?)>>>", re.DOTALL)
CUDA_SUFFIXES = (".cu", ".cuh")


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def _top_level_args(text: str) -> int:
    depth, count = 0, 1
    for char in text:
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        elif char == "," and depth == 0:
            count += 1
    return count if text.strip() else 0


def scan_cuda(source: str) -> list[Candidate]:
    code = COMMENT.sub(_blank, source)
    candidates = []
    for match in LAUNCH.finditer(code):
        if _top_level_args(match.group("config")) >= 4:
            continue
        line = code.count("\n", 0, match.start()) + 1
        column = match.start() - (code.rfind("\n", 0, match.start()) + 1)
        end = match.end()
        end_line = code.count("\n", 0, end) + 1
        end_column = end - (code.rfind("\n", 0, end) + 1)
        candidates.append(Candidate(
            "GR404", line, column, end_line, end_column,
            "kernel launch without a stream runs on the default stream, outside the caller's capture stream; "
            "pass `at::cuda::getCurrentCUDAStream()` as the fourth launch argument", ""))
    return candidates
