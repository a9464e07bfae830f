"""The :class:`Source` protocol: what a raw input type implements to become training rows.

A source lists its input files, reads what a file says about the sample it belongs to (its
header, without the payload), names that sample (files with one key make one sample: a
DICOM series, a single image), and reads one sample's row fields from its files. Each step
raises :class:`~gpuspark.data.sources.QuarantineError` with a short reason for a bad input.
:class:`~gpuspark.data.sources.DicomSource` and :class:`~gpuspark.data.sources.ImageSource`
implement it over the readers of their modules.

The prep jobs drive a source through these methods in their Spark tasks
(:func:`gpuspark.data.prep.job.run_prep` takes one; :mod:`gpuspark.data.prep.grouped` is the
Spark body of any source): Spark pickles the source into each task, so a source is plain,
light data (a frozen dataclass of its root and options). A job lists the files below
``root`` in its tasks, the way :meth:`Source.list_inputs` does in one process.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["Source"]


@runtime_checkable
class Source(Protocol):
    """A raw input type: list, read a header, group into samples, read a sample."""

    @property
    def root(self) -> str:
        """Where the inputs are: a folder, or a URL fsspec can list."""
        ...

    def list_inputs(self) -> Iterator[tuple[str, int]]:
        """``(uri, size in bytes)`` of every input file, in a stable order."""
        ...

    def read_header(self, uri: str) -> Any:
        """What the file at ``uri`` says about its sample, without reading its payload."""
        ...

    def sample_key(self, uri: str, header: Any) -> str:
        """The sample the file belongs to: files with the same key make one sample."""
        ...

    def read_sample(self, uris: Sequence[str]) -> dict[str, Any]:
        """One sample's row fields, from its files (in sorted order)."""
        ...
