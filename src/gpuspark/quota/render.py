"""One entry point for the quota renderers: ``render_quota(spec, "yarn" | "kueue" | "volcano")``
gives the files, :func:`quota_notes` what to tell the administrator about them. Which backend
renders a name is the backends' to say (:func:`gpuspark.schedulers.backend_for_renderer`).

:func:`render_k8s` (``gpuspark render k8s``) goes through the same door, the Kubernetes
backend's ``k8s`` renderer, and hands it what lives above the schedulers: the application
settings every cluster gets (:func:`gpuspark.cluster.conf.spark_conf`) and the monitoring
objects (:mod:`gpuspark.monitor.k8s`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark.cluster.conf import driver_metrics_conf, spark_conf, write_rendered_tree
from gpuspark.monitor.k8s import k8s_manifests
from gpuspark.schedulers import backend_for_renderer, renderers
from gpuspark.schedulers.kubernetes.render import K8S_RENDERER, job_namespaces
from gpuspark.spec.models import DEFAULT_DISCOVERY_SCRIPT

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec

__all__ = [
    "K8S_RENDERER",
    "SCHEDULERS",
    "k8s_options",
    "quota_notes",
    "render_k8s",
    "render_quota",
    "write_quota",
]

SCHEDULERS = renderers()
"""The names of the built-in renderers (``yarn``, ``kueue``, ``volcano``, ``k8s``)."""


def render_quota(spec: ClusterSpec, scheduler: str, **opts: Any) -> dict[str, str]:
    """The files (name -> content) that set up ``spec``'s team quotas on ``scheduler``.

    Options: yarn ``yarn_version``; kueue ``api``, ``namespace_prefix``; volcano
    ``template_dir``, ``namespace_prefix``, ``min_executors``; k8s: see :func:`render_k8s`.
    """
    return backend_for_renderer(scheduler).render(spec, scheduler, **opts)


def quota_notes(spec: ClusterSpec, scheduler: str, **opts: Any) -> list[str]:
    """What the files of :func:`render_quota` mean and leave to do (same options)."""
    # Each renderer says what a spec without [[teams]] gets: the queue it names is its own.
    return backend_for_renderer(scheduler).notes(spec, scheduler, **opts)


def k8s_options(
    spec: ClusterSpec,
    *,
    api: str = "v1beta2",
    namespace_prefix: str = "",
    conf_dir: str | None = None,
) -> dict[str, Any]:
    """The options of the ``k8s`` renderer for ``spec``: the given ones, the application
    settings (GPU amounts, executor shape, metrics, event log; the discovery script at its
    place in the image) and the monitoring manifests."""
    app_conf = spark_conf(spec, discovery_script_path=DEFAULT_DISCOVERY_SCRIPT)
    app_conf.update(driver_metrics_conf())
    namespaces = job_namespaces(spec, namespace_prefix)
    return {
        "api": api,
        "namespace_prefix": namespace_prefix,
        "conf_dir": conf_dir,
        "app_conf": app_conf,
        "manifests": k8s_manifests(spec, namespaces),
    }


def render_k8s(
    spec: ClusterSpec,
    *,
    api: str = "v1beta2",
    namespace_prefix: str = "",
    conf_dir: str | None = None,
) -> dict[str, str]:
    """Every file of ``gpuspark render k8s`` (relative path -> content): Kueue ``api``
    version, team namespaces ``namespace_prefix`` + team, ``conf_dir`` where ``spark/`` will
    be when ``spark-submit`` runs (default: its files name each other relatively)."""
    opts = k8s_options(spec, api=api, namespace_prefix=namespace_prefix, conf_dir=conf_dir)
    return render_quota(spec, K8S_RENDERER, **opts)


def write_quota(files: dict[str, str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``files`` (relative paths, ``/``-separated) under ``out_dir``, each atomically
    (temp file + rename)."""
    return write_rendered_tree(files, out_dir)
