"""Reading one source file: regular files only, decoded the way Python decodes them.

Shared by `lint` (which reads each file once) and the snippets of the text and report outputs.
Whatever goes wrong (a dangling symlink, a FIFO that would block forever, a file that is not
readable or vanishes between discovery and reading, an unknown `coding:` declaration) becomes a
one-line reason that the engine reports as GR001 for that file; the run goes on.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}


@dataclass
class SourceText:
    data: bytes
    text: str


class NotRegular(OSError):
    """The path is no regular file: reading it could block forever (a FIFO) or never end (`/dev/zero`)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind  # "a FIFO", "a directory", ...


def regular_bytes(path: Path) -> bytes:
    """The bytes of a regular file (through symlinks); NotRegular for anything else, OSError if it cannot be read.
    Everything graphready reads from a checkout goes through here: a planted link to a device must not hang it."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then decides on what was opened.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):  # before the descriptor becomes a file object, which refuses a directory
        os.close(descriptor)
        raise NotRegular(_KINDS.get(stat.S_IFMT(mode), "not a regular file"))
    with os.fdopen(descriptor, "rb") as handle:
        return handle.read()


def read_source(path: Path) -> SourceText | str:
    """The file's bytes and text, or why it cannot be linted."""
    try:
        data = regular_bytes(path)
    except NotRegular as exc:
        return f"not read: {exc.kind}, not a source file"
    except FileNotFoundError:
        if os.path.islink(path):
            return f"cannot read: dangling symlink to {os.readlink(path)}"
        return "cannot read: the file vanished while linting"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return decode(data)


def decode(data: bytes) -> SourceText | str:
    """PEP 263: a `# -*- coding: latin-1 -*-` line (or a UTF-8 BOM) decides; UTF-8 otherwise."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        return f"cannot decode: {exc}"
    try:
        return SourceText(data, data.decode(encoding))
    except UnicodeDecodeError as exc:
        name = "UTF-8" if encoding in ("utf-8", "utf-8-sig") else encoding
        return f"file is not valid {name}: {exc.reason}"
