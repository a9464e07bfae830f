"""Scheduler backends: one protocol (:class:`Backend`), one module per scheduler Spark runs on.

- ``local``: ``local[N]``, Spark in the driver's JVM (:mod:`.local`);
- ``standalone``: ``spark://…`` and the embedded cluster ``local-cluster`` (:mod:`.standalone`);
- ``yarn``: YARN's Capacity Scheduler (:mod:`.yarn`);
- ``kubernetes``: ``k8s://…`` with Kueue, Volcano or YuniKorn (:mod:`.kubernetes`);
- ``connect``: ``sc://…``, a Spark Connect server (:mod:`.connect`).

:func:`backend_for` maps a master URL to its backend; :func:`backend_for_renderer` a
``gpuspark render`` name (``yarn``, ``kueue``, ``volcano``). The list is plain data: a new
backend is one module and one :func:`register` call (a test registers a toy one); nothing else
in gpuspark branches on a master scheme.
"""

from __future__ import annotations

from gpuspark.errors import ClusterError, did_you_mean
from gpuspark.schedulers.base import (
    NO_TEAM,
    Backend,
    Embedded,
    Reason,
    Target,
    TeamUsage,
    http_json,
)
from gpuspark.schedulers.connect import ConnectBackend, is_connect_session
from gpuspark.schedulers.kubernetes import KubernetesBackend
from gpuspark.schedulers.local import LocalBackend
from gpuspark.schedulers.standalone import EMBEDDED_MASTERS, StandaloneBackend
from gpuspark.schedulers.yarn import YarnBackend

__all__ = [
    "EMBEDDED_MASTERS",
    "NO_TEAM",
    "Backend",
    "ConnectBackend",
    "Embedded",
    "Reason",
    "Target",
    "TeamUsage",
    "backend_for",
    "backend_for_renderer",
    "backends",
    "find_backend",
    "http_json",
    "is_connect_session",
    "register",
    "renderers",
    "unregister",
]

_STANDALONE = StandaloneBackend()
_BACKENDS: list[Backend] = [
    LocalBackend(_STANDALONE),
    _STANDALONE,
    YarnBackend(),
    KubernetesBackend(),
    ConnectBackend(),
]


def backends() -> tuple[Backend, ...]:
    """The registered backends, in the order masters are matched."""
    return tuple(_BACKENDS)


def register(backend: Backend) -> Backend:
    """Add ``backend``; it is matched before the built-in ones. Returns it."""
    if backend not in _BACKENDS:
        _BACKENDS.insert(0, backend)
    return backend


def unregister(backend: Backend) -> None:
    """Remove a backend added with :func:`register`."""
    if backend in _BACKENDS:
        _BACKENDS.remove(backend)


def find_backend(master: str) -> Backend | None:
    """The backend of ``master``, or ``None`` when no backend knows it."""
    return next((b for b in _BACKENDS if b.matches(master)), None)


def backend_for(master: str) -> Backend:
    """The backend of ``master``; a one-line :class:`ClusterError` listing the forms of
    master URL when none matches."""
    found = find_backend(master)
    if found is None:
        forms = [b.example for b in _BACKENDS if b.example]
        examples = " or ".join([", ".join(forms[:-1]), forms[-1]] if len(forms) > 1 else forms)
        raise ClusterError(f"master={master!r} is not a Spark master URL", remedy=f"use {examples}")
    return found


def renderers() -> tuple[str, ...]:
    """Every ``gpuspark render`` name of queue files, over all backends."""
    return tuple(r for b in _BACKENDS for r in b.renderers)


def backend_for_renderer(name: str) -> Backend:
    """The backend that renders ``name``'s queue files; ``ValueError`` naming the choices."""
    for backend in _BACKENDS:
        if name in backend.renderers:
            return backend
    names = renderers()
    raise ValueError(
        f"scheduler {name!r} is not one of {', '.join(names)}{did_you_mean(name, names)}"
    )
