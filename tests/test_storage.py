"""The local-path-vs-URL rule and file access (gpuspark.storage)."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuspark import storage
from gpuspark.errors import GpusparkError


@pytest.fixture
def mem() -> Iterator[str]:
    """A fresh directory URL on fsspec's in-memory file system, removed afterwards."""
    import fsspec

    url = f"memory:///gpuspark-test-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    fs.mkdir(url)
    yield url
    fs.rm(url, recursive=True)


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("s3://bucket/key", True),
        ("memory://x", True),
        ("hdfs://nn:8020/data", True),
        ("simplecache::s3://bucket/key", True),
        ("/data/x", False),
        ("relative/x", False),
        ("file:///data/x", False),
        ("file:/data/x", False),
        ("C://data", False),
        ("C:\\data", False),
        ("dir/with://inside", False),
    ],
)
def test_is_url(path: str, url: bool) -> None:
    assert storage.is_url(path) is url


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("/data/x", "/data/x"),
        ("rel/x", "rel/x"),
        ("file:///data/x", "/data/x"),
        ("file://localhost/data/x", "/data/x"),
        ("file:/data/x", "/data/x"),  # as Spark writes it
        ("file:///data/a%20b", "/data/a b"),
    ],
)
def test_local_path(uri: str, local: str) -> None:
    assert storage.local_path(uri) == local


def test_local_path_of_a_remote_url_is_an_error() -> None:
    with pytest.raises(GpusparkError, match="remote URL"):
        storage.local_path("s3://bucket/key")


def test_join() -> None:
    assert storage.join("s3://b/ds/", "a", "b.idx") == "s3://b/ds/a/b.idx"
    assert storage.join("/data/ds", "m.json") == os.path.join("/data/ds", "m.json")
    assert storage.join(Path("/data"), "ds") == os.path.join("/data", "ds")
    assert storage.join("file:///data/ds", "m.json") == os.path.join("/data/ds", "m.json")


def test_local_files(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    for path in (str(target), f"file://{target}", target):
        storage.atomic_write_bytes(path, b"abc")
        assert storage.exists(path)
        assert storage.file_size(path) == 3
        with storage.open_file(path) as f:
            assert f.read() == b"abc"
    storage.atomic_write_text(tmp_path / "b.txt", "héllo")
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "héllo"
    assert storage.list_dir(tmp_path) == [str(target), str(tmp_path / "b.txt")]
    assert storage.list_dir(f"file://{tmp_path}") == storage.list_dir(tmp_path)
    assert not storage.exists(tmp_path / "missing")


def test_memory_urls(mem: str) -> None:
    path = storage.join(mem, "x.bin")
    assert not storage.exists(path)
    storage.atomic_write_bytes(path, b"12345")
    storage.atomic_write_text(storage.join(mem, "y.txt"), "text")
    assert storage.exists(path)
    assert storage.file_size(path) == 5
    with storage.open_file(path) as f:
        assert f.read() == b"12345"
    with storage.open_file(storage.join(mem, "y.txt"), "r") as f:
        assert f.read() == "text"
    assert storage.list_dir(mem) == [f"{mem}/x.bin", f"{mem}/y.txt"]


def test_atomic_write_replaces_and_follows_umask(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "manifest.json"
    path.write_text("old")
    os.chmod(path, 0o600)
    storage.atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_atomic_write_with_a_strict_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        storage.atomic_write_bytes(tmp_path / "x", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "x").stat().st_mode) == 0o600


def test_atomic_write_error_leaves_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.idx"
    path.write_bytes(b"old")

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        storage.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.idx"]


def test_atomic_write_into_a_missing_directory_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        storage.atomic_write_bytes(tmp_path / "no" / "x", b"x")
    assert os.listdir(tmp_path) == []


def test_display_name(tmp_path: Path) -> None:
    import io

    with open(tmp_path / "f", "wb") as f:
        assert storage.display_name(f) == str(tmp_path / "f")
    assert storage.display_name(io.BytesIO(b"")) is None


def test_directory_problem_names_what_blocks_the_path(tmp_path) -> None:
    from gpuspark.storage import directory_problem

    assert directory_problem(tmp_path) is None
    assert directory_problem(tmp_path / "new" / "deeper") is None  # creatable
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert directory_problem(f).text == "is a file, not a directory"
    assert directory_problem(f / "sub").text == f"cannot be created: {f} is a file, not a directory"
    assert directory_problem("s3://bucket/x") is None  # left to the writer


def test_atomic_write_temp_name_matches_no_pattern_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a file is written, its temporary name must not match the patterns readers list
    by: Prometheus's file_sd ``*.json`` matched the old ``.tmp-<id>.run.json`` (Go's glob
    does not skip dot files) and read half-written targets ("unexpected end of JSON input")."""
    import fnmatch

    seen: list[str] = []
    from gpuspark.storage import files

    write_new = files._write_new

    def spy(path: str, data: bytes) -> None:
        seen.append(os.path.basename(path))
        write_new(path, data)

    monkeypatch.setattr(files, "_write_new", spy)
    storage.atomic_write_text(tmp_path / "run-1.json", "{}")
    storage.atomic_write_text(tmp_path / "part-0.tfrecord", "x")
    assert len(seen) == 2
    assert not fnmatch.fnmatchcase(seen[0], "*.json") and seen[0].startswith(".tmp-")
    assert not fnmatch.fnmatchcase(seen[1], "*.tfrecord")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-0.tfrecord", "run-1.json"]


def test_what_another_process_wrote_is_seen_through_a_cached_listing(s3) -> None:  # type: ignore[no-untyped-def]
    """fsspec caches listings per process; a rank or task (another process) writing under a
    prefix this process listed must still be seen: every URL read lists afresh."""
    import fsspec

    url = f"{s3.url}/run"
    storage.atomic_write_text(f"{url}/a.json", "{}")
    assert storage.names(storage.as_path(url)) == ["a.json"]  # the listing is now cached
    other = fsspec.filesystem("s3", skip_instance_cache=True)  # as another process would
    other.pipe_file(f"{url.removeprefix('s3://')}/manifest.json", b'{"x": 1}')
    assert storage.exists(f"{url}/manifest.json")
    assert storage.file_size(f"{url}/manifest.json") == 8
    with storage.open_file(f"{url}/manifest.json") as f:
        assert f.read() == b'{"x": 1}'
    assert storage.names(storage.as_path(url)) == ["a.json", "manifest.json"]
    assert storage.list_dir(url) == [f"{url}/a.json", f"{url}/manifest.json"]
    assert storage.is_file(storage.as_path(f"{url}/manifest.json"))
