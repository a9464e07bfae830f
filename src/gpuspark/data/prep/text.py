"""The text job: ``.txt`` files or a Parquet text column to fixed-length token sequences for
masked-language-model training (the ``bert`` recipe).

Spark does every pass over the corpus. (1) Documents: a ``.txt`` file (decoded as strict
UTF-8 in the tasks; an undecodable or blank file goes to the quarantine table) or one row of
the Parquet column (a null or blank text is quarantined). (2) A sample of lines (at most
``sample_lines``, spread evenly over the documents) is collected on the driver, where a
WordPiece tokenizer is trained with ``tokenizers`` (or a given one is loaded). (3) The tasks
tokenise the documents with the tokenizer's JSON broadcast to them and pack them (see
:mod:`.text_tokens`: ``[CLS] piece [SEP]``, the last piece of a document padded). Splits are
by a stable hash of the document id (the file's path relative to the source; for Parquet the
``id`` column, else a hash of the text), so no document is in two splits.

Each record: ``input_ids`` (int32 ``[seq_len]``), ``length`` (tokens before the padding,
``[CLS]``/``[SEP]`` included), ``doc`` (document id), ``piece`` (its index in the document).
``tokenizer.json`` is committed with the shards, before the manifest
(``manifest.extra["files"]["tokenizer.json"]``); ``manifest.extra["text"]`` has the vocabulary
size, ``seq_len``, the special token ids, the tokenizer's file key, and token counts.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark._util.extras import check_extras, require
from gpuspark._util.spark_compat import sql_functions
from gpuspark.data import format as fmt
from gpuspark.data.prep.common import (
    PrepResult,
    WriteOptions,
    by_reason,
    check_split,
    check_world,
    quarantine_table,
    record_batches,
    shared,
)
from gpuspark.data.prep.job import PrepRun, Where, run_prep
from gpuspark.data.prep.progress import Progress
from gpuspark.data.prep.text_tokens import (
    TOKENIZER_FILE,
    check_tokenizer,
    load_tokenizer_dir,
    pack,
    sample_lines,
    special_ids,
    train_wordpiece,
)
from gpuspark.data.sources import assign_split, local_path, read_bytes
from gpuspark.data.write import write_dataframe
from gpuspark.errors import PrepError, QuarantineError

__all__ = ["load_dataset_tokenizer", "prep_text"]

_DOC_DDL = "doc string, path string, text string, reason string, error_type string"
_SEQ_DDL = "doc string, piece int, split string, input_ids binary, length int"
MIN_SEQ_LEN = 8


@dataclass(frozen=True)
class _Options:
    column: str | None
    id: str | None
    vocab_size: int
    seq_len: int
    sample_lines: int
    tokenizer: str | None
    """The given tokenizer's JSON text (``None``: train one)."""


def prep_text(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    column: str | None = None,
    id: str | None = None,
    vocab_size: int = 8000,
    seq_len: int = 128,
    tokenizer: str | os.PathLike[str] | None = None,
    sample_lines: int = 100_000,
    split: Sequence[float] | None = (0.95, 0.05),
    world_size: int | None = None,
    num_shards: int | None = None,
    overwrite: bool = False,
    compression: str | None = None,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    progress: Progress | None = None,
    team: str | None = None,
) -> PrepResult:
    """Text to a token-sequence dataset (see the module docstring).

    ``src``: a folder of ``.txt`` files (searched recursively; other files are ignored) or
    one ``.txt`` file; with ``column``, a Parquet file or folder and its text column (``id``:
    the document id column, default a hash of the text). ``tokenizer``: a folder holding
    ``tokenizer.json`` (or the file) to use instead of training one of ``vocab_size`` on up
    to ``sample_lines`` lines. ``split``: train/val[/test] fractions by a hash of the document
    id, ``None`` for no splits. Checks that need no Spark come first.
    """
    t0 = time.monotonic()
    check_extras("prep text", ("tokenizers", "text"))
    opts = _check_options(column, id, vocab_size, seq_len, sample_lines, tokenizer)
    src_s = _check_text_source(src, column)
    check_world(world_size, num_shards)
    write = WriteOptions(check_split(split), world_size, num_shards, overwrite, compression)

    where = Where(spark, master, spec, team, progress, t0)
    return run_prep("text", src_s, dst, write, partial(_run, opts=opts), where)


