"""User-facing errors: each names the input, what is wrong and what to do.

Every error class of gpuspark lives here, so that any module can raise or catch any of them
without importing the module that raises it. The CLI turns any :class:`GpusparkError` into
one line and exit code 1 (under ``--json``, one JSON object: ``error`` is the message,
``remedy`` the remedy); with ``GPUSPARK_DEBUG=1`` it also prints the traceback.
"""

from __future__ import annotations

__all__ = [
    "CacheError",
    "CheckpointError",
    "ClusterError",
    "CorruptRecordError",
    "DDPError",
    "DatasetExistsError",
    "GpusparkError",
    "HostLostError",
    "LabelsError",
    "LaunchError",
    "LoaderError",
    "MonitorError",
    "NotADatasetError",
    "PlanError",
    "PrepError",
    "QuarantineError",
    "RecipeError",
    "SampleError",
    "SpecError",
    "TableError",
    "VerifyFailed",
    "WindowError",
    "did_you_mean",
]


class GpusparkError(Exception):
    """Base class of errors meant for the user: the message is the whole story.

    ``remedy`` is an optional one-line hint appended to the message.
    """

    def __init__(self, message: str, *, remedy: str | None = None) -> None:
        self.message = message
        self.remedy = remedy
        super().__init__(f"{message} ({remedy})" if remedy else message)


# --------------------------------------------------------------------------- cluster, launch


class SpecError(GpusparkError, ValueError):
    """A cluster spec file is malformed or inconsistent."""


class ClusterError(GpusparkError):
    """The embedded Spark cluster cannot be started, found or stopped."""


class LaunchError(GpusparkError):
    """A distributed launch was refused up front or failed on a rank."""


class HostLostError(LaunchError):
    """A task of a launch vanished with its executor: its host (``host``) was lost."""

    def __init__(self, host: str, message: str, *, remedy: str | None = None) -> None:
        self.host = host
        super().__init__(message, remedy=remedy)


# --------------------------------------------------------------------------- data format


class CorruptRecordError(GpusparkError):
    """A TFRecord record is damaged: bad length, bad CRC or a truncated file.

    Attributes: ``path`` (the shard, or ``None`` for an in-memory buffer), ``record``
    (0-based record number, or ``None`` if unknown) and ``offset`` (byte offset of the
    record's start in the shard).
    """

    def __init__(self, path: str | None, record: int | None, offset: int | None, what: str):
        self.path, self.record, self.offset, self.what = path, record, offset, what
        where = f"{path or '<buffer>'}: record {record if record is not None else '?'}"
        where += f" at byte {offset if offset is not None else '?'}"
        super().__init__(
            f"{where}: {what}",
            remedy="the shard is damaged; rewrite it, or check it with `gpuspark shards verify`",
        )


class NotADatasetError(GpusparkError):
    """A path is not a committed gpuspark dataset (no ``manifest.json``)."""


class DatasetExistsError(GpusparkError, FileExistsError):
    """The destination already holds files: a committed dataset (written again without
    ``overwrite=True``), other files, or a generated data set."""


class SampleError(GpusparkError, ValueError):
    """A sample dict holds a key or value that the format cannot store."""


class VerifyFailed(GpusparkError):
    """``shards verify`` found problems (they are listed above the error line); exit code 1."""


# --------------------------------------------------------------------------- data jobs


class QuarantineError(GpusparkError):
    """An input cannot become a row; ``reason`` says why, ``error_type`` names the cause."""

    def __init__(self, reason: str, error_type: str = "Rejected", *, path: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.error_type = error_type
        self.path = path

    @classmethod
    def wrap(cls, exc: BaseException, what: str, path: str | None = None) -> QuarantineError:
        """A quarantine error for an unexpected exception while doing ``what``."""
        if isinstance(exc, QuarantineError):
            return exc
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return cls(f"{what}: {text[:300]}", error_type=type(exc).__name__, path=path)


class LabelsError(GpusparkError, ValueError):
    """A labels CSV cannot be used."""


class WindowError(GpusparkError, ValueError):
    """A window specification cannot be parsed."""


class PrepError(GpusparkError):
    """A preprocessing job cannot start or finish (bad source, destination or options)."""


class TableError(GpusparkError, ValueError):
    """A DataFrame or table dataset cannot be written or read as a table (a column type the
    table format does not hold, a bad option)."""


# --------------------------------------------------------------------------- loading


class LoaderError(GpusparkError):
    """A dataset cannot be read as asked (bad split, world larger than the data, bad state)."""


class CacheError(GpusparkError):
    """The node-local cache directory cannot be used or a remote file cannot be fetched."""


# --------------------------------------------------------------------------- training


class DDPError(GpusparkError, ValueError):
    """A DDP option is invalid or not supported by the backend in use."""


class CheckpointError(GpusparkError):
    """A checkpoint cannot be written or read."""


class RecipeError(GpusparkError, ValueError):
    """A recipe name or option is invalid."""


class PlanError(GpusparkError, ValueError):
    """A performance plan cannot be made: unknown model or GPU, missing or bad inputs."""


class MonitorError(GpusparkError):
    """Monitoring could not start, stop or read: Prometheus missing, a port busy, no data."""


def did_you_mean(name: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``."""
    import difflib

    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
