"""Reaching an MLflow store without waiting for minutes (:mod:`gpuspark.train.mlflow_store`;
hardening issue, case 7: ``gpuspark train ... --mlflow http://127.0.0.1:1`` printed nothing
and was still waiting at 200 s).

Real sockets, no MLflow server: a closed port (connection refused), a port that accepts and
never answers, a tiny HTTP server that answers 404. The slow test times MLflow's own client
against a server gone in the middle of a run."""

from __future__ import annotations

import http.server
import os
import re
import socket
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuspark.errors import GpusparkError
from gpuspark.train import mlflow_store, tracking


def _unset_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's HTTP settings unset here, and unset again after the test (what the code
    under test sets is undone too)."""
    for name in mlflow_store.HTTP_CLIENT_BOUNDS:
        monkeypatch.setenv(name, "")  # recorded, so restored after the test
        monkeypatch.delenv(name)


def _closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


@pytest.fixture
def answering_port() -> Iterator[int]:
    """A port an HTTP server answers on, 404 to everything (not MLflow: any answer will do)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(60)  # before the fix this waited for minutes
def test_train_with_no_server_at_the_mlflow_uri_fails_in_one_line_at_once(
    ct_data: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuspark.cli.main import main

    url = f"http://127.0.0.1:{_closed_port()}"
    argv = ["train", "resnet3d", "--data", ct_data, "--local", "-n", "1", "--mlflow", url]
    start = time.monotonic()
    assert main(argv) == 1
    assert time.monotonic() - start < 10
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        f"error: MLflow tracking server {url} is not reachable: connection refused (start it "
        "(`mlflow server`), pass the --mlflow URI of one that runs, or drop --mlflow)"
    ]


def test_a_server_that_never_answers_is_given_up_at_the_deadline(silent_port: int) -> None:
    start = time.monotonic()
    with pytest.raises(GpusparkError, match=r"is not reachable: no answer within 0.3 s \(fix\)"):
        mlflow_store.check_server(f"http://127.0.0.1:{silent_port}", remedy="fix", timeout=0.3)
    assert time.monotonic() - start < 2


def test_any_http_answer_is_reachable_and_local_stores_are_not_asked(answering_port: int) -> None:
    mlflow_store.check_server(f"http://127.0.0.1:{answering_port}/", remedy="fix", timeout=2)
    for uri in ("/nowhere/mlruns", "sqlite:////nowhere/m.db", "databricks"):
        mlflow_store.check_server(uri, remedy="fix", timeout=0.1)


def test_the_message_names_the_url_without_its_password() -> None:
    port = _closed_port()
    with pytest.raises(GpusparkError) as err:
        mlflow_store.check_server(f"http://me:secret@127.0.0.1:{port}", remedy="fix")
    assert str(err.value) == (
        f"MLflow tracking server http://127.0.0.1:{port} is not reachable: connection refused (fix)"
    )


def test_prepare_asks_the_server_before_mlflow_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # no MLflow call possible
    with pytest.raises(GpusparkError, match="is not reachable: connection refused"):
        tracking.prepare(f"http://127.0.0.1:{_closed_port()}", model_name="tabular")


def test_use_store_bounds_mlflows_http_client_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(set_tracking_uri=lambda uri: None, set_registry_uri=lambda u: None)
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    _unset_bounds(monkeypatch)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")  # the user's own wins
    tracking.use_store("http://mlflow.example:5000")
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"


@pytest.mark.slow  # imports MLflow and waits out its (bounded) retries: ~8 s
def test_a_server_gone_mid_run_costs_seconds_not_minutes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    _unset_bounds(monkeypatch)
    uri = f"http://127.0.0.1:{_closed_port()}"
    run = tracking.TrackedRun(tracking.Tracking(uri=uri), "0" * 32)
    start = time.monotonic()
    with pytest.raises(Exception, match=re.escape(uri)):
        run.log_metrics({"loss": 1.0}, step=1)
    assert time.monotonic() - start < 10  # MLflow's defaults: about 4 minutes