def load_dataset_tokenizer(dataset: str | os.PathLike[str]) -> Any:
    """The ``tokenizers.Tokenizer`` committed with a ``prep text`` dataset."""
    Tokenizer = require("tokenizers", "text", "reading a dataset's tokenizer").Tokenizer

    root = fmt.dataset_root(os.fspath(dataset))
    name = (fmt.load_manifest(root).extra.get("files") or {}).get(TOKENIZER_FILE)
    if not name:
        raise PrepError(
            f"{root} has no tokenizer (not a `gpuspark prep text` dataset)",
            remedy="prepare it with `gpuspark prep text SRC DST`",
        )
    with storage.open_file(storage.join(root, name), "rb") as f:
        return Tokenizer.from_str(f.read().decode("utf-8"))


# -- driver checks ---------------------------------------------------------------------------


def _check_options(
    column: str | None,
    id: str | None,
    vocab_size: int,
    seq_len: int,
    sample_lines: int,
    tokenizer: str | os.PathLike[str] | None,
) -> _Options:
    if seq_len < MIN_SEQ_LEN:
        raise PrepError(f"seq_len must be at least {MIN_SEQ_LEN}, got {seq_len}")
    if sample_lines < 1:
        raise PrepError(f"sample_lines must be at least 1, got {sample_lines}")
    if id is not None and column is None:
        raise PrepError("id applies to a Parquet source", remedy="pass --column with --id")
    text = None
    if tokenizer is not None:
        text = load_tokenizer_dir(tokenizer)
    elif vocab_size < 100:
        raise PrepError(f"vocab_size must be at least 100, got {vocab_size}")
    return _Options(column, id, vocab_size, seq_len, sample_lines, text)


def _check_text_source(src: str | os.PathLike[str], column: str | None) -> str:
    """The source as an absolute path (a URL as given). Without ``column`` it must be a
    ``.txt`` file or a folder holding one; a Parquet source without ``column`` is refused."""
    text = os.fspath(src)
    if storage.is_url(text):
        return text
    p = Path(storage.local_path(text)).expanduser()
    if not p.exists():
        raise PrepError(f"source {text} does not exist", remedy="pass a folder of .txt files")
    if not os.access(p, os.R_OK):
        raise PrepError(f"source {text} is not readable", remedy="check its permissions")
    if column is None and not _has_txt(p):
        parquet = p.suffix == ".parquet" or (p.is_dir() and next(p.rglob("*.parquet"), None))
        raise PrepError(
            f"source {text} holds no .txt file",
            remedy="pass --column COL to read a Parquet text column"
            if parquet
            else "pass a folder of .txt files (or one .txt file)",
        )
    return str(p.resolve())


def _has_txt(p: Path) -> bool:
    if p.is_file():
        return p.suffix == ".txt"
    return next(p.rglob("*.txt"), None) is not None


# -- documents -------------------------------------------------------------------------------


def _txt_documents(spark: Any, src: str) -> Any:
    """One row per ``.txt`` file: ``doc`` (path relative to ``src``), ``text`` or the
    quarantine ``reason`` (read and decoded in the tasks)."""
    local = Path(storage.local_path(src)) if not storage.is_url(src) else None
    base = str(local.parent) if local is not None and local.is_file() else src
    reader = spark.read.format("binaryFile").option("pathGlobFilter", "*.txt")
    files = reader.option("recursiveFileLookup", "true").load(src).select("path")
    return files.mapInArrow(_read_txt_fn(base), _DOC_DDL)


