"""Faults injected at the command level: `gpuspark train` on an embedded cluster of three
hosts (``cluster up --hosts 3``) while a rank, the driver or a whole host is SIGKILLed.

Every run trains the tabular recipe on CPU (gloo, one torch thread) from the same seed, so an
interrupted run that resumes must end with weights *bitwise* equal to the uninterrupted one.
The host-loss tests come last: each kills a worker for good, and the cluster has one fewer.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_tabular_recipe import write_tabular  # a sibling module (tests/train is on sys.path)

from _cluster import hosts_cluster  # tests/_cluster.py
from _proc import comm, descendants  # tests/_proc.py
from gpuspark.cluster.local import LocalCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EPOCHS = 4
TRAIN = [
    "train", "tabular", "-n", "2", "--epochs", str(EPOCHS), "--batch-size", "8",
    "--hidden", "256", "--layers", "3", "--threads", "1", "--metrics-port", "0",
    "--checkpoint-every", "4",
]  # fmt: skip
_STEP = re.compile(r"step-(\d{9})\.pt$")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """``gpuspark cluster up --hosts 3``."""
    yield from hosts_cluster(tmp_path_factory, 3)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_tabular(tmp_path_factory.mktemp("tab") / "risk", 2400, block_rows=8)


def _start(cluster: LocalCluster, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``gpuspark ARGS`` as a separate process (its own driver) on ``cluster``."""
    env = {**os.environ, "GPUSPARK_STATE_DIR": str(cluster.state_dir)}
    cli = str(Path(sys.executable).with_name("gpuspark"))
    out = log.open("wb")
    return subprocess.Popen([cli, *args], stdout=out, stderr=subprocess.STDOUT, env=env)


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 420) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"timed out:\n{log.read_text()[-3000:]}") from None
    return rc, log.read_text()


def _train(cluster: LocalCluster, tmp: Path, name: str, data: str, *extra: str) -> tuple[int, str]:
    log = tmp / f"{name}.log"
    ckpt = str(tmp / name)
    return _finish(
        _start(cluster, log, *TRAIN, "--data", data, "--checkpoint-dir", ckpt, *extra), log
    )


def _steps(directory: Path) -> list[int]:
    return sorted(
        int(m.group(1)) for p in directory.glob("step-*.pt") if (m := _STEP.search(p.name))
    )


def _final_weights(directory: Path) -> dict[str, Any]:
    import torch

    last = max(directory.glob("step-*.pt"))
    return torch.load(last, map_location="cpu", weights_only=False)["model"]


def _assert_bitwise_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    import torch

    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"tensors differ: {differ[:5]}"


def _wait_for_step(directory: Path, beyond: int, proc: subprocess.Popen[bytes]) -> int:
    """Wait until a checkpoint past global step ``beyond`` exists; return its step."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = [s for s in _steps(directory) if s > beyond]
        if found:
            return found[0]
        assert proc.poll() is None, "the run ended before the fault could be injected"
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint past step {beyond} in {directory}")


def _named(cluster: LocalCluster, name: str) -> list[int]:
    """Processes below the cluster's workers named ``name`` (ranks: ``gpuspark-rank<N>``)."""
    assert cluster.state is not None
    return sorted(p for p in descendants(w.pid for w in cluster.state.workers) if comm(p) == name)


