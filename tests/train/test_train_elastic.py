"""Elastic recovery at the command level: `gpuspark train -n 2 --max-attempts 2 --min-ranks 1`
on an embedded cluster of two hosts (one simulated GPU each, ``cluster up --hosts 2``), and the
host of rank 1 SIGKILLed mid-epoch (its worker, executor, agent and rank, as if the machine
went away). The run goes on from the newest checkpoint on the one host left: the launcher says
``world size 2 -> 1``, rank 0 says it resumed at world size 1, the loader deals the rest of
the epoch to the one rank (exactness: ``tests/data/test_redeal.py``), every epoch finishes,
and the final validation AUC is close to the uninterrupted 2-rank run's.

Each run prints its time; the module takes about 2-3 minutes (``slow``)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_train_faults as faults  # tests/train is on sys.path
from test_train_faults import TRAIN, _finish, _kill_host_of, _start, _steps, _wait_for_step

from _cluster import hosts_cluster  # tests/_cluster.py
from gpuspark.cluster.local import LocalCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EPOCHS = 4


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """``gpuspark cluster up --hosts 2``: room for 2 ranks, 1 once a host is lost."""
    yield from hosts_cluster(tmp_path_factory, 2)


data = faults.data
"""The fault tests' table (2,400 rows in blocks of 8), a module fixture here too."""


def _seconds_until(log: Path, text: str, proc: Any) -> float:
    """When ``text`` appears in ``log`` (``time.monotonic()``); polled every 50 ms."""
    deadline = time.monotonic() + 300
    while text not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)
    return time.monotonic()


def _history(ckpt: Path) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = json.loads((ckpt / "history.json").read_text())["history"]
    return history


@pytest.fixture(scope="module")
def reference(hosts: LocalCluster, data: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The uninterrupted 2-rank run: its history and optimizer steps per epoch."""
    tmp = tmp_path_factory.mktemp("reference")
    t0 = time.monotonic()
    proc = _start(hosts, tmp / "ref.log", *TRAIN, "--data", data, "--checkpoint-dir",
                  str(tmp / "ckpt"))  # fmt: skip
    rc, out = _finish(proc, tmp / "ref.log")
    assert rc == 0, out[-3000:]
    print(f"uninterrupted run: {time.monotonic() - t0:.1f} s")
    return {"history": _history(tmp / "ckpt"), "per_epoch": _steps(tmp / "ckpt")[-1] // EPOCHS}


def test_a_lost_host_continues_on_the_ranks_left(
    hosts: LocalCluster, data: str, reference: Any, tmp_path: Path
) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "train.log"
    args = [*TRAIN, "--data", data, "--checkpoint-dir", str(ckpt), "--max-attempts", "2",
            "--min-ranks", "1"]  # fmt: skip
    t0 = time.monotonic()
    proc = _start(hosts, log, *args)
    _wait_for_step(ckpt, reference["per_epoch"] + 1, proc)  # inside epoch 1
    lost = _kill_host_of(hosts, "gpuspark-rank1")
    lost_at = time.monotonic()
    resumed_after = _seconds_until(log, "world size 2 -> 1\n", proc) - lost_at
    rc, out = _finish(proc, log)
    print(f"elastic run: {time.monotonic() - t0:.1f} s; training resumed at world size 1 "
          f"{resumed_after:.1f} s after the host was lost")  # fmt: skip
    assert rc == 0, out[-3000:]
    assert f"world size 2 -> 1: host {lost} was lost" in out, out[-3000:]
    resumed = re.search(r"resumed from \S+ at epoch (\d+), step \d+ \(global step \d+\)"
                        r"(?:, restart \d+)?, world size 2 -> 1", out)  # fmt: skip
    assert resumed is not None and resumed.group(1) == "1", out[-3000:]
    history = _history(ckpt)
    assert [h["epoch"] for h in history] == list(range(EPOCHS)), history
    got, want = history[-1]["val_auc"], reference["history"][-1]["val_auc"]
    print(f"final val AUC: elastic {got:.4f}, uninterrupted {want:.4f}")
    assert abs(got - want) < 0.05, (got, want)
