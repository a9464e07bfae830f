"""Spark Connect on the one session path: a ``sc://`` master, or the embedded cluster when it
runs a Connect server (``gpuspark cluster up --connect``).

A Connect session is a client (``SparkSession.builder.remote``) that can set only session
settings (``spark.sql.*``); the executors and the rest belong to the server's application,
and a note names what a job asked for that does not apply. The embedded cluster's Connect
server holds every executor of the cluster: a job on the embedded cluster (named by default,
not by its ``spark://`` URL) goes through it, launch and train as well as the data jobs that
use only the DataFrame API (prep, from_dataframe, shards writes). A job that needs the RDD
API (batch prediction, doctor's live checks) is refused there in one line, and so is a data
job that names the cluster's ``spark://`` URL: a classic application there would wait for
the executors the server holds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from gpuspark.cluster.conf import spark_conf
from gpuspark.cluster.plan import SessionPlan, local_defaults
from gpuspark.cluster.security import read_secret
from gpuspark.cluster.state import ClusterState
from gpuspark.errors import ClusterError
from gpuspark.schedulers import ConnectBackend, backend_for
from gpuspark.schedulers.connect import client_conf, client_session, redact_url, server_only

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["connect_plan", "connect_session", "through_connect"]

log = logging.getLogger(__name__)


_RESTART = (
    "restart the cluster without the server: `gpuspark cluster down && gpuspark cluster up` "
    "without --connect"
)


def through_connect(
    state: ClusterState | None, data: bool, default: bool, dataframe_only: bool = False
) -> str | None:
    """The URL of the embedded cluster's Connect server (``state``'s) when one runs and the
    job names the embedded cluster by ``default``. While one runs, a ``data`` job is refused
    unless it is ``dataframe_only`` (no RDD API) and names the cluster by default."""
    server = state.connect if state is not None else None
    if server is None or not server.alive:
        return None
    if data and not dataframe_only:
        raise ClusterError(
            f"the embedded cluster runs a Spark Connect server ({server.url}) that holds its "
            "executors, and this job uses Spark's RDD API, which Connect clients lack",
            remedy=_RESTART,
        )
    if data and not default:
        raise ClusterError(
            f"the embedded cluster runs a Spark Connect server ({server.url}) that holds its "
            "executors: a classic application on its spark:// URL would wait for them",
            remedy=f"go through the server (leave out --master, or --master {server.url}), "
            f"or {_RESTART}",
        )
    return server.url if default else None


def connect_plan(
    url: str,
    spec: ClusterSpec,
    app_name: str,
    asked: dict[str, str],
    *,
    classic_only: bool = False,
    embedded: bool = False,
) -> SessionPlan:
    """A Connect client session's plan: the session settings (``spark.sql.*``) of the local
    defaults (a server on this machine), the spec and ``asked``, with notes; a
    ``classic_only`` job (one that needs the RDD API) is refused in one line naming the
    classic alternative."""
    backend = backend_for(url)
    if classic_only and isinstance(backend, ConnectBackend):
        backend.check_classic_job(url, f"this job ({app_name})")
    conf = client_conf(local_defaults()) if backend.is_local(url) else {}
    conf.update(client_conf(spark_conf(spec)))
    conf.update(client_conf(asked))
    notes = []
    if embedded:
        notes.append(
            "the embedded cluster runs a Spark Connect server: this job goes through it "
            f"({redact_url(url)})"
        )
    ignored = server_only(asked)
    if ignored:
        notes.append(
            "over Spark Connect the executors and these settings are the server's "
            f"application's, not this job's: {', '.join(ignored)} (a team's caps do not apply)"
        )
    return SessionPlan(master=url, app_name=app_name, conf=conf, remote=True, notes=notes)


def connect_session(plan: SessionPlan, state: ClusterState | None) -> Any:
    """A new Connect client session for ``plan`` (the caller stops it); with the embedded
    cluster's token when ``plan`` names its secure server (``state``'s)."""
    for note in plan.notes:
        log.info("%s", note)
    server = state.connect if state is not None else None
    token = None
    if server is not None and server.url == plan.master and server.token_file:
        token = read_secret(server.token_file)
    return client_session(plan.master, plan.conf, token)
