"""Fixtures of the Kubernetes tests: the recording stand-in for the API server
(``tests/k8s_standin.py``; no real API server can run here), with a throwaway CA, server and
client certificate, and no kubeconfig, service account or token of the machine in the way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_standin import Pki, StandIn, make_pki  # tests/k8s_standin.py


@pytest.fixture(scope="session")
def k8s_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The stand-in's CA, server certificate and a client certificate (CN gpuspark-tests)."""
    return make_pki(tmp_path_factory.mktemp("k8s-pki"))


@pytest.fixture()
def k8s_standin(k8s_pki: Pki) -> Iterator[StandIn]:
    """A running stand-in serving Kueue v1beta1 and v1beta2 (preferred): ``.url``,
    ``.ca_file``, ``.client_cert``, ``.client_key``, ``.requests`` (every request recorded),
    ``.posted(plural)``, ``.wait_for(condition, timeout)``, ``.add(obj)``, ``.require(...)``."""
    with StandIn(k8s_pki) as standin:
        yield standin


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No kubeconfig, service account or token of this machine reaches the clients."""
    for name in ("KUBECONFIG", "GPUSPARK_K8S_TOKEN", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
