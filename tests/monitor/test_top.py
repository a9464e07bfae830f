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
from gpuspark.monitor.top import RankRow, from_endpoints, render

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
    console.print(render(rows, "endpoints", 160))
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


def _wide_rows() -> list[RankRow]:
    phases = {"data_wait": 0.1, "compute": 0.6, "comm": 0.2, "optimizer": 0.1}
    live = [
        RankRow(
            run_id="4ae4d9538d30",
            rank=str(r),
            host="dgx-node-017.cluster.example.com",
            team="vision",
            samples_per_s=1234.5,
            steps=1520,
            epoch=3,
            loss=0.2345,
            phases=phases,
            bytes_saved_pct=50.0,
            last_step_age_s=1.0,
            gpu_util_pct=88.0,
            gpu_memory_pct=70.0,
        )
        for r in range(2)
    ]
    return [*live, RankRow(run_id="9f00aa11bb22", rank="-", state="finished")]


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_top_fits_the_terminal(width: int) -> None:
    """Every line fits; run, rank, samples/s, step and loss are never cut; a wide terminal
    shows every column; a finished run is one row saying so."""
    console = Console(width=width, record=True, color_system=None)
    console.print(render(_wide_rows(), "http://127.0.0.1:9090", width))
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    text = "\n".join(lines)
    if width >= 80:
        assert "4ae4d9538d30" in text and "1234.5" in text and "1520" in text
        assert "0.2345" in text and "…" not in text
    assert "finished" in text
    if width == 200:
        assert "dgx-node-017.cluster.example.com" in text and "GPU mem" in text
