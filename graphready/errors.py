"""Errors that end a command with a clear message and exit code 2, never a traceback."""


class UsageError(Exception):
    """Bad arguments, bad configuration, a missing file, or no GPU where one is required."""
