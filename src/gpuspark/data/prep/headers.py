"""The task of a DICOM headers job: each file's series and study, or why it cannot be read.

``predict dicom`` lists its input with it before scoring (:mod:`gpuspark.infer.dicom`). It
lives here, not beside that job, because Spark's Python workers import the module of the
function they run: this one imports neither torch nor the model code, so the many tasks of
the headers job start without them, and only the scoring tasks load torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gpuspark.data.prep.common import record_batches
from gpuspark.data.sources import DicomSource, QuarantineError, Unit, walk_unit

__all__ = ["HEADER_DDL", "HEADER_ERROR", "read_headers"]

HEADER_DDL = "path string, id string, study_uid string, reason string"
"""The rows of :func:`read_headers`."""
HEADER_ERROR = "unreadable DICOM"
"""The reason prefix ``prep dicom`` gives a file whose header cannot be read."""


def read_headers(
    source: DicomSource, parts: list[list[Unit]], batches: Iterable[Any]
) -> Iterator[Any]:
    """Every file of the units ``parts[i]`` of the indices ``i`` in ``batches``: ``id`` (its
    series) and ``study_uid``, or the ``reason`` it cannot be read (runs in the tasks)."""
    units = (u for b in batches for i in b.column("id").to_pylist() for u in parts[i])
    return record_batches(_header_rows(source, units), HEADER_DDL, 512)


def _header_rows(source: DicomSource, units: Iterable[Unit]) -> Iterator[dict[str, Any]]:
    for unit in units:
        for path, _size in walk_unit(unit):
            try:
                header = source.read_header(path)
                key, study = source.sample_key(path, header), str(header.study_uid)
                yield {"path": path, "id": key, "study_uid": study, "reason": None}
            except Exception as exc:  # never fail the job on one file
                reason = QuarantineError.wrap(exc, HEADER_ERROR, path).reason
                yield {"path": path, "id": None, "study_uid": None, "reason": reason}
