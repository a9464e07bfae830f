"""``gpuspark doctor`` options are checked before any work (issue: hardening, case 21): a
world size no probe can use is refused before a Spark session starts, and a probe whose ranks
cannot all start is not launched."""

from __future__ import annotations

from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.doctor import live
from gpuspark.doctor.report import Status, failure, ok


@pytest.fixture()
def no_work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records any start of the checks (which would open a Spark session)."""
    started: list[str] = []
    monkeypatch.setattr(live, "run_checks", lambda **kw: started.append("checks"))
    return started


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["doctor", "--world-size", "0"], "--world-size"),
        (["doctor", "--world-size", "-3", "--probe"], "--world-size"),
        (["doctor", "--probe", "--world-size", "1"], "use 2 or more"),
        (["doctor", "--world-size", "many"], "--world-size"),
    ],
)
def test_a_bad_world_size_is_refused_before_any_work(
    argv: list[str], says: str, no_work: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert no_work == []


def _cluster(checks: list[Any]) -> Any:
    return lambda spec, master, world_size: checks


def test_the_probe_is_not_launched_when_its_ranks_cannot_all_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unfit = failure("training capacity", "world size 99: not enough free slots", "add workers")
    monkeypatch.setattr(live, "node_checks", lambda spec: [])
    monkeypatch.setattr(live, "cluster_checks", _cluster([unfit]))
    monkeypatch.setattr(live, "run_probe", lambda *a, **kw: pytest.fail("probe launched"))
    report = live.run_checks(probe=True, world_size=99)
    probe = report.checks[-1]
    assert (probe.name, probe.status) == ("collective probe", Status.SKIPPED)
    assert "world size 99" in probe.evidence
    monkeypatch.setattr(live, "cluster_checks", _cluster([ok("training capacity", "fits")]))
    monkeypatch.setattr(live, "run_probe", lambda *a, **kw: ok("collective probe", "ran"))
    assert live.run_checks(probe=True, world_size=2).checks[-1].evidence == "ran"
