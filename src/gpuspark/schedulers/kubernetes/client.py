"""The Kubernetes API client: where the API server is, who gpuspark is to it, and GETs of JSON
documents with one-line errors that say what to do.

Built on `lightkube <https://github.com/gtsystem/lightkube>`_ rather than the official
``kubernetes`` package: lightkube reads a kubeconfig as kubectl writes it (client certificates
and the CA as files or ``-data``, bearer tokens and token files, exec credential plugins as EKS,
GKE and AKS write them) and the in-cluster service account, on top of httpx2, which gpuspark
already installs; ``kubernetes`` brings urllib3, requests, oauthlib, websocket-client, aiohttp
and a generated model of every API kind. gpuspark reads a few documents (API discovery, Kueue
objects) as plain JSON, so lightkube's configuration and its authenticated HTTP client are all
it needs. lightkube is imported inside the functions only: ``gpuspark --help`` never loads it.

Where the credentials come from, in kubectl's order:

1. ``$KUBECONFIG`` (its first file that exists) or ``~/.kube/config``: the current context;
2. else, inside a pod, the service account (:data:`SERVICE_ACCOUNT_DIR`,
   ``$KUBERNETES_SERVICE_HOST`` and ``$KUBERNETES_SERVICE_PORT``);
3. else none (enough for ``kubectl proxy``; a server with ``$GPUSPARK_K8S_TOKEN`` works too).

An explicit server (the ``k8s://https://host:port`` master, or ``--url``) replaces the config's
server and keeps its CA and user, as spark-submit does with the same master;
``$GPUSPARK_K8S_TOKEN`` replaces the user's credentials by that bearer token.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark._util import envvars
from gpuspark._util.extras import require
from gpuspark.errors import ClusterError

if TYPE_CHECKING:
    from types import TracebackType

    from lightkube.config.kubeconfig import SingleConfig

__all__ = ["SERVICE_ACCOUNT_DIR", "Access", "KubeClient", "connect", "kube_config"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod finds its service account's token, CA and namespace."""
_EXEC_APIS = ("client.authentication.k8s.io/v1alpha1", "client.authentication.k8s.io/v1beta1")
_FIX_CONFIG = (
    "set KUBECONFIG to a working kubeconfig (kubectl config view --minify shows the current "
    f"context), or pass the API server as --master k8s://https://host:6443 with "
    f"{envvars.K8S_TOKEN.name}"
)
_K8S = "talking to a Kubernetes API server"  # what needs the [kubernetes] extra


@dataclass(frozen=True)
class Access:
    """What a request needs, for the message of a refusal: ``verb`` on ``resource``
    (``plural.group``), in ``namespace`` (``""``: cluster-wide)."""

    verb: str
    resource: str
    namespace: str = ""

    def can_i(self) -> str:
        """The ``kubectl auth can-i`` line that checks this permission."""
        where = f" -n {self.namespace}" if self.namespace else ""
        return f"kubectl auth can-i {self.verb} {self.resource}{where}"


