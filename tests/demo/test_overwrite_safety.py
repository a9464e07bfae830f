"""``--overwrite`` never deletes what gpuspark did not write (issue: data loss, case 1).

Each ``gpuspark datasets`` command is run as a user types it, on real folders: a folder of
the user's (``thesis.txt``, ``c.toml``, a subfolder), the current directory, and the
command's own earlier output with a user's file added. Only the last case without the added
file may be replaced, and the replacement appears whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.demo.staging import MARKER

# (command, the options that keep it small); synth-risk needs Spark to write, so only its
# refusals run here (they come before any session: see the ``no_spark`` fixture)
_LOCAL = [
    ("synth-ct", ["--studies", "2", "--size", "16"]),
    ("synth-images", ["--classes", "2", "--per-class", "2"]),
    ("pydoc-text", ["--limit", "3"]),
]
_ALL = [*_LOCAL, ("synth-risk", ["--rows", "10"])]


class _SparkStarted(Exception):
    """Raised where a Spark session would start."""


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuspark.cluster.session as session

    def started(*_a: Any, **_k: Any) -> Any:
        raise _SparkStarted

    monkeypatch.setattr(session, "job_session", started)


def _users_folder(root: Path) -> dict[str, bytes]:
    """A folder a user cares about; returns its files and contents."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "thesis.txt").write_text("chapter 1\n")
    (root / "c.toml").write_text('[cluster]\nmaster = "local-cluster"\n')
    (root / "notes").mkdir()
    (root / "notes" / "todo.md").write_text("- write\n")
    return _snapshot(root)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def chdir(tmp_path: Path) -> Iterator[Any]:
    old = os.getcwd()

    def go(path: Path) -> None:
        os.chdir(path)

    yield go
    os.chdir(old)


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], *words: str) -> str:
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err
    return err


@pytest.mark.parametrize(("command", "opts"), _ALL, ids=[c for c, _ in _ALL])
def test_users_folder_is_never_deleted(
    command: str, opts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    before = _users_folder(work)
    args = ["datasets", command, str(work), *opts, "--overwrite"]
    _refused(capsys, args, "was not written by gpuspark", "thesis.txt", "nothing was changed")
    assert _snapshot(work) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no staging folder left


@pytest.mark.parametrize(("command", "opts"), _ALL, ids=[c for c, _ in _ALL])
def test_current_directory_is_never_deleted(
    command: str,
    opts: list[str],
    tmp_path: Path,
    chdir: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    work = tmp_path / "work"
    before = _users_folder(work)
    chdir(work)
    _refused(capsys, ["datasets", command, ".", *opts, "--overwrite"], "current directory")
    assert _snapshot(work) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


@pytest.mark.parametrize(("command", "opts"), _LOCAL, ids=[c for c, _ in _LOCAL])
def test_own_output_is_replaced_whole_but_not_with_a_users_file_in_it(
    command: str, opts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["datasets", command, str(out), *opts]) == 0
    marker = json.loads((out / MARKER).read_text())
    assert marker["command"] == f"datasets {command}"
    assert sorted(marker["files"]) == sorted(k for k in _snapshot(out) if k != MARKER)
    first = _snapshot(out)
    # its own output, untouched: replaced (same seed, same files), nothing left beside it
    assert main(["datasets", command, str(out), *opts, "--overwrite"]) == 0
    assert _snapshot(out) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # a file the user put into it makes it theirs too: refused, kept
    (out / "my-notes.txt").write_text("keep me")
    capsys.readouterr()
    _refused(capsys, ["datasets", command, str(out), *opts, "--overwrite"], "my-notes.txt")
    assert (out / "my-notes.txt").read_text() == "keep me"
    assert _snapshot(out) == {**first, "my-notes.txt": b"keep me"}


def test_own_output_as_the_current_directory_is_refused(
    tmp_path: Path, chdir: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["datasets", "pydoc-text", str(out), "--limit", "2"]) == 0
    before = _snapshot(out)
    chdir(out)
    capsys.readouterr()
    _refused(capsys, ["datasets", "pydoc-text", ".", "--overwrite"], "current directory")
    assert _snapshot(out) == before


def test_a_folder_without_the_marker_is_refused_even_when_it_looks_generated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output of an older version (no marker) or a hand-made look-alike is not replaced."""
    out = tmp_path / "topics"
    out.mkdir()
    (out / "assert.txt").write_text("an earlier copy")
    _refused(
        capsys,
        ["datasets", "pydoc-text", str(out), "--limit", "1", "--overwrite"],
        MARKER,
        "remove that folder yourself",
    )
    assert (out / "assert.txt").read_text() == "an earlier copy"


def test_files_that_appear_during_the_write_stop_the_replacement(tmp_path: Path) -> None:
    """The check runs again at commit time: a file written into the old folder meanwhile is
    not deleted, and the new output is discarded."""
    from gpuspark.demo import synth_images
    from gpuspark.demo.staging import commit_dir, staging_dir
    from gpuspark.errors import DatasetExistsError

    out = tmp_path / "imgs"
    synth_images(out, 1, 1)
    tmp = staging_dir(out, overwrite=True)
    (out / "late.txt").write_text("written meanwhile")
    with pytest.raises(DatasetExistsError, match=r"late\.txt"):
        commit_dir(tmp, out, "datasets synth-images")
    assert (out / "late.txt").read_text() == "written meanwhile"


@pytest.mark.parametrize("command", ["images", "dicom", "text", "parquet"])
def test_prep_overwrite_refuses_a_users_folder(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prep * --overwrite`` replaces only a dataset it wrote (its manifest), checked before
    any Spark session starts."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("some text\n")
    work = tmp_path / "work"
    before = _users_folder(work)
    args = ["prep", command, str(src), str(work), "--overwrite"]
    if command == "parquet":
        args += ["--label", "y"]
    _refused(capsys, args, "is not a gpuspark dataset")
    assert _snapshot(work) == before
