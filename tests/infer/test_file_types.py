"""The column types of a Parquet input's files, checked before any Spark job (issue:
hardening, case 9): ``gpuspark predict`` on a folder whose files disagree on a column's type
printed ~500 lines of Java and Python (``PARQUET_COLUMN_DATA_TYPE_MISMATCH``); now one line,
or, where Spark can read the files as one wider type, a run. Spark is not started here but
in the one test marked ``slow``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpuspark.errors import RecipeError
from gpuspark.infer.file_types import check_file_types, file_types, mismatch_error

# The ~500 lines of the report, as Spark 4 words its cause (the Java exception's first line).
SPARK_MISMATCH = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o218.parquet.\n"
    ": org.apache.spark.SparkException: [FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] "
    "Encountered error while reading file file:///data/new/part-1.parquet. Data type "
    "mismatches when reading Parquet column [income]. Expected Spark type double, actual "
    "Parquet type BINARY. SQLSTATE: KD001\n\tat org.apache.spark.sql.errors.Query..."
)


def _table(**columns: Any) -> Any:
    import pyarrow as pa

    return pa.table({name: pa.array(values, kind) for name, (values, kind) in columns.items()})


def _folder(root: Path, *tables: Any) -> Path:
    import pyarrow.parquet as pq

    root.mkdir()
    for i, table in enumerate(tables):
        pq.write_table(table, root / f"part-{i}.parquet")
    return root


def _row(income: tuple[list[Any], Any], age: tuple[list[Any], Any] | None = None) -> Any:
    """One row of the model of ``_best_pt``: income, age (numeric), region (categorical)."""
    import pyarrow as pa

    return _table(
        customer_id=(["c1"], pa.string()),
        income=income,
        age=age or ([41.0], pa.float64()),
        region=(["north"], pa.string()),
    )


def _types(*kinds: Any) -> Any:
    import pyarrow as pa

    return file_types((f"part-{i}.parquet", pa.schema([("x", k)])) for i, k in enumerate(kinds))


def test_types_spark_reads_as_one_are_read_as_the_wider_one() -> None:
    import pyarrow as pa

    assert _types(pa.int32(), pa.int64()).read_as == {"x": "bigint"}
    assert _types(pa.int16(), pa.int32()).read_as == {"x": "int"}
    assert _types(pa.float32(), pa.float64()).read_as == {"x": "double"}
    assert _types(pa.int32(), pa.float32(), pa.float64()).read_as == {"x": "double"}
    assert _types(pa.null(), pa.float64()).read_as == {"x": "double"}  # all nulls in a file
    assert _types(pa.string(), pa.large_string()).read_as == {"x": "string"}
    assert _types(pa.float64(), pa.float64()).read_as == {}
    found = _types(pa.int64(), pa.float32())
    assert found.arrow_type("x") is None and found.read_as == {}
    # Spark 4 reads no INT64 as double, nor text as a number: refused, not guessed
    assert found.conflicts == {"x": {"int64": ["part-0.parquet"], "float": ["part-1.parquet"]}}
    assert _types(pa.bool_(), pa.int32()).conflicts and _types(pa.string(), pa.int64()).conflicts
    # types outside numbers, text and booleans: left to Spark (then mismatch_error)
    ms, us = pa.timestamp("ms"), pa.timestamp("us")
    assert _types(ms, us).conflicts == {} and _types(ms, us).read_as == {}


def test_a_conflict_names_the_column_each_type_its_files_and_the_models_reading() -> None:
    import pyarrow as pa

    found = _types(pa.float64(), pa.string(), pa.float64(), pa.float64())
    with pytest.raises(RecipeError) as err:
        check_file_types(found, ["y", "x"], "/data/new", numeric=("x",))
    assert str(err.value) == (
        "input /data/new: its files disagree on the type of column 'x': double in 3 of 4 files "
        "(part-0.parquet, part-2.parquet, ...); string in 1 of 4 files (part-1.parquet); the "
        "model reads it as a number (rewrite the files with x cast to double)"
    )
    with pytest.raises(RecipeError, match="with one type for x, or keep only an id column"):
        check_file_types(found, ["x"], "/data/new")  # a column copied to the output
    check_file_types(found, ["y"], "/data/new")  # a column the job does not read


def test_sparks_own_mismatch_is_one_line() -> None:
    """An input checked by no footer (a URL, a DataFrame) fails in the job: one line too."""
    err = mismatch_error(RuntimeError(SPARK_MISMATCH), "s3://bucket/new")
    assert err is not None and "\n" not in str(err)
    assert str(err).startswith(
        "input s3://bucket/new: its files disagree on the type of column 'income': "
        "/data/new/part-1.parquet holds binary where another file has double"
    )
    assert mismatch_error(RuntimeError("Connection refused"), "s3://bucket/new") is None


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "mixed",
            "input {src}: its files disagree on the type of column 'income': double in 1 of 2 "
            "files (part-0.parquet); string in 1 of 2 files (part-1.parquet); the model reads "
            "it as a number (rewrite the files with income cast to double)",
        ),
        ("int64-and-double", "column 'income': double in 1 of 2 files (part-1.parquet); int64"),
        ("lacking", "lacks 1 feature column(s) of model {model}: age"),
    ],
    ids=["mixed", "int64-and-double", "lacking"],
)
def test_predict_refuses_a_table_the_model_cannot_read_in_one_line_before_spark(
    case: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``gpuspark predict new --model best.pt -o out`` as the user typed it; starting Spark
    raises :class:`Started`, which no command catches."""
    import pyarrow as pa
    from test_predict_parts import _best_pt  # tests/infer/

    from _no_work import refuse_work  # tests/_no_work.py
    from gpuspark.cli.main import main

    best = _best_pt(tmp_path)
    double, text, int64 = pa.float64(), pa.string(), pa.int64()
    tables = {
        "mixed": [_row(([52.0], double)), _row((["61.5"], text))],
        "int64-and-double": [_row(([52], int64)), _row(([61.5], double))],
        "lacking": [_row(([52.0], double)).drop_columns(["age"])],
    }[case]
    src = _folder(tmp_path / "new", *tables)
    refuse_work(monkeypatch, tmp_path, tmp_path)
    assert main(["predict", "new", "--model", str(best), "-o", "out"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: input "), err
    assert expected.format(src=src, model=best) in err[0], err[0]
    assert not (tmp_path / "out").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith((".out.", ".predictions."))]


@pytest.mark.parametrize(
    "columns",
    [
        {"income": ["61.5", "n/a"]},  # text in a numeric feature: parsed per row
        {"age": [41, 52]},  # an integer column where doubles were trained: cast
    ],
    ids=["text-number", "int-for-double"],
)
def test_a_column_the_model_can_read_is_not_refused(
    columns: dict[str, list[Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every file of one such type: the checks pass and the job would start (Spark starting
    is where this test stops)."""
    import pyarrow as pa
    from test_predict_parts import _best_pt

    from _no_work import Started, refuse_work
    from gpuspark.cli.main import main

    best = _best_pt(tmp_path)
    table = pa.table(
        {"customer_id": ["c1", "c2"], "income": [52.0, 60.0], "age": [41.0, 52.0]}
        | columns
        | {"region": ["north", "west"]}
    )
    _folder(tmp_path / "new", table)
    refuse_work(monkeypatch, tmp_path, tmp_path)
    with pytest.raises(Started):
        main(["predict", "new", "--model", str(best), "-o", "out"])


@pytest.mark.spark
@pytest.mark.slow
def test_files_of_narrower_types_are_scored_and_sparks_own_mismatch_is_one_line(
    spark: Any, tmp_path: Path
) -> None:
    """Through Spark: float and double, int32 and int64, a column of nulls and doubles are
    read as the wider type and every row is scored; a DataFrame of the mixed folder (no footer
    checked first) fails in one line."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from test_predict_parts import _best_pt

    from gpuspark.infer import predict

    best = _best_pt(tmp_path)
    narrow = _row(([52.5], pa.float32()), ([41], pa.int32())).append_column("score", pa.nulls(1))
    wide = _row(([61.0], pa.float64()), ([52], pa.int64())).append_column("score", pa.array([0.5]))
    src = _folder(tmp_path / "new", narrow, wide)
    res = predict(src, best, tmp_path / "out", spark=spark)
    assert (res.rows, res.quarantined) == (2, 0)
    out = ds.dataset(str(tmp_path / "out"), format="parquet").to_table()
    assert sorted(out.column("score").to_pylist(), key=str) == [0.5, None]
    mixed = _folder(tmp_path / "mixed", _row(([52.0], pa.float64())), _row((["6"], pa.string())))
    frame = spark.read.parquet(str(mixed))
    with pytest.raises(RecipeError, match=r"disagree on the type of column 'income': .*part-"):
        predict(frame, best, tmp_path / "out2", spark=spark)
    assert not (tmp_path / "out2").exists()
