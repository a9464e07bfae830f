"""Remote reading through fsspec's HTTP filesystem and the node-local shard cache.

The remote store is a real HTTP server on 127.0.0.1 (a thread in the test process) serving
the dataset directory; it counts every GET per file, so "fetched once" is observed on the
server side, not inferred from the client's own counters.
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from gpuspark.data import format as fmt
from gpuspark.data.load import ShardCache, ShardDataset, World
from gpuspark.data.write import ShardWriter

pytest.importorskip("aiohttp", reason="fsspec's http filesystem needs aiohttp")


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    gets: Counter[str]
    lock: threading.Lock

    def do_GET(self) -> None:
        with self.lock:
            self.gets[self.path] += 1
        spec = self.headers.get("Range")
        if not spec:
            super().do_GET()
            return
        # Range requests, as object stores answer them (the stdlib handler ignores Range).
        data = Path(self.translate_path(self.path)).read_bytes()
        first, _, last = spec.removeprefix("bytes=").partition("-")
        start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(data[start : end + 1])

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


class Server:
    def __init__(self, directory: Path) -> None:
        handler = type(
            "Handler", (_CountingHandler,), {"gets": Counter(), "lock": threading.Lock()}
        )
        self.handler = handler
        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), partial(handler, directory=str(directory))
        )
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def gets(self) -> Counter[str]:
        return self.handler.gets

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Server, fmt.Manifest]]:
    root = tmp_path / "remote"
    with ShardWriter(root / "ds", target_shard_bytes=2_000) as writer:
        for i in range(60):
            writer.write({"idx": i, "x": np.full(64, i, np.int16)})
    server = Server(root)
    try:
        yield server, fmt.load_manifest(root / "ds")
    finally:
        server.close()


_CHILD = """
import sys, time, os, fsspec
from gpuspark.data.load import ShardCache
from gpuspark.data import format as fmt
url, cache_dir, go = sys.argv[1:4]
manifest = fmt.load_manifest(url)
fs, base = fsspec.core.url_to_fs(url)
cache = ShardCache(cache_dir)
open(go + ".ready-" + str(os.getpid()), "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
for shard in manifest.shards:
    for rel in (shard.path, shard.index):
        with cache.open(fs, base + "/" + rel, url=url + "/" + rel) as f:
            assert len(f.read()) > 0
print(cache.stats.hits, cache.stats.misses, cache.stats.bytes_fetched)
"""


def test_two_processes_fetch_each_shard_once(served, tmp_path: Path) -> None:
    server, manifest = served
    url, cache_dir, go = f"{server.url}/ds", tmp_path / "cache", tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, str(cache_dir), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both are ready: they start reading at the same moment
    outs = [c.communicate(timeout=120)[0].split() for c in children]
    assert [c.returncode for c in children] == [0, 0]
    files = [s.path for s in manifest.shards] + [s.index for s in manifest.shards]
    assert {f"/ds/{f}": server.gets[f"/ds/{f}"] for f in files} == {f"/ds/{f}": 1 for f in files}
    misses = sum(int(o[1]) for o in outs)
    hits = sum(int(o[0]) for o in outs)
    assert misses == len(files) and hits == len(files)  # each file: one miss, one hit
    shard_bytes = sum(s.bytes for s in manifest.shards)
    assert sum(int(o[2]) for o in outs) >= shard_bytes
    assert not [p for p in cache_dir.iterdir() if ".tmp-" in p.name]


def test_remote_dataset_through_cache_with_eviction(served, tmp_path: Path) -> None:
    server, manifest = served
    url = f"{server.url}/ds"
    limit = 2 * max(s.bytes for s in manifest.shards) + 200
    ds = ShardDataset(url, world=World(0, 1), cache_dir=tmp_path / "c", cache_limit_bytes=limit)
    loader = ds.loader(10, num_workers=1)
    ids = sorted(i for b in loader for i in b["idx"].tolist())
    assert ids == list(range(60))
    stats = loader.stats()
    assert stats["cache_misses"] == 2 * len(manifest.shards)  # shard + index, once each
    assert stats["cache_bytes_fetched"] >= sum(s.bytes for s in manifest.shards)
    assert stats["cache_evictions"] > 0
    cache = ShardCache(tmp_path / "c", limit)
    assert cache.size_bytes() <= limit


def test_remote_dataset_without_cache(served) -> None:
    server, _ = served
    ds = ShardDataset(f"{server.url}/ds", world=World(1, 2), seed=4)
    assert len([s["idx"] for s in ds]) == 30


def test_lru_evicts_least_recently_used(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for name in "abc":
        fs.pipe(f"/lru/{name}", name.encode() * 100)
    cache = ShardCache(tmp_path / "lru", limit_bytes=250)
    for name in "ab":
        cache.open(fs, f"/lru/{name}").close()
    time.sleep(0.02)
    cache.open(fs, "/lru/a").close()  # a is now more recent than b
    time.sleep(0.02)
    cache.open(fs, "/lru/c").close()  # over the limit: b goes
    kept = sorted(Path(p).name.split("-", 1)[1] for p, _, _ in cache.entries())
    assert kept == ["a", "c"]
    assert (cache.stats.hits, cache.stats.misses, cache.stats.evictions) == (1, 3, 1)
