"""Elastic retries (``--min-ranks K``): the request's checks, the ranks' environment, and the
retry's world after a lost host: the largest number of whole tasks, at least K, that the hosts
left can run, said on the console; without ``min_ranks`` (or when even K do not fit) the retry
is refused in one line as before.

The capacity check the retry runs (``launch.api._preflight``) is a fake here, labelled as
such: it accepts the worlds a cluster that lost a host would hold. The end-to-end run, a host
killed mid-training and the run finished on the rest, is ``tests/train/test_train_elastic.py``
(``slow``)."""

from __future__ import annotations

import sys
from typing import Any

import cloudpickle
import pytest

from gpuspark.cli.main import main
from gpuspark.errors import HostLostError, LaunchError
from gpuspark.launch import api, make_request
from gpuspark.launch.ranks import rank_env

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _noop() -> None:
    return None


def _req(**kw: Any) -> Any:
    return make_request(_noop, **{"num_processes": 4, "max_attempts": 2, **kw})


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"min_ranks": 0}, "--min-ranks 0 (min_ranks=0) must be a whole number from 1 to 4"),
        ({"min_ranks": 5}, "--min-ranks 5 (min_ranks=5) must be a whole number from 1 to 4"),
        (
            {"min_ranks": 1, "processes_per_task": 2},
            "not a multiple of --nproc-per-node 2 (processes_per_task=2)",
        ),
        (
            {"min_ranks": 2, "max_attempts": 1},
            "needs a retry to act on: --max-attempts 1 (max_attempts=1)",
        ),
        ({"min_ranks": 2, "local": True}, "--local runs every rank on this machine"),
    ],
)
def test_min_ranks_is_checked_before_anything_starts(kw: dict[str, Any], says: str) -> None:
    with pytest.raises(LaunchError, match=says.replace("(", r"\(").replace(")", r"\)")):
        _req(**kw)


def test_ranks_of_an_elastic_launch_know_it() -> None:
    assert rank_env(_req(min_ranks=2), "run", 0, "gloo")["GPUSPARK_MIN_RANKS"] == "2"
    assert "GPUSPARK_MIN_RANKS" not in rank_env(_req(), "run", 0, "gloo")
    assert "elastic: a retry after a lost host runs >= 2 ranks" in _req(min_ranks=2).materialize()


def _cluster_holding(ranks: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """FAKE capacity check: a cluster whose hosts left hold ``ranks`` ranks. The worlds it
    was asked about."""
    asked: list[int] = []

    def preflight(req: Any, sc: Any) -> None:
        asked.append(req.num_processes)
        if req.num_processes > ranks:
            raise LaunchError(f"{req.num_processes} ranks need more GPUs than the cluster has")

    monkeypatch.setattr(api, "_preflight", preflight)
    return asked


_LOST = HostLostError("198.18.0.3", "host 198.18.0.3 was lost during the launch")


def test_a_retry_shrinks_to_what_the_hosts_left_hold(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = _cluster_holding(2, monkeypatch)
    req = _req(min_ranks=1, processes_per_task=1)
    api._refit_after(_LOST, req, None)
    assert req.num_processes == 2 and asked == [4, 3, 2]
    out = capsys.readouterr().out
    assert "world size 4 -> 2: host 198.18.0.3 was lost" in out and "(--min-ranks 1)" in out


def test_whole_tasks_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _cluster_holding(3, monkeypatch)
    req = _req(min_ranks=2, processes_per_task=2)
    api._refit_after(_LOST, req, None)
    assert req.num_processes == 2 and asked == [4, 2]


@pytest.mark.parametrize("min_ranks", [None, 3])
def test_without_room_for_min_ranks_the_retry_is_one_line(
    monkeypatch: pytest.MonkeyPatch, min_ranks: int | None
) -> None:
    _cluster_holding(2, monkeypatch)
    req = _req(min_ranks=min_ranks)
    with pytest.raises(LaunchError) as err:
        api._refit_after(_LOST, req, None)
    assert str(err.value).startswith(
        "host 198.18.0.3 was lost and the rest of the cluster cannot run the retry: 4 ranks"
    )
    assert req.num_processes == 4


def test_launch_takes_min_ranks(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    argv = ["launch", "-n", "4", "--max-attempts", "2", "--min-ranks", "2", "--dry-run"]
    assert main([*argv, "--json", "--gpus-per-process", "0", str(script)]) == 0
    out = capsys.readouterr().out
    assert '"min_ranks": 2' in out, out
