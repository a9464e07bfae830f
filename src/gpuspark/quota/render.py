"""One entry point for the quota renderers: ``render_quota(spec, "yarn" | "kueue" | "volcano")``
gives the files, :func:`quota_notes` what to tell the administrator about them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from gpuspark.spec.models import ClusterSpec

__all__ = ["SCHEDULERS", "quota_notes", "render_quota", "write_quota"]

SCHEDULERS = ("yarn", "kueue", "volcano")


def _check(scheduler: str) -> None:
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is not one of {', '.join(SCHEDULERS)}")


def render_quota(spec: ClusterSpec, scheduler: str, **opts: Any) -> dict[str, str]:
    """The files (name -> content) that set up ``spec``'s team quotas on ``scheduler``.

    Options: yarn ``yarn_version``; kueue ``api``, ``namespace_prefix``; volcano
    ``template_dir``, ``namespace_prefix``, ``min_executors``.
    """
    _check(scheduler)
    if scheduler == "yarn":
        from gpuspark.quota.yarn import render_yarn

        return render_yarn(spec, **opts)
    if scheduler == "kueue":
        from gpuspark.quota.kueue import render_kueue

        return render_kueue(spec, **opts)
    from gpuspark.quota.volcano import render_volcano

    return render_volcano(spec, **opts)


def quota_notes(spec: ClusterSpec, scheduler: str, **opts: Any) -> list[str]:
    """What the files of :func:`render_quota` mean and leave to do (same options)."""
    _check(scheduler)
    notes = [] if spec.teams else ["the spec has no [[teams]]: every job shares one queue"]
    if scheduler == "yarn":
        from gpuspark.quota.yarn import yarn_notes

        return notes + yarn_notes(spec, yarn_version=opts.get("yarn_version", "3.3"))
    if scheduler == "kueue":
        from gpuspark.quota.kueue import kueue_notes

        return notes + kueue_notes(spec, api=opts.get("api", "v1beta2"))
    from gpuspark.quota.volcano import volcano_notes

    return notes + volcano_notes(spec)


def write_quota(files: dict[str, str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``files`` into ``out_dir``, each atomically (temp file + rename)."""
    from gpuspark.cluster.conf import write_rendered

    return write_rendered(files, os.fspath(out_dir))