class KubeClient:
    """An authenticated connection to one API server (close it, or use ``with``)."""

    def __init__(self, http: Any, server: str, source: str) -> None:
        self._http = http
        self.server = server
        """The API server's URL."""
        self.source = source
        """Where the credentials came from, for messages."""

    def get_json(self, path: str, access: Access, *, missing: tuple[str, str] | None = None) -> Any:
        """GET ``path`` and decode its JSON. A refusal, an unreachable server or bad
        credentials raise a one-line :class:`ClusterError`; ``missing``: the (message, remedy)
        of a 404."""
        response = self._send(path)
        code = response.status_code
        if code == 404 and missing is not None:
            raise ClusterError(missing[0], remedy=missing[1])
        if code >= 400:
            raise self._refusal(code, _status_message(response), path, access)
        try:
            return response.json()
        except ValueError as exc:
            raise ClusterError(
                f"{self.server}{path} did not answer JSON",
                remedy="check that the address is a Kubernetes API server",
            ) from exc

    def _send(self, path: str) -> Any:
        ConfigError = require("lightkube.core.exceptions", "kubernetes", _K8S).ConfigError
        httpx2 = require("httpx2", "kubernetes", _K8S)

        try:
            return self._http.get(path)
        except httpx2.TimeoutException as exc:
            raise _unreachable(self.server, f"no answer in time ({type(exc).__name__})") from exc
        except httpx2.TransportError as exc:
            raise _transport(self.server, str(exc) or type(exc).__name__) from exc
        except (ConfigError, OSError, KeyError, ValueError) as exc:  # exec plugin, token file
            raise ClusterError(
                f"the Kubernetes credentials of {self.source} failed: {_first_line(exc)}",
                remedy="run the kubeconfig user's exec plugin by hand (or kubectl get --raw /api) "
                "to see why",
            ) from exc

    def _refusal(self, code: int, message: str, path: str, access: Access) -> ClusterError:
        if code == 401:
            return ClusterError(
                f"{self.server} refused the credentials of {self.source} (401 Unauthorized)",
                remedy="renew them: the kubeconfig user's token, client certificate or exec "
                f"plugin, or {envvars.K8S_TOKEN.name}",
            )
        if code == 403:
            where = f" in namespace {access.namespace}" if access.namespace else ""
            return ClusterError(
                f"{self.server} forbids {self.source} to {access.verb} "
                f"{access.resource}{where}: {message}",
                remedy=f"grant '{access.verb}' on {access.resource} to that user or service "
                f"account (a Role or ClusterRole and its binding); check with: {access.can_i()}",
            )
        return ClusterError(
            f"{self.server}{path} answered HTTP {code}: {message}",
            remedy="check the API server's address and health (kubectl get --raw /readyz)",
        )

    def close(self) -> None:
        """Release the connections."""
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def connect(
    server: str | None = None, token: str | None = None, *, timeout: float = 5.0
) -> KubeClient:
    """A client of ``server`` (else the config's) with the credentials of :func:`kube_config`."""
    adapter = require("lightkube.config.client_adapter", "kubernetes", _K8S)
    ConfigError = require("lightkube.core.exceptions", "kubernetes", _K8S).ConfigError
    httpx2 = require("httpx2", "kubernetes", _K8S)

    config, source = kube_config(server, token)
    try:
        http = adapter.Client(config, adapter.ConnectionParams(timeout=httpx2.Timeout(timeout)))
    except (ConfigError, OSError, ValueError) as exc:  # CA or client certificate files
        raise ClusterError(
            f"cannot use the TLS files of {source}: {_first_line(exc)}",
            remedy="check certificate-authority and client-certificate/client-key (files or "
            "-data) of the kubeconfig's cluster and user",
        ) from exc
    return KubeClient(http, config.cluster.server.rstrip("/"), source)


def kube_config(server: str | None = None, token: str | None = None) -> tuple[SingleConfig, str]:
    """lightkube's config of the API server to call, and where its credentials come from
    (see the module's docstring for the order)."""
    KubeConfig = require("lightkube.config.kubeconfig", "kubernetes", _K8S).KubeConfig
    models = require("lightkube.config.models", "kubernetes", _K8S)
    Cluster, User = models.Cluster, models.User
    msgspec = require("msgspec", "kubernetes", _K8S)  # lightkube's config objects' types

    found = _kubeconfig_file() or _in_cluster()
    token = token or envvars.K8S_TOKEN.get()
    if server and "://" not in server:  # k8s://host:port means https, as in Spark
        server = f"https://{server}"
    server = server.rstrip("/") if server else None
    if found is None:
        if not server:
            raise ClusterError(
                f"no Kubernetes API server: no kubeconfig ({Path.home() / '.kube' / 'config'}) "
                "and not in a pod",
                remedy=_FIX_CONFIG,
            )
        config = KubeConfig.from_one(cluster=Cluster(server=server), user=User())
        found = (_get(config, "the API server"), _no_credentials())
    one, source = found
    cluster, user = one.cluster, one.user or User()
    if server:
        cluster = msgspec.structs.replace(cluster, server=server)
    if token:
        user, source = User(token=token), envvars.K8S_TOKEN.name
    return one._replace(cluster=cluster, user=_exec_v1(user)), source


