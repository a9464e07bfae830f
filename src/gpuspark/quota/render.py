"""One entry point for the quota renderers: ``render_quota(spec, "yarn" | "kueue" | "volcano")``
gives the files, :func:`quota_notes` what to tell the administrator about them. Which backend
renders a name is the backends' to say (:func:`gpuspark.schedulers.backend_for_renderer`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gpuspark.cluster.conf import write_rendered
from gpuspark.schedulers import backend_for_renderer, renderers

if TYPE_CHECKING:
    from pathlib import Path

    from gpuspark.spec.models import ClusterSpec

__all__ = ["SCHEDULERS", "quota_notes", "render_quota", "write_quota"]

SCHEDULERS = renderers()
"""The names of the built-in renderers (``yarn``, ``kueue``, ``volcano``)."""


def render_quota(spec: ClusterSpec, scheduler: str, **opts: Any) -> dict[str, str]:
    """The files (name -> content) that set up ``spec``'s team quotas on ``scheduler``.

    Options: yarn ``yarn_version``; kueue ``api``, ``namespace_prefix``; volcano
    ``template_dir``, ``namespace_prefix``, ``min_executors``.
    """
    return backend_for_renderer(scheduler).render(spec, scheduler, **opts)


def quota_notes(spec: ClusterSpec, scheduler: str, **opts: Any) -> list[str]:
    """What the files of :func:`render_quota` mean and leave to do (same options)."""
    backend = backend_for_renderer(scheduler)
    notes = [] if spec.teams else ["the spec has no [[teams]]: every job shares one queue"]
    return notes + backend.notes(spec, scheduler, **opts)


def write_quota(files: dict[str, str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``files`` into ``out_dir``, each atomically (temp file + rename)."""

    return write_rendered(files, os.fspath(out_dir))
