"""Option values the libraries used to choke on (issue: hardening, case 11) are refused with one
line before any work starts: nothing is created, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuspark.cli.main import main
from gpuspark.cluster.shape import parse_memory_mb
from gpuspark.errors import ClusterError


@pytest.mark.parametrize("memory", ["abc", "0g", "-1g", "4 gb"])
def test_cluster_up_refuses_a_memory_that_is_no_size(
    memory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    assert main(["cluster", "up", "--memory", memory, "--state-dir", str(state)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a JVM memory size" in err, err
    assert not state.exists()  # refused before anything was written


def test_memory_sizes_still_parse() -> None:
    assert [parse_memory_mb(t) for t in ("512m", "4g", "1t", "1048576", "1.5g")] == [
        512,
        4096,
        1024 * 1024,
        1,
        1536,
    ]
    with pytest.raises(ClusterError, match="use a size like 512m"):
        parse_memory_mb("lots")


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_monitor_up_refuses_a_port_out_of_range(
    port: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSPARK_MONITOR_DIR", str(tmp_path / "mon"))
    assert main(["monitor", "up", "--port", port]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"port {port} is not a TCP port" in err, err
    assert not (tmp_path / "mon").exists()
