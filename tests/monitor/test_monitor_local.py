"""``gpuspark monitor up|status|down`` with the real Debian Prometheus and node_exporter:
started on loopback, scraping what the file_sd directory lists, stopped exactly."""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuspark._util.procs import pid_alive
from gpuspark.cli.main import app
from gpuspark.cluster.discovery import remove_targets, write_targets

pytestmark = pytest.mark.skipif(
    not shutil.which("prometheus"), reason="prometheus missing: install Debian's prometheus"
)
runner = CliRunner()


@pytest.fixture()
def mon_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GPUSPARK_MONITOR_DIR", str(tmp_path / "mon"))
    yield tmp_path / "mon"
    runner.invoke(app, ["monitor", "down"])


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _wait(fn: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"condition not met within {timeout} s")


def test_up_status_down(mon_dir: Path) -> None:
    res = runner.invoke(app, ["monitor", "up", "--port", "0", "--json"])
    assert res.exit_code == 0, res.output
    state = json.loads(res.output)
    url = state["prometheus"]["url"]
    pids = [state["prometheus"]["pid"]] + (
        [state["node_exporter"]["pid"]] if state["node_exporter"] else []
    )
    assert all(pid_alive(p) for p in pids)
    assert url.startswith("http://127.0.0.1:")
    # The alert rules are loaded.
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=5) as resp:
        groups = json.loads(resp.read())["data"]["groups"]
    assert sum(len(g["rules"]) for g in groups) >= 13
    # A second `up` starts nothing.
    again = runner.invoke(app, ["monitor", "up"])
    assert again.exit_code == 0 and "already running" in again.output
    # A target file written now is scraped (file_sd, no reload): a node_exporter stands in
    # for a rank endpoint here; what matters is discovery, not the metrics.
    if state["node_exporter"]:
        port = state["node_exporter"]["port"]
        labels = {"run_id": "r1", "rank": "0", "host": "127.0.0.1", "team": ""}
        write_targets(mon_dir / "targets", "runs", "r1", [([f"127.0.0.1:{port}"], labels)])
        up = _wait(lambda: _query(url, 'up{job="gpuspark-runs", run_id="r1"} == 1'), 40)
        assert up[0]["metric"]["rank"] == "0"
        remove_targets(mon_dir / "targets", "runs", "r1")
        _wait(lambda: not _query(url, 'up{job="gpuspark-runs"}'), 40)
        node = _query(url, 'up{job="node"} == 1')
        assert node, "node_exporter is not scraped"
    status = runner.invoke(app, ["monitor", "status", "--json"])
    assert status.exit_code == 0 and json.loads(status.output)["running"] is True
    down = runner.invoke(app, ["monitor", "down", "--json"])
    assert down.exit_code == 0, down.output
    assert sorted(json.loads(down.output)["stopped_pids"]) == sorted(pids)
    assert not any(pid_alive(p) for p in pids)
    off = runner.invoke(app, ["monitor", "status"])
    assert off.exit_code == 0 and "not running" in off.output


def test_missing_prometheus_is_one_line(
    mon_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuspark.cli.main import main

    monkeypatch.setenv("PATH", str(mon_dir))  # no prometheus on PATH
    assert main(["monitor", "up"]) == 1
    err = capsys.readouterr().err
    assert "prometheus is not installed" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
