"""Spark preprocessing jobs: DICOM series, image folders, Parquet tables and text to gpuspark
shards.

:func:`prep_dicom` turns DICOM files (any names, nested folders, mixed series) into one
volume per series; :func:`prep_images` turns an image folder ``src/<label>/<file>`` into
image samples; :func:`prep_parquet` turns a Parquet table into a tabular table dataset
(``id``, ``label``, numeric ``x``, categorical codes ``c``, statistics in the manifest);
:func:`prep_text` turns ``.txt`` files or a Parquet text column into fixed-length token
sequences with a WordPiece tokenizer committed beside them.
The library takes typed values (tuples, floats, presets); the text forms (``"z,y,x"``,
``"0.8,0.1,0.1"``, ``"L,W"``) are the CLI's to parse. The jobs use only Spark's DataFrame
API, so they run on a classic session and over Spark Connect (a ``sc://`` master, a Connect
session as ``spark=``, or the embedded cluster's Connect server) alike.

Everything that can be checked on the driver (source, destination, world size, labels file,
options) is checked before a cluster or a Spark stage starts. Every input ends up either in
a row or in the quarantine table (path, series if known, reason, exception type, stage),
committed with the shards before the manifest as ``quarantine-<write id>.parquet``
(``manifest.extra["files"]["quarantine.parquet"]``, :attr:`PrepResult.quarantine_path`); the
counts are in ``extra["quarantine"]`` and in :class:`PrepResult`:
``inputs == files_in_rows + quarantined``. A job that makes no record fails with
:class:`PrepError` and leaves the destination as it was.

The modules behind this face: ``job`` (the job base: it takes a
:class:`~gpuspark.data.sources.Source` or a path, and owns destination, session, counters,
progress, outcome and result), ``common`` (driver checks, write options, quarantine table,
result), ``progress`` (the progress watcher), ``shards`` (shard planning), ``grouped`` (the
Spark body of any source whose samples are groups of files), ``dicom`` and ``images`` (the
jobs over :class:`~gpuspark.data.sources.DicomSource` and
:class:`~gpuspark.data.sources.ImageSource`), ``parquet``, ``text`` (the jobs over Spark's
readers; ``parquet_stats`` is the Parquet job's DataFrame side, ``text_tokens`` the text
job's tokenizer and packing). Window, shape and split options are checked in
:mod:`gpuspark.data.checks`.
Import from ``gpuspark.data.prep``; the layout behind it may change.
"""

from __future__ import annotations

from gpuspark.data.prep.common import QUARANTINE_FILE, PrepResult
from gpuspark.data.prep.dicom import prep_dicom
from gpuspark.data.prep.images import prep_images
from gpuspark.data.prep.parquet import prep_parquet
from gpuspark.data.prep.progress import Progress
from gpuspark.data.prep.shards import deal_shards
from gpuspark.data.prep.text import load_dataset_tokenizer, prep_text
from gpuspark.errors import PrepError

__all__ = [
    "QUARANTINE_FILE",
    "PrepError",
    "PrepResult",
    "Progress",
    "deal_shards",
    "load_dataset_tokenizer",
    "prep_dicom",
    "prep_images",
    "prep_parquet",
    "prep_text",
]
