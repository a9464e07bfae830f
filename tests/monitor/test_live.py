"""Live: a real Prometheus (``monitor up``) watches a real 2-rank training on the embedded
Spark cluster. Per-rank series rise, Spark executor series are there, the run's targets appear
and then vanish, ``gpuspark top --once --json`` shows the run, and every PromQL expression of
every rendered dashboard panel and alert rule evaluates without error on that server."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="install Debian's prometheus"),
]


# Rank body: a tiny model trained through ``fit`` (metrics on by default): 60 steps of 0.4 s
# each, so several 1 s scrapes see it move, until the test has seen what it looks for and
# writes the file argv[1]; the steps left then run at full speed.
SCRIPT = """
import os, sys, time
import torch
from gpuspark.train import FitConfig, fit, prepare

seen = sys.argv[1]
torch.manual_seed(0)
model = prepare(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(20)]

def slow(x, y):
    if not os.path.exists(seen):
        time.sleep(0.4)
    return x, y

fit(model, opt, torch.nn.functional.cross_entropy, batches,
    config=FitConfig(epochs=3, log=None), transform=slow)
"""


def _query(url: str, expr: str) -> dict[str, Any]:
    q = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as resp:
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:  # 400/422: the expression itself is bad
        return dict(json.loads(exc.read()))


def _series(url: str, expr: str) -> list[dict[str, Any]]:
    body = _query(url, expr)
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


def _wait(fn: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s")


@pytest.fixture()
def prometheus(tmp_path: Path) -> Any:
    from gpuspark.monitor import down, up

    state = up(port=0, scrape_interval_s=1, node_exporter=False, directory=tmp_path / "mon")
    yield state.prometheus.url
    down(tmp_path / "mon")


def test_live_training_is_watched(spark: Any, prometheus: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuspark.cli.main import app
    from gpuspark.launch import run
    from gpuspark.monitor import names as n

    script, seen = tmp_path / "train.py", tmp_path / "seen"
    script.write_text(SCRIPT)
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = run(str(script), str(seen), num_processes=2, spark=spark)
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    url = prometheus
    ranks = _wait(
        lambda: _series(url, f"{n.SAMPLES} > 0") if len(_series(url, n.SAMPLES)) == 2 else [],
        150,
        "per-rank samples series",
    )
    run_id = ranks[0]["metric"]["run_id"]
    assert {r["metric"]["rank"] for r in ranks} == {"0", "1"}
    first = {r["metric"]["rank"]: float(r["value"][1]) for r in ranks}

    def risen() -> bool:
        later = {r["metric"]["rank"]: float(r["value"][1]) for r in _series(url, n.SAMPLES)}
        return all(later.get(k, 0.0) > v for k, v in first.items())

    _wait(risen, 30, f"per-rank samples series rising from {first}")
    targets = _series(url, f'up{{job="gpuspark-runs", run_id="{run_id}"}} == 1')
    assert len(targets) == 2
    # `gpuspark top --once --json` reads the same server while the run goes on.
    res = CliRunner().invoke(app, ["top", "--once", "--json", "--prometheus", url])
    assert res.exit_code == 0, res.output
    shown = [r for r in json.loads(res.output)["ranks"] if r["run_id"] == run_id]
    assert len(shown) == 2 and all(r["steps"] > 0 for r in shown), shown
    # Spark: the executors of the application are scraped.
    executors = 'metrics_executor_activeTasks{job="spark-executors"}'
    _wait(lambda: _series(url, executors), 60, "the executors' series")
    _wait(lambda: _series(url, 'up{job="spark-master"} == 1'), 60, "the master's target up")
    seen.write_text("seen")  # the ranks' steps left run at full speed
    thread.join(240)
    assert "error" not in out, out.get("error")
    # The run's targets vanish with the run (file_sd: no reload, no edit of prometheus.yml).
    _wait(
        lambda: not _series(url, f'up{{job="gpuspark-runs", run_id="{run_id}"}}'),
        60,
        "run targets gone",
    )
    # `top` no longer shows its ranks as live: one finished row while its rates are in the window.
    res = CliRunner().invoke(app, ["top", "--once", "--json", "--prometheus", url])
    shown = [r for r in json.loads(res.output)["ranks"] if r["run_id"] == run_id]
    assert [(r["rank"], r["state"]) for r in shown] == [("-", "finished")], shown
    _every_expression_evaluates(url)


def _every_expression_evaluates(url: str) -> None:
    from gpuspark.monitor import dashboard_expressions, rule_expressions
    from gpuspark.spec import default_spec

    spec = default_spec()
    exprs = dashboard_expressions(spec) + rule_expressions(spec)
    assert len(exprs) > 50
    bad = {e: _query(url, e).get("error") for e in exprs}
    bad = {e: err for e, err in bad.items() if err}
    assert not bad, bad
