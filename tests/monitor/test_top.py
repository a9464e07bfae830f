"""``gpuspark top`` from the ranks' own endpoints (a real exporter in a child process, since
the exporter is one per process), rendered as a table and as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpuspark.cli.main import app
from gpuspark.cluster.discovery import write_targets
from gpuspark.monitor.top import from_endpoints, render

# A rank that steps every 20 ms: 70% compute, 20% data wait, 10% comm; sends 1/4 of the bytes.
RANK = textwrap.dedent(
    """
    import sys, time
    from gpuspark.monitor.exporter import serve
    rm = serve(int(sys.argv[1]), run_id="run-a", team="vision")
    print(rm.port, flush=True)
    phases = {"data_wait": 0.2, "compute": 0.7, "comm": 0.1, "optimizer": 0.0}
    for i in range(100000):
        rm.step(8, 0.02, phases, 250, 1000, 0.5, 0.1, 0)
        time.sleep(0.02)
    """
)


def _start_rank(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    proc = subprocess.Popen(
        [sys.executable, str(script), "19950"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_rows_from_endpoints(tmp_path: Path) -> None:
    proc, port = _start_rank(tmp_path)
    try:
        rows = from_endpoints([f"127.0.0.1:{port}", "127.0.0.1:1"], interval=1.0)
    finally:
        proc.kill()
        proc.wait()
    assert len(rows) == 1  # the unreachable endpoint is skipped
    row = rows[0]
    assert (row.run_id, row.rank, row.team) == ("run-a", "0", "vision")
    assert 100 < row.samples_per_s < 500  # 8 samples per ~20 ms step
    assert abs(row.phases["compute"] - 0.7) < 0.01 and abs(row.data_wait_pct - 20) < 1
    assert row.bytes_saved_pct is not None and abs(row.bytes_saved_pct - 75) < 0.01
    assert row.last_step_age_s is not None and row.last_step_age_s < 5
    console = Console(width=160, record=True, color_system=None)
    console.print(render(rows, "endpoints"))
    text = console.export_text()
    assert "run-a" in text and "vision" in text and "75%" in text and "20%" in text


def test_cli_once_json_reads_the_run_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSPARK_MONITOR_DIR", str(tmp_path / "mon"))
    proc, port = _start_rank(tmp_path)
    try:
        labels = {"run_id": "run-a", "rank": "0", "host": "127.0.0.1", "team": "vision"}
        targets = [([f"127.0.0.1:{port}"], labels)]
        write_targets(tmp_path / "mon" / "targets", "runs", "run-a", targets)
        res = CliRunner().invoke(app, ["top", "--once", "--json"])
    finally:
        proc.kill()
        proc.wait()
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["source"] == "endpoints"
    assert [r["run_id"] for r in data["ranks"]] == ["run-a"]
    assert data["ranks"][0]["samples_per_s"] > 0
