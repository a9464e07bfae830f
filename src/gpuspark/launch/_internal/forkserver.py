"""The fork server that starts a function's ranks where the agent may not fork them: a clean
parent.

A process forked from a multi-threaded parent can inherit a lock that no thread of the child
will ever release. An elastic agent with the c10d rendezvous runs threads (its keep-alive, and
on the host node the TCP store's server), so its ranks must not be forked from it. A fork
server is started by the agent before any of those threads exist, imports torch once, and
forks every rank (and every restarted rank) from that one clean state. Static launches need
none (their agents stay single-threaded, see ``launch._internal.rendezvous``) unless the
launching process ran torch's OpenMP regions (``launch.ranks.import_launcher``).

Importing this module *in the fork server* restores the agent's ``sys.path`` (Python 3.11's
fork server does not pass it on: a function shipped from a module that Spark put on the path
would not unpickle) and preloads what every rank imports.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

from gpuspark._util import envvars

__all__ = ["PATH_ENV", "start"]

PATH_ENV = envvars.FORKSERVER_SYS_PATH.name
"""Set only while the agent starts its fork server: the agent's ``sys.path``."""

_PRELOAD = ["gpuspark.launch._internal.forkserver"]

_SUN_PATH_MAX = 104
"""Bytes a Unix socket's path may have (``sun_path``: 108 on Linux, 104 on macOS, with NUL)."""

_SOCKET_IN_TEMP = os.path.join("pymp-xxxxxxxx", "listener-xxxxxxxx")
"""Where multiprocessing puts the fork server's socket, under the temp folder."""


def start() -> None:
    """Start this process's fork server now (it imports torch while the rendezvous runs)."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)
    os.environ[PATH_ENV] = os.pathsep.join(sys.path)
    try:
        with _socket_fits():
            forkserver.ensure_running()
    finally:
        os.environ.pop(PATH_ENV, None)


@contextlib.contextmanager
def _socket_fits() -> Iterator[None]:
    """Make the fork server's socket under the system's temp folder when ``$TMPDIR`` is too
    long for a Unix socket's path (a scheduler's job folder, say; Python 3.11 would fail with
    "AF_UNIX path too long", as 3.13 no longer does)."""
    base = tempfile.gettempdir()
    if len(os.path.join(base, _SOCKET_IN_TEMP).encode()) < _SUN_PATH_MAX:
        yield
        return
    saved, tempfile.tempdir = tempfile.tempdir, "/tmp"
    try:
        yield
    finally:
        tempfile.tempdir = saved


def _restore_path() -> None:
    saved = os.environ.pop(PATH_ENV, None)
    if saved is None:
        return
    for entry in reversed(saved.split(os.pathsep)):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _preload() -> None:
    with contextlib.suppress(ImportError):
        import torch.distributed
        import torch.distributed.elastic.multiprocessing  # noqa: F401

        import gpuspark.launch._internal.worker  # noqa: F401


if PATH_ENV in os.environ:  # imported by the fork server at its start (and only there)
    _restore_path()
    _preload()
