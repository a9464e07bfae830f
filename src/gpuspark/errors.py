"""User-facing errors: each names the input, what is wrong and what to do.

The CLI turns any :class:`GpusparkError` into one line and exit code 1; with
``GPUSPARK_DEBUG=1`` it also prints the traceback.
"""

from __future__ import annotations

__all__ = ["ClusterError", "GpusparkError", "LaunchError", "SpecError", "did_you_mean"]


class GpusparkError(Exception):
    """Base class of errors meant for the user: the message is the whole story.

    ``remedy`` is an optional one-line hint appended to the message.
    """

    def __init__(self, message: str, *, remedy: str | None = None) -> None:
        self.message = message
        self.remedy = remedy
        super().__init__(f"{message} ({remedy})" if remedy else message)


class SpecError(GpusparkError, ValueError):
    """A cluster spec file is malformed or inconsistent."""


class ClusterError(GpusparkError):
    """The embedded Spark cluster cannot be started, found or stopped."""


class LaunchError(GpusparkError):
    """A distributed launch was refused up front or failed on a rank."""


def did_you_mean(name: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``."""
    import difflib

    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