@pytest.fixture(scope="module")
def reference(hosts: LocalCluster, data: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The uninterrupted run: its final weights and optimizer steps per epoch."""
    tmp = tmp_path_factory.mktemp("reference")
    rc, out = _train(hosts, tmp, "ckpt", data)
    assert rc == 0, out[-3000:]
    steps = _steps(tmp / "ckpt")
    assert steps[-1] % EPOCHS == 0 and steps[-1] >= 8 * EPOCHS, steps
    return {"weights": _final_weights(tmp / "ckpt"), "per_epoch": steps[-1] // EPOCHS}


def test_rank_sigkill_restarts_resumes_and_ends_bitwise_equal(
    hosts: LocalCluster, data: str, reference: Any, tmp_path: Path
) -> None:
    """`train --max-restarts 1`, rank 1 SIGKILLed in epoch 1: the elastic agent restarts the
    ranks, they resume from the newest checkpoint, and the final weights are bitwise equal."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "train.log"
    args = [*TRAIN, "--data", data, "--checkpoint-dir", str(ckpt), "--max-restarts", "1"]
    proc = _start(hosts, log, *args)
    at = _wait_for_step(ckpt, reference["per_epoch"] + 1, proc)
    victims = _named(hosts, "gpuspark-rank1")
    assert len(victims) == 1, victims
    os.kill(victims[0], signal.SIGKILL)
    rc, out = _finish(proc, log)
    assert rc == 0, out[-3000:]
    resumed = re.search(r"resumed from \S+ at epoch (\d+), step (\d+) \(global step (\d+)\)", out)
    assert resumed is not None and ", restart 1" in out, out[-3000:]
    assert int(resumed.group(3)) >= at
    _assert_bitwise_equal(_final_weights(ckpt), reference["weights"])


def test_driver_sigkill_then_resume_ends_bitwise_equal(
    hosts: LocalCluster, data: str, reference: Any, tmp_path: Path
) -> None:
    """The driver (the `gpuspark train` process) SIGKILLed mid-epoch takes its ranks with it;
    the same command with `--resume` says where it resumed and ends bitwise equal."""
    ckpt = tmp_path / "ckpt"
    args = [*TRAIN, "--data", data, "--checkpoint-dir", str(ckpt)]
    proc = _start(hosts, tmp_path / "killed.log", *args)
    _wait_for_step(ckpt, reference["per_epoch"] + 1, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while _named(hosts, "gpuspark-rank0") + _named(hosts, "gpuspark-rank1"):
        assert time.monotonic() < deadline, "ranks outlived their driver by a minute"
        time.sleep(0.5)
    kept = _steps(ckpt)[-1]
    rc, out = _finish(
        _start(hosts, tmp_path / "resumed.log", *args, "--resume"), tmp_path / "resumed.log"
    )
    assert rc == 0, out[-3000:]
    resumed = re.search(r"resumed from \S+ at epoch (\d+), step (\d+) \(global step (\d+)\)", out)
    assert resumed is not None, out[-3000:]
    epoch, step, total = (int(g) for g in resumed.groups())
    assert total == kept and epoch * reference["per_epoch"] + step == kept
    _assert_bitwise_equal(_final_weights(ckpt), reference["weights"])


def _kill_host_of(cluster: LocalCluster, name: str) -> str:
    """SIGKILL the worker (and everything below it: executor, Python workers, agent, ranks)
    whose processes include one named ``name``, as if that machine went away; its address."""
    assert cluster.state is not None
    for worker in cluster.state.workers:
        tree = descendants([worker.pid])
        if any(comm(pid) == name for pid in tree):
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return worker.host
    raise AssertionError(f"no worker runs {name}")


def test_lost_host_is_retried_on_the_remaining_hosts(
    hosts: LocalCluster, data: str, reference: Any, tmp_path: Path
) -> None:
    """A worker host lost for good mid-training, `--max-attempts 2`: the stage is rerun on
    the two hosts left, resumes from the newest checkpoint and ends bitwise equal."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "train.log"
    args = [*TRAIN, "--data", data, "--checkpoint-dir", str(ckpt), "--max-attempts", "2"]
    proc = _start(hosts, log, *args)
    _wait_for_step(ckpt, reference["per_epoch"] + 1, proc)
    lost = _kill_host_of(hosts, "gpuspark-rank1")
    rc, out = _finish(proc, log)
    assert rc == 0, out[-3000:]
    assert f"retry 1 of 1 after: host {lost} was lost during the launch" in out, out[-3000:]
    assert re.search(r"resumed from \S+ at epoch \d+, step \d+ \(global step \d+\)", out)
    _assert_bitwise_equal(_final_weights(ckpt), reference["weights"])


def test_lost_host_without_room_for_the_retry_fails_in_one_line(
    hosts: LocalCluster, data: str, reference: Any, tmp_path: Path
) -> None:
    """Two hosts left, one lost mid-training: one GPU remains for a 2-rank stage, so the
    retry is refused in one line naming the lost host."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "train.log"
    args = [*TRAIN, "--data", data, "--checkpoint-dir", str(ckpt), "--max-attempts", "2"]
    proc = _start(hosts, log, *args)
    _wait_for_step(ckpt, 0, proc)
    lost = _kill_host_of(hosts, "gpuspark-rank1")
    rc, out = _finish(proc, log)
    assert rc == 1, out[-3000:]
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out[-3000:]
    assert errors[0].startswith(
        f"error: host {lost} was lost and the rest of the cluster cannot run the retry: "
    ), errors
