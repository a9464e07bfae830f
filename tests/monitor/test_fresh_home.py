"""A new user's first look at the dashboards: in a fresh ``HOME`` (no gpuspark folder, no
``GPUSPARK_*`` variable), ``gpuspark monitor up`` then ``gpuspark train`` on the embedded
cluster, both through the CLI. While the run is live its ranks are among Prometheus's active
targets and every query of every training panel of the rendered dashboards returns data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="install Debian's prometheus"),
]

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSPARK_")}
    return {**env, "HOME": str(home), "PYTHONPATH": SRC, "COLUMNS": "200"}


def _cli(env: dict[str, str], *args: str, **kw: Any) -> Any:
    return [sys.executable, "-m", "gpuspark.cli.main", *args], {"env": env, "text": True, **kw}


def _results(url: str, expr: str) -> list[Any]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


def _training_panels() -> list[str]:
    from gpuspark.monitor import dashboard_expressions
    from gpuspark.spec import default_spec

    return [e for e in dashboard_expressions(default_spec()) if "gpuspark_train_" in e]


def _ct_shards(root: Path) -> Path:
    import numpy as np

    from gpuspark.data.write import ShardWriter

    rng = np.random.default_rng(0)
    with ShardWriter(root) as w:
        for i in range(16):
            vol = rng.integers(0, 255, (8, 8, 8), dtype=np.uint8)
            w.write({"volume": vol, "label": i % 2}, split="train" if i % 4 else "val")
    return root


def test_monitor_up_then_train_in_a_fresh_home_fills_every_training_panel(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home)
    cmd, kw = _cli(env, "monitor", "up", "--port", "0", "--no-node-exporter", "--json")
    up = subprocess.run(cmd, capture_output=True, timeout=120, **kw)
    assert up.returncode == 0, up.stderr
    url = json.loads(up.stdout)["prometheus"]["url"]
    data = _ct_shards(tmp_path / "ct")
    args = ["train", "resnet3d", "--data", str(data), "-n", "2", "--epochs", "1000"]
    cmd, kw = _cli(env, *args, "--batch-size", "4", "--depth", "10")
    log = tmp_path / "train.log"
    with log.open("w") as fh:
        train = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, **kw
        )
    try:
        missing = _wait_for_every_panel(url, train, timeout=300)
        assert train.poll() is None, log.read_text()[-3000:]
        assert not missing, missing
        targets = _results(url, 'up{job="gpuspark-runs"} == 1')
        assert len(targets) == 2, targets
    finally:
        os.killpg(train.pid, signal.SIGINT)
        try:
            train.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(train.pid, signal.SIGKILL)
            train.wait()
        cmd, kw = _cli(env, "monitor", "down")
        subprocess.run(cmd, capture_output=True, timeout=60, **kw)
    # No half-written target file was ever read (the temporary name matched file_sd's *.json).
    logs = (home / ".gpuspark" / "monitor" / "logs" / "prometheus.log").read_text()
    assert "Error reading file" not in logs, logs[-2000:]


def _wait_for_every_panel(url: str, train: subprocess.Popen[str], timeout: float) -> list[str]:
    """Poll every training panel's query until each returns data (or ``timeout``); return
    those that never did."""
    missing = _training_panels()
    deadline = time.monotonic() + timeout
    while missing and time.monotonic() < deadline and train.poll() is None:
        missing = [e for e in missing if not _results(url, e)]
        time.sleep(2)
    return missing
