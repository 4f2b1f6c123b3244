"""The two ways a command ends early, each with its own exit code and never a bare traceback.

Exit codes shared by every command: 0 clean, 1 findings that fail the run, 2 usage or
configuration error (`UsageError`), 3 internal error (a bug in graphready: an `InternalError`, or
`lint`'s GR002 findings, which leave the other findings standing).
"""

from pathlib import Path

from graphready.sourcefile import NotRegular, regular_bytes

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3

REPORT_HINT = ("please report it to the graphready maintainers with that file (or a small excerpt that"
               " still fails) and the output of the same command with --verbose")


class UsageError(Exception):
    """Bad arguments, bad configuration, a missing file, or no GPU where one is required."""


def read_named_file(path: Path, label: str, error: type[Exception] = UsageError, directory_hint: str = "") -> str:
    """The text of a file the user named (config, baseline, results), or `error` saying why it cannot be read."""
    try:
        return regular_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise error(f"{label} not found: {path}") from None
    except NotRegular as exc:  # a directory, or a FIFO or device that would block or never end
        what = f"a directory{directory_hint}" if exc.kind == "a directory" else f"{exc.kind}, not a file"
        raise error(f"{label} {path} is {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {label} {path}: {exc}") from None


class InternalError(Exception):
    """graphready itself failed: reported apart from findings so it never passes for them.

    `path` names the file being analysed when it failed, or `during` the phase over a whole project
    (`lint` reports a failure on one file as a GR002 finding instead and goes on); `details` is the
    original traceback, shown only with --verbose.
    """

    def __init__(self, path: str | None, error: str, details: str, during: str | None = None):
        super().__init__(path, error, details, during)  # plain args: it crosses process boundaries
        self.path = path
        self.error = error
        self.details = details
        self.during = during

    @classmethod
    def wrap(cls, path: str | None, exc: BaseException, during: str | None = None) -> "InternalError":
        import traceback

        return cls(path, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)), during)

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        if self.during:
            where = f" while {self.during}"
        elif self.path:
            where = f" while analysing {self.path}"
        else:
            where = ""
        return f"internal error{where} ({self.error}); {REPORT_HINT}"
