"""The gpuspark shard format: TFRecord files of ``tf.train.Example``, an index, a manifest.

A dataset is a directory::

    manifest.json                       committed last; without it the directory is no dataset
    part-00000-<wid>.tfrecord           TFRecord shard (TensorFlow framing, Example payloads)
    part-00000-<wid>.tfrecord.idx       DALI ``tfrecord2idx`` index: "offset length" per record
    train-00000-<wid>.tfrecord ...      shards of a named split (listed in ``manifest.splits``)

``<wid>`` is a per-write id, so an overwrite can land new shards next to the old ones and
switch datasets by replacing ``manifest.json`` atomically.

This package is the format's public face; each job has its own module:

==================  ===========================================================================
``tfrecord``        framing + masked CRC32C, reading records (:func:`iter_records`, ...)
``example``         the ``tf.train.Example`` codec (:func:`encode_example`, the value table)
``schema``          per-key kinds, dtypes and shapes, inferred and merged
``compression``     per-record payload compression (``None`` or ``"zstd"``)
``index``           the DALI ``tfrecord2idx`` index
``hashing``         shard content hashes
``manifest``        :class:`Manifest`, load and commit
``verify``          :func:`inspect_dataset`, :func:`verify_dataset`
``table``           the table format: row blocks by column, :func:`~.table.write_table`
                    (a sub-package, imported on use: ``gpuspark.data.format.table``)
==================  ===========================================================================

Import from ``gpuspark.data.format``; the module layout behind it may change.
"""

from __future__ import annotations

from gpuspark.data.format.compression import CODECS, compress, decompress, unknown_codec_error
from gpuspark.data.format.example import ARRAY_DTYPES, EncodedImage, decode_example, encode_example
from gpuspark.data.format.hashing import file_hash
from gpuspark.data.format.index import read_index, write_index
from gpuspark.data.format.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    dataset_root,
    load_manifest,
    write_manifest,
)
from gpuspark.data.format.schema import infer_schema, merge_schema, merge_spec, value_spec
from gpuspark.data.format.tfrecord import (
    FOOTER_BYTES,
    HEADER_BYTES,
    frame,
    iter_records,
    masked_crc32c,
    parse_framed,
    read_record,
)
from gpuspark.data.format.verify import Problem, inspect_dataset, verify_dataset
from gpuspark.errors import (
    CorruptRecordError,
    DatasetExistsError,
    NotADatasetError,
    SampleError,
)
from gpuspark.errors import GpusparkError as GpusparkError  # kept: ``fmt.GpusparkError`` worked

__all__ = [
    "ARRAY_DTYPES",
    "CODECS",
    "FOOTER_BYTES",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "MANIFEST_NAME",
    "CorruptRecordError",
    "DatasetExistsError",
    "EncodedImage",
    "Manifest",
    "NotADatasetError",
    "Problem",
    "SampleError",
    "ShardInfo",
    "compress",
    "dataset_root",
    "decode_example",
    "decompress",
    "encode_example",
    "file_hash",
    "frame",
    "infer_schema",
    "inspect_dataset",
    "iter_records",
    "load_manifest",
    "masked_crc32c",
    "merge_schema",
    "merge_spec",
    "parse_framed",
    "read_index",
    "read_record",
    "unknown_codec_error",
    "value_spec",
    "verify_dataset",
    "write_index",
    "write_manifest",
]