def _read_txt_fn(base: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def read(batches: Iterator[Any]) -> Iterator[Any]:
        rows = (_one_txt(path, base) for b in batches for path in b.column("path").to_pylist())
        return record_batches(rows, _DOC_DDL, 64)

    return read


def _one_txt(path: str, base: str) -> dict[str, Any]:

    rel = os.path.relpath(local_path(path), local_path(base)) if "://" not in base else path
    rec: dict[str, Any] = {"doc": rel, "path": path}
    try:
        text = read_bytes(path).decode("utf-8")
        if not text.strip():
            raise QuarantineError("empty file: no text", "EmptyFile", path=path)
        rec["text"] = text
    except Exception as exc:
        what = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "unreadable text file"
        qe = QuarantineError.wrap(exc, what, path)
        rec.update(reason=qe.reason, error_type=qe.error_type)
    return rec


def _parquet_documents(spark: Any, src: str, column: str, id_col: str | None) -> Any:
    """One row per Parquet row: ``doc`` (the ``id`` column, else a hash of the text)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql.types import StringType

    F = sql_functions(spark)

    try:
        df = spark.read.parquet(src)
        df.schema  # noqa: B018  (Spark Connect analyses lazily: its error comes here)
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0][:300]
        raise PrepError(f"source {src} cannot be read as Parquet: {first}") from exc
    for name in (column, id_col):
        if name is not None and name not in df.columns:
            raise PrepError(
                f"{src} has no column {name!r} (its columns: {', '.join(df.columns)})",
                remedy="pass one of its columns",
            )
    if not isinstance(df.schema[column].dataType, StringType):
        raise PrepError(
            f"column {column!r} of {src} is {df.schema[column].dataType.simpleString()}, "
            "not string",
            remedy="pass a text (string) column",
        )
    text = F.col(column)
    blank = text.isNull() | (F.length(F.trim(text)) == 0)
    doc = F.col(id_col).cast("string") if id_col else F.substring(F.sha2(text, 256), 1, 16)
    return df.select(
        F.coalesce(doc, F.lit("<null id>")).alias("doc"),
        F.lit(src).alias("path"),
        text.alias("text"),
        F.when(blank, F.lit("empty text: null or blank")).alias("reason"),
        F.when(blank, F.lit("EmptyText")).alias("error_type"),
    )


# -- tokenizer -------------------------------------------------------------------------------


def _sampled_lines(docs: Any, n_docs: int, wanted: int) -> list[str]:
    """At most about ``wanted`` lines, evenly spread over a sample of the documents."""
    fraction = min(1.0, wanted / max(1, n_docs))
    per_doc = max(1, math.ceil(wanted / max(1, min(n_docs, wanted))))

    def lines(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for b in batches:
            out = [ln for t in b.column("text").to_pylist() for ln in sample_lines(t, per_doc)]
            yield pa.RecordBatch.from_pydict(
                {"line": out}, schema=pa.schema([("line", pa.string())])
            )

    sample = docs if fraction >= 1.0 else docs.sample(False, fraction, seed=0)
    rows = sample.select("text").mapInArrow(lines, "line string").collect()
    return [r["line"] for r in rows][:wanted]


# -- sequences -------------------------------------------------------------------------------


def _tokenize_fn(
    tok_json: Any, seq_len: int, fractions: Any, rows_acc: Any
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def tokenize(batches: Iterator[Any]) -> Iterator[Any]:
        Tokenizer = require("tokenizers", "text", "prep text").Tokenizer
        tok = Tokenizer.from_str(tok_json.value)
        ids = special_ids(tok)
        for b in batches:
            docs, texts = b.column("doc").to_pylist(), b.column("text").to_pylist()
            encoded = tok.encode_batch(texts, add_special_tokens=False)
            rows = list(_sequences(docs, encoded, seq_len, ids, fractions))
            rows_acc.add(len(rows))
            yield from record_batches(rows, _SEQ_DDL, 256)

    return tokenize


def _sequences(
    docs: list[str], encoded: list[Any], seq_len: int, ids: dict[str, int], fractions: Any
) -> Iterator[dict[str, Any]]:

    for doc, enc in zip(docs, encoded, strict=True):
        split = assign_split(doc, fractions) if fractions else None
        pieces = pack(enc.ids, seq_len, ids["cls"], ids["sep"], ids["pad"])
        for i, (row, length) in enumerate(pieces):
            yield {
                "doc": doc,
                "piece": i,
                "split": split,
                "input_ids": row.tobytes(),
                "length": length,
            }


def _seq_sample(row: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    return {
        "input_ids": np.frombuffer(row["input_ids"], dtype=np.int32),
        "length": int(row["length"]),
        "doc": row["doc"],
        "piece": int(row["piece"]),
    }


# -- the job ---------------------------------------------------------------------------------


def _quarantined(docs: Any) -> list[dict[str, Any]]:
    F = sql_functions(docs)

    rows = docs.filter(F.col("reason").isNotNull()).select("path", "doc", "reason", "error_type")
    return [
        {
            "path": r["path"],
            "series_uid": r["doc"],
            "reason": r["reason"],
            "error_type": r["error_type"],
            "stage": "text",
        }
        for r in rows.collect()
    ]


def _text_extra(
    src: str,
    opts: _Options,
    ids: dict[str, int],
    vocab: int,
    counts: dict[str, int],
    fractions: Any,
    q_rows: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "prep": {
            "kind": "text",
            "source": src,
            "column": opts.column,
            "split": list(fractions) if fractions else None,
            "split_by": "hash of the document id"
            + (f" (column {opts.id})" if opts.id else " (relative path or text hash)"),
        },
        "text": {
            "vocab_size": vocab,
            "seq_len": opts.seq_len,
            "special_ids": ids,
            "tokenizer_file": TOKENIZER_FILE,
            "tokenizer": "given" if opts.tokenizer else "trained",
            "tokenizer_sample_lines": counts.get("sample_lines", 0),
            "packing": "per document: [CLS] piece [SEP], last piece padded with [PAD]",
            "documents": counts["documents"],
            "sequences": counts["sequences"],
            "tokens": counts["tokens"],
        },
        "quarantine": {
            "inputs": counts["documents"] + len(q_rows),
            "rows": counts["sequences"],
            "files": len(q_rows),
            "quarantined": len(q_rows),
            "by_reason": by_reason(q_rows),
        },
    }


def _tokenizer(docs: Any, n_docs: int, opts: _Options, counts: dict[str, int]) -> str:
    if opts.tokenizer is not None:
        return opts.tokenizer
    lines = _sampled_lines(docs, n_docs, opts.sample_lines)
    counts["sample_lines"] = len(lines)
    return train_wordpiece(lines, opts.vocab_size)


def _run(run: PrepRun, spark: Any, opts: _Options) -> PrepResult:
    from pyspark import StorageLevel

    F = sql_functions(spark)
    src, write = run.src, run.write
    with run.watching(spark, phase="documents") as watch:
        raw = (
            _txt_documents(spark, src)
            if opts.column is None
            else _parquet_documents(spark, src, opts.column, opts.id)
        )
        docs_all = raw.persist(StorageLevel.DISK_ONLY)
        seqs = None
        try:
            q_rows = _quarantined(docs_all)
            run.counters["quarantined"].add(len(q_rows))
            docs = docs_all.filter(F.col("reason").isNull()).select("doc", "text")
            n_docs = docs.count()
            run.check_outcome(n_docs + len(q_rows), n_docs, q_rows)
            watch.phase = "tokenizer"
            counts: dict[str, int] = {"documents": n_docs}
            tok_json = _tokenizer(docs, n_docs, opts, counts)
            ids = check_tokenizer(tok_json)
            vocab = _vocab_size(tok_json)
            watch.phase = "tokenize"
            fn = _tokenize_fn(
                shared(spark, tok_json), opts.seq_len, write.fractions, run.counters["rows"]
            )
            seqs = docs.mapInArrow(fn, _SEQ_DDL).persist(StorageLevel.DISK_ONLY)
            agg = seqs.agg(F.count("*").alias("n"), F.sum(F.col("length") - 2).alias("t")).first()
            counts.update(sequences=int(agg["n"]), tokens=int(agg["t"] or 0))
            run.counted(rows=counts["sequences"])
            watch.phase = "write"
            manifest = write_dataframe(
                seqs if write.fractions else seqs.drop("split"),
                run.root,
                **run.write_args(),
                extra=_text_extra(src, opts, ids, vocab, counts, write.fractions, q_rows),
                sample_fn=_seq_sample,
                files={TOKENIZER_FILE: tok_json.encode("utf-8"), **quarantine_table(q_rows)},
            )
        finally:
            if seqs is not None:
                seqs.unpersist()
            docs_all.unpersist()
    return run.result(manifest, inputs=n_docs + len(q_rows), files_in_rows=n_docs, q_rows=q_rows)


def _vocab_size(tok_json: str) -> int:
    Tokenizer = require("tokenizers", "text", "prep text").Tokenizer
    return int(Tokenizer.from_str(tok_json).get_vocab_size())
