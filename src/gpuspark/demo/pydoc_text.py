"""A real English corpus available offline: CPython's ``pydoc_data.topics`` (the help
topics of the Python reference, shipped with every CPython), written as ``.txt`` files."""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from gpuspark import storage
from gpuspark.demo.staging import commit_dir, staging_dir

__all__ = ["PydocTextResult", "pydoc_text"]


@dataclass(frozen=True)
class PydocTextResult:
    """What :func:`pydoc_text` wrote."""

    path: str
    files: int
    bytes: int
    words: int
    seconds: float


def pydoc_text(
    dst: str | os.PathLike[str], *, limit: int | None = None, overwrite: bool = False
) -> PydocTextResult:
    """Write each help topic of ``pydoc_data.topics`` as ``dst/<topic>.txt`` (sorted by
    topic; ``limit``: only the first ones). The folder appears complete or not at all; a
    non-empty ``dst`` is refused unless ``overwrite``."""
    from pydoc_data.topics import topics

    t0 = time.monotonic()
    root = Path(storage.local_path(os.fspath(dst))).expanduser().absolute()
    tmp = staging_dir(root, overwrite)
    names = sorted(topics)[:limit] if limit is not None else sorted(topics)
    try:
        nbytes = words = 0
        for name in names:
            text = topics[name]
            data = text.encode("utf-8")
            (tmp / f"{_safe(name)}.txt").write_bytes(data)
            nbytes += len(data)
            words += len(text.split())
        commit_dir(tmp, root, "datasets pydoc-text")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PydocTextResult(str(root), len(names), nbytes, words, round(time.monotonic() - t0, 3))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
