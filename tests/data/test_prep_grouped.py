"""A new input type is a :class:`Source` and a thin entry: a toy source of notes (``<name>.txt``
with an optional ``<name>.tag``, one sample per name) goes through the prep job base
(:func:`run_prep`) and the grouped Spark body (:func:`run_grouped`) unchanged."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gpuspark.data.format import decode_example, iter_records, load_manifest
from gpuspark.data.prep import job as prep_job
from gpuspark.data.prep.common import WriteOptions
from gpuspark.data.prep.grouped import GroupedJob, run_grouped
from gpuspark.data.prep.job import PrepRun, Where, run_prep
from gpuspark.data.sources import QuarantineError, Source, walk_unit


def _notes_source(root: Path) -> Source:
    """The toy source. Defined in a function: Spark pickles the class by value into its tasks
    (a test module is not importable there)."""

    class NotesSource:
        def __init__(self, root: str) -> None:
            self.root = root

        def list_inputs(self) -> Iterator[tuple[str, int]]:
            return walk_unit((self.root, True, 0))

        def read_header(self, uri: str) -> Any:
            if not uri.endswith((".txt", ".tag")):
                raise QuarantineError("not a note", "Layout", path=uri)
            return uri.rsplit("/", 1)[1].rsplit(".", 1)[0]

        def sample_key(self, uri: str, header: Any) -> str:
            return str(header)

        def read_sample(self, uris: Sequence[str]) -> dict[str, Any]:
            parts = {u.rsplit(".", 1)[1]: Path(u).read_text() for u in uris}
            if "txt" not in parts:
                raise QuarantineError("a tag without its note", "Layout")
            if "unreadable" in parts["txt"]:
                raise ValueError("the note says it is unreadable")
            return {"id": Path(uris[0]).stem, "text": parts["txt"], "tag": parts.get("tag", "")}

    return NotesSource(str(root))


def _notes(root: Path) -> Path:
    root.mkdir(parents=True)
    for i in range(12):
        (root / f"n{i:02d}.txt").write_text(f"note {i}")
        if i % 3 == 0:
            (root / f"n{i:02d}.tag").write_text(f"tag {i}")
    (root / "bad.txt").write_text("unreadable")
    (root / "orphan.tag").write_text("tag without note")
    (root / "README.md").write_text("not a note")
    return root


def test_the_job_base_takes_a_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def session(*_a: Any, **_k: Any) -> Iterator[str]:
        yield "session"

    monkeypatch.setattr(prep_job, "job_session", session)
    src = tmp_path / "src"
    src.mkdir()
    source = _notes_source(src)
    seen: list[PrepRun] = []

    def body(run: PrepRun, spark: Any) -> Any:
        seen.append(run)
        return spark

    write = WriteOptions(None, None, None, False, None)
    assert run_prep("notes", source, tmp_path / "ds", write, body, Where()) == "session"
    run = seen[-1]
    assert run.require_source() is source and run.src == str(src)
    assert run.job == "prep notes"
    run_prep("notes", str(src), tmp_path / "ds", write, body, Where())
    assert seen[-1].source is None and seen[-1].src == str(src)
    with pytest.raises(TypeError, match="prep notes was started without a Source"):
        seen[-1].require_source()


@pytest.mark.spark
@pytest.mark.slow  # ~27 s; prep dicom runs the same body on Spark by default (test_prep.py)
def test_a_toy_source_runs_through_the_grouped_body(spark: Any, tmp_path: Path) -> None:
    src = _notes(tmp_path / "notes")
    source = _notes_source(src)
    inputs = sum(1 for _ in source.list_inputs())
    write = WriteOptions((0.5, 0.5), 2, None, False, None)
    body = partial(run_grouped, job=GroupedJob())
    res = run_prep("notes", source, tmp_path / "ds", write, body, Where(spark=spark))

    assert res.inputs == inputs == 12 + 4 + 3
    assert res.rows == 12 and res.files_in_rows == 16
    assert res.quarantined == 3 and res.quarantined_items == 3  # README, bad, orphan
    assert res.files_in_rows + res.quarantined == res.inputs
    assert set(res.splits) == {"train", "val"} and sum(res.splits.values()) == 12
    m = load_manifest(tmp_path / "ds")
    assert m.provenance["job"] == "prep notes"
    assert m.extra["prep"] == {"kind": "notes", "source": str(src), "split": [0.5, 0.5]}
    assert m.extra["quarantine"]["samples"] == 2 and m.extra["quarantine"]["files"] == 3
    assert all(len(paths) % 2 == 0 for paths in m.splits.values())  # balanced for 2 ranks
    records = {}
    for split, paths in m.splits.items():
        for p in paths:
            for rec in iter_records(tmp_path / "ds" / p):
                sample = decode_example(rec, m.schema)
                records[sample["id"]] = (split, sample["text"], sample["tag"])
    assert records["n03"][1:] == ("note 3", "tag 3") and records["n04"][1:] == ("note 4", "")
    assert len(records) == 12

    import pyarrow.parquet as pq

    assert res.quarantine_path
    q = {Path(r["path"]).name: r for r in pq.read_table(res.quarantine_path).to_pylist()}
    assert q["README.md"]["stage"] == "header" and q["README.md"]["reason"] == "not a note"
    assert q["bad.txt"]["stage"] == "sample" and q["bad.txt"]["series_uid"] == "bad"
    assert q["bad.txt"]["reason"].startswith("sample failed: the note says it is unreadable")
    assert q["orphan.tag"]["reason"] == "a tag without its note"
