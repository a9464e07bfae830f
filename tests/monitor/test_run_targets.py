"""Run discovery: the driver lists every rank's real ``/metrics`` endpoint in the Prometheus
file_sd file ``runs/<run_id>.json`` while the run lasts and removes it when the run ends."""

from __future__ import annotations

import json
import socket
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpuspark.errors import LaunchError, SpecError
from gpuspark.launch import run
from gpuspark.monitor import targets_dir

# Each rank serves its metrics, says so, waits, and rank FAIL (if any) fails.
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from gpuspark.monitor.exporter import serve

    rm = serve()
    rm.step(8, 0.01)
    print(f"serving {rm.url}")
    time.sleep(float(sys.argv[1]))
    if os.environ["RANK"] == sys.argv[2]:
        raise SystemExit("rank failed on purpose")
    """
)


@pytest.fixture()
def monitor_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("GPUSPARK_MONITOR_DIR", str(tmp_path / "monitor"))
    monkeypatch.delenv("GPUSPARK_SPEC", raising=False)
    return targets_dir() / "runs"


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "serve.py"
    path.write_text(SCRIPT)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(*args: Any, **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """``run(...)`` in a thread; its value or error lands in the returned dict."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = run(*args, **kwargs)
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def _wait_for_ranks(folder: Path, ranks: int, timeout: float = 120) -> list[dict[str, Any]]:
    """The one run file's groups once it lists ``ranks`` ranks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list(folder.glob("*.json"))
        if len(files) == 1:
            groups: list[dict[str, Any]] = json.loads(files[0].read_text())
            if len(groups) == ranks:
                return groups
        time.sleep(0.05)
    raise AssertionError(f"no run file listing {ranks} ranks in {folder}")


def _check_live(groups: list[dict[str, Any]], taken: set[int]) -> None:
    """Every target answers on its port with its own rank's series."""
    assert sorted(g["labels"]["rank"] for g in groups) == ["0", "1"]
    ports = set()
    for g in groups:
        (target,) = g["targets"]
        port = target.rsplit(":", 1)[1]
        ports.add(int(port))
        labels = g["labels"]
        assert set(labels) == {"run_id", "rank", "host", "team"}
        assert labels["host"] == socket.gethostname() and labels["team"] == ""
        body = urllib.request.urlopen(f"http://{target}/metrics", timeout=5).read().decode()
        assert f'rank="{labels["rank"]}"' in body
        assert f'run_id="{labels["run_id"]}"' in body
    assert len(ports) == 2 and not ports & taken


def test_local_run_lists_both_ranks_then_removes_the_file(monitor_dir: Path, script: Path) -> None:
    base = _free_port()
    thread, out = _launch(
        str(script), "3", "-1", num_processes=2, local=True, gpus_per_process=0, metrics_port=base
    )
    groups = _wait_for_ranks(monitor_dir, 2)
    _check_live(groups, taken=set())
    assert {int(g["targets"][0].rsplit(":", 1)[1]) for g in groups} <= {base, base + 1, base + 2}
    thread.join(120)
    assert "error" not in out, out.get("error")
    assert list(monitor_dir.glob("*.json")) == []


def test_busy_base_port_reports_the_ports_really_bound(monitor_dir: Path, script: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        base = int(busy.getsockname()[1])
        thread, out = _launch(
            str(script), "3", "-1", num_processes=2, local=True, gpus_per_process=0,
            metrics_port=base,
        )  # fmt: skip
        groups = _wait_for_ranks(monitor_dir, 2)
        _check_live(groups, taken={base})
        thread.join(120)
    assert "error" not in out
    assert list(monitor_dir.glob("*.json")) == []


def test_failing_rank_still_removes_the_file(monitor_dir: Path, script: Path) -> None:
    thread, out = _launch(
        str(script), "3", "1", num_processes=2, local=True, gpus_per_process=0,
        metrics_port=_free_port(),
    )  # fmt: skip
    _wait_for_ranks(monitor_dir, 2)
    thread.join(120)
    assert isinstance(out.get("error"), LaunchError)
    assert "rank failed on purpose" in str(out["error"])
    assert list(monitor_dir.glob("*.json")) == []


def test_unknown_team_is_refused_before_any_rank(monitor_dir: Path, script: Path) -> None:
    with pytest.raises(SpecError, match="team 'ml': the cluster spec 'embedded' defines no"):
        run(str(script), "0", "-1", num_processes=2, local=True, gpus_per_process=0, team="ml")
    assert not monitor_dir.exists()


@pytest.mark.slow  # the barrier-stage path runs by default in tests/monitor/test_live.py
@pytest.mark.spark
def test_spark_barrier_run_lists_both_ranks_then_removes_the_file(
    spark: Any, monitor_dir: Path, script: Path
) -> None:
    thread, out = _launch(str(script), "6", "-1", num_processes=2, spark=spark)
    groups = _wait_for_ranks(monitor_dir, 2, timeout=180)
    _check_live(groups, taken=set())
    thread.join(180)
    assert "error" not in out, out.get("error")
    assert list(monitor_dir.glob("*.json")) == []
