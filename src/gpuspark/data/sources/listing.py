"""Listing a source tree inside Spark tasks: the driver looks at the top levels only.

A prep job must not loop over millions of paths on the driver, and Spark's ``binaryFile``
listing costs a job of its own (plus a count and a cache) before any file is read. Here the
driver walks the tree breadth first just far enough to find ``want`` units of work (the
directories of the first levels, and the files met on the way), and each task walks its
directories itself (``os.walk``, or ``fs.find`` for fsspec URLs) and reads the files it finds
in the same pass.

Units are ``(path, is_dir, size)``: a directory to walk completely, or one file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from gpuspark.storage import filesystem, is_url

__all__ = ["Unit", "deal", "plan_units", "walk_unit"]

Unit = tuple[str, bool, int]
"""``(path, is_dir, size)``: a directory to walk in a task, or one file (with its size)."""

MAX_DEPTH = 6
"""Levels the driver expands at most before handing directories to tasks."""

LOCAL_BUDGET = 100_000
"""Entries the driver may list on a local file system (one ``scandir`` each, microseconds):
below it a tree is listed to the files, so tasks get even shares of files rather than
directories of unknown size. Remote stores (one request per directory) get ``want`` only."""


def _size(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat().st_size
    except OSError:
        return -1


def _entries(src: str, fs: Any) -> list[Unit]:
    """One directory's entries as units, sorted by path."""
    if fs is None:
        out: list[Unit] = []
        with os.scandir(src) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    out.append((e.path, True, 0))
                elif e.is_dir():  # a link to a directory: not followed, as os.walk does
                    continue
                else:  # files, and dangling links (the reader quarantines those)
                    out.append((e.path, False, _size(e)))
        return sorted(out)
    listed = fs.ls(src, detail=True)
    units = [
        (fs.unstrip_protocol(d["name"]), d["type"] == "directory", int(d.get("size") or 0))
        for d in listed
        if d["name"].rstrip("/") != src.rstrip("/")
    ]
    return sorted(units)


def plan_units(src: str, want: int, max_depth: int = MAX_DEPTH) -> list[Unit]:
    """Units covering every file below ``src`` exactly once: expand directories level by
    level (at most ``max_depth`` levels) until there are at least ``want`` units and, on a
    local file system, while fewer than ``LOCAL_BUDGET`` entries have been listed."""
    remote = is_url(src)
    fs, root = filesystem(src) if remote else (None, src)
    budget = 0 if remote else LOCAL_BUDGET
    dirs: list[Unit] = [(root, True, 0)]
    files: list[Unit] = []
    listed = 0
    for _ in range(max_depth):
        enough = len(dirs) + len(files) >= want
        if not dirs or (enough and listed >= budget):
            break
        deeper: list[Unit] = []
        for path, _, _ in dirs:
            for unit in _entries(path, fs):
                (deeper if unit[1] else files).append(unit)
        listed += len(deeper) + len(files)
        dirs = deeper
    if fs is not None:
        dirs = [(d if is_url(d) else fs.unstrip_protocol(d), True, 0) for d, _, _ in dirs]
    return sorted(files) + sorted(dirs)


def deal(units: list[Unit], tasks: int) -> list[list[Unit]]:
    """Units into ``tasks`` lists of about equal bytes: files by size, largest first, each
    to the lightest list; directories (size unknown) round-robin after them."""
    import heapq

    out: list[list[Unit]] = [[] for _ in range(max(1, tasks))]
    heap = [(0, i) for i in range(len(out))]
    for unit in sorted((u for u in units if not u[1]), key=lambda u: (-u[2], u[0])):
        load, i = heapq.heappop(heap)
        out[i].append(unit)
        heapq.heappush(heap, (load + max(unit[2], 1), i))
    for k, unit in enumerate(u for u in units if u[1]):
        out[k % len(out)].append(unit)
    return [part for part in out if part]


def walk_unit(unit: Unit) -> Iterator[tuple[str, int]]:
    """``(path, size)`` of every file of a unit, in sorted order (runs in the tasks)."""
    path, is_dir, size = unit
    if not is_dir:
        yield path, size
        return
    if not is_url(path):
        for dirpath, dirnames, names in os.walk(path, followlinks=False):
            dirnames.sort()
            for name in sorted(names):
                full = os.path.join(dirpath, name)
                try:
                    yield full, os.stat(full).st_size
                except OSError:  # vanished or a dangling link: the reader quarantines it
                    yield full, -1
        return
    fs, root = filesystem(path)
    for name, info in sorted(fs.find(root, detail=True).items()):
        yield fs.unstrip_protocol(name), int(info.get("size") or 0)