def _kubeconfig_file() -> tuple[SingleConfig, str] | None:
    """The current context of ``$KUBECONFIG``'s first existing file or ``~/.kube/config``."""
    import yaml

    KubeConfig = require("lightkube.config.kubeconfig", "kubernetes", _K8S).KubeConfig
    ConfigError = require("lightkube.core.exceptions", "kubernetes", _K8S).ConfigError

    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    paths = [Path(p).expanduser() for p in listed] or [Path.home() / ".kube" / "config"]
    path = next((p for p in paths if p.is_file()), None)
    if path is None:
        if listed:
            raise ClusterError(
                f"KUBECONFIG={os.environ['KUBECONFIG']} names no file that exists",
                remedy=_FIX_CONFIG,
            )
        return None
    what = f"kubeconfig {path}"
    try:
        config = KubeConfig.from_file(path)
    except (ConfigError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:  # broken file
        raise ClusterError(
            f"{what} cannot be read: {_first_line(exc)}", remedy=_FIX_CONFIG
        ) from exc
    one = _get(config, what)
    user = f", user {one.context.user}" if one.context.user else ""
    return one, f"{what} (context {one.context_name}{user})"


def _in_cluster() -> tuple[SingleConfig, str] | None:
    """The pod's service account, when running inside a pod."""
    KubeConfig = require("lightkube.config.kubeconfig", "kubernetes", _K8S).KubeConfig
    ConfigError = require("lightkube.core.exceptions", "kubernetes", _K8S).ConfigError

    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    if not (SERVICE_ACCOUNT_DIR / "token").is_file():
        return None
    what = f"the pod's service account ({SERVICE_ACCOUNT_DIR})"
    try:
        config = KubeConfig.from_service_account(SERVICE_ACCOUNT_DIR)
    except (ConfigError, KeyError) as exc:  # no namespace file, no KUBERNETES_SERVICE_PORT
        raise ClusterError(f"{what} is incomplete: {exc}", remedy=_FIX_CONFIG) from exc
    return _get(config, what), what


def _get(config: Any, what: str) -> SingleConfig:
    """The current context of ``config``, or a one-line error naming what is missing."""
    ConfigError = require("lightkube.core.exceptions", "kubernetes", _K8S).ConfigError

    try:
        one: SingleConfig = config.get()  # raises, rather than returning None, without default
    except KeyError as exc:
        raise ClusterError(
            f"{what}: its current context names a cluster or user it lacks: {exc}",
            remedy=_FIX_CONFIG,
        ) from exc
    except ConfigError as exc:  # no current-context, or one naming no context
        raise ClusterError(f"{what}: {_first_line(exc)}", remedy=_FIX_CONFIG) from exc
    return one


def _exec_v1(user: Any) -> Any:
    """Accept exec plugins of the GA ``client.authentication.k8s.io/v1``. lightkube checks
    the version against v1alpha1/v1beta1 only but reads ``status.token`` the same way for all,
    and gives the plugin no KUBERNETES_EXEC_INFO, so the version changes nothing else."""
    msgspec = require("msgspec", "kubernetes", _K8S)

    plugin = user.exec
    if plugin is None or plugin.apiVersion in _EXEC_APIS:
        return user
    if plugin.apiVersion != "client.authentication.k8s.io/v1":
        return user  # lightkube refuses it with a message naming the version
    return msgspec.structs.replace(
        user, exec=msgspec.structs.replace(plugin, apiVersion=_EXEC_APIS[-1])
    )


def _no_credentials() -> str:
    return f"no credentials (no kubeconfig, not in a pod, {envvars.K8S_TOKEN.name} unset)"


def _status_message(response: Any) -> str:
    """The ``message`` of the API server's Status document, else the start of the body."""
    try:
        doc = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase
    message = doc.get("message") if isinstance(doc, dict) else None
    return str(message or response.reason_phrase)


def _transport(server: str, detail: str) -> ClusterError:
    if "CERTIFICATE_VERIFY_FAILED" in detail:
        return ClusterError(
            f"{server}'s TLS certificate is not signed by the CA gpuspark was given: {detail}",
            remedy="set the kubeconfig cluster's certificate-authority (file or -data) to the "
            "CA of this API server",
        )
    if "certificate required" in detail.lower():
        return ClusterError(
            f"{server} wants a client certificate and none was sent: {detail}",
            remedy="set client-certificate and client-key (files or -data) of the kubeconfig user",
        )
    return _unreachable(server, detail)


def _unreachable(server: str, detail: str) -> ClusterError:
    return ClusterError(
        f"cannot reach the Kubernetes API server at {server}: {detail}",
        remedy="check --master k8s://https://host:port (or --url), the kubeconfig's server and "
        "that the API server is up (kubectl cluster-info)",
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
