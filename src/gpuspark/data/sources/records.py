"""What every source reader shares: quarantine errors, patient-id hashing, stable splits,
label tables, reading an input by URI. ``SPLIT_NAMES`` and ``parse_split`` are those of
:mod:`gpuspark.data.checks`, where split fractions are checked.

The per-input work lives beside this module: :mod:`~gpuspark.data.sources.dicom` (DICOM series
to 3D volumes) and :mod:`~gpuspark.data.sources.images` (image folders). The functions are
plain Python so that a Spark task and a single-process loop call the same code.

Bad inputs are never dropped silently: every function that rejects an input raises
:class:`QuarantineError` with a short reason, and the caller writes a quarantine row.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass

from gpuspark import storage
from gpuspark.data.checks import SPLIT_NAMES, parse_split
from gpuspark.errors import LabelsError, QuarantineError

__all__ = [
    "SPLIT_NAMES",
    "LabelTable",
    "LabelsError",
    "QuarantineError",
    "assign_split",
    "hash_patient",
    "local_path",
    "parse_split",
    "read_bytes",
    "read_labels",
]


def local_path(uri: str) -> str:
    """The local file path of a ``file:`` URI or a plain path; other URIs are returned as is.

    The rule is :func:`gpuspark.storage.local_path`'s; this variant passes remote URLs through.
    """
    return uri if storage.is_url(uri) else storage.local_path(uri)


def read_bytes(uri: str) -> bytes:
    """All bytes of a local path, ``file:`` URI or any fsspec URL (``s3://``, ``hdfs://``)."""
    with storage.open_file(uri) as f:
        data: bytes = f.read()
        return data


def hash_patient(patient_id: str, salt: str = "") -> str:
    """A stable pseudonym for a patient id: 16 hex digits of SHA-256 over ``salt`` + id."""
    return hashlib.sha256(f"gpuspark:{salt}:{patient_id}".encode()).hexdigest()[:16]


def assign_split(key: str, fractions: Sequence[float]) -> str:
    """The split (``train``/``val``/``test``) of ``key``, from a stable hash of the key.

    The same key (a hashed patient id) always lands in the same split, so no patient is in
    two splits; over many keys the shares approach ``fractions``.
    """
    u = int(hashlib.sha256(f"split:{key}".encode()).hexdigest()[:13], 16) / 16**13
    acc = 0.0
    for name, frac in zip(SPLIT_NAMES, fractions, strict=False):
        acc += frac
        if u < acc:
            return name
    return SPLIT_NAMES[len(fractions) - 1]


@dataclass(frozen=True)
class LabelTable:
    """Labels from a CSV, keyed by series UID or patient id.

    ``names`` maps label index to label name (sorted names when labels are text; the
    integers themselves when they are integers).
    """

    key: str
    mapping: dict[str, int]
    names: dict[int, str]
    source: str

    def lookup(self, series_uid: str, patient_id: str) -> int | None:
        """The label of a series, or None when the CSV has none for it."""
        return self.mapping.get(series_uid if self.key == "series_uid" else patient_id)


_KEY_COLUMNS = {
    "series_uid": "series_uid",
    "seriesinstanceuid": "series_uid",
    "patient_id": "patient_id",
    "patientid": "patient_id",
}


def read_labels(path: str | os.PathLike[str], *, label_column: str = "label") -> LabelTable:
    """Read a labels CSV with a ``series_uid`` (or ``SeriesInstanceUID``) or ``patient_id``
    column and a ``label`` column (integers, or names mapped to 0..K-1 in sorted order)."""
    p = storage.as_path(path)  # a local path or a URL (s3://bucket/labels.csv)
    if storage.is_dir(p):
        raise LabelsError(
            f"labels file {p} is a directory, not a CSV file",
            remedy="pass the CSV file itself: --labels FILE.csv",
        )
    if not storage.is_file(p):
        raise LabelsError(f"labels file {p} does not exist", remedy="pass --labels FILE.csv")
    text = storage.read_bytes(p).decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    header = list(rows[0].keys()) if rows else []
    cols = {c.strip().lower(): c for c in header}
    key_col = next((cols[c] for c in _KEY_COLUMNS if c in cols), None)
    if key_col is None or label_column.lower() not in cols:
        raise LabelsError(
            f"labels file {p} has columns {header}; it needs 'series_uid' or 'patient_id' "
            f"and '{label_column}'",
            remedy="add a header line such as: series_uid,label",
        )
    lab_col = cols[label_column.lower()]
    raw = {r[key_col].strip(): r[lab_col].strip() for r in rows if r[key_col].strip()}
    try:
        mapping = {k: int(v) for k, v in raw.items()}
        names = {v: str(v) for v in sorted(set(mapping.values()))}
    except ValueError:
        order = sorted(set(raw.values()))
        names = dict(enumerate(order))
        index = {n: i for i, n in names.items()}
        mapping = {k: index[v] for k, v in raw.items()}
    return LabelTable(_KEY_COLUMNS[key_col.strip().lower()], mapping, names, str(p))
