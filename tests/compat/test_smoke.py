"""The compatibility smoke run (``make test-compat``): gpuspark's main paths on the lowest
pyspark it supports, in its own virtual environment (``.venv-compat``).

- the README quickstart, run exactly as written (the blocks and checks of
  ``tests/test_readme_commands.py``), its wall time recorded; where the installed pyspark
  ships a Spark Connect server (4.x), then its continuation through Spark Connect (untimed);
- on one embedded cluster with a team: ``prep dicom`` on a small synthetic cohort, a 2-rank
  ``train``, ``from_dataframe`` read back over 2 ranks, ``quota status`` while that
  application holds its executors.

Marked ``compat``: the default run deselects them (and the README test's quickstart, marked
slow there); ``make test-compat``, which CI runs, selects them on 3.5 and, for the quickstart
only, on the main environment's 4.x. With ``GPUSPARK_COMPAT_RESULTS`` set, the
quickstart's time is merged into that JSON file under the installed pyspark version;
``GPUSPARK_COMPAT_PYSPARK`` names the version the run must find installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from _quickstart_times import record_quickstart  # tests/_quickstart_times.py
from gpuspark._util import spark_compat
from gpuspark.spec import default_spec_text

pytestmark = [pytest.mark.compat, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = "Quickstart on this machine"
STEP_TIMEOUT_S = 600


def _readme_tests() -> ModuleType:
    """``tests/test_readme_commands.py``: its README parser, runner and quickstart checks."""
    path = ROOT / "tests" / "test_readme_commands.py"
    spec = importlib.util.spec_from_file_location("_compat_readme_commands", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


README = _readme_tests()


def test_the_installed_pyspark_is_the_one_this_run_asks_for() -> None:
    version = spark_compat.installed_version()
    assert spark_compat.version_problem(version) is None, version
    wanted = os.environ.get("GPUSPARK_COMPAT_PYSPARK")
    if wanted:
        assert version == wanted, f"this environment has pyspark {version}, not {wanted}"


def _quickstart_blocks() -> tuple[list[Any], list[Any]]:
    """The README quickstart's classic blocks (timed: the 3.5-to-4.x comparison) and, where
    the installed pyspark ships a Spark Connect server, the Connect blocks that continue it
    (the section "The quickstart through Spark Connect"); on 3.5 none."""
    unit = next(u for u in README.UNITS if u.section == QUICKSTART)
    classic = unit.fast_part().blocks
    connect = [] if spark_compat.missing("connect-server") else unit.blocks[len(classic) :]
    return classic, connect


def test_readme_quickstart(tmp_path: Path) -> None:
    classic, connect = _quickstart_blocks()
    work, home, scripts = tmp_path / "work", tmp_path / "home", tmp_path / "scripts"
    for path in (work, home, scripts):
        path.mkdir()
    env = README.user_env(home)
    blocks: list[dict[str, Any]] = []
    load, start = os.getloadavg()[0], time.monotonic()
    try:
        for block in classic:
            blocks.append(README.run_checked(block, work, home, scripts, env))
        seconds = time.monotonic() - start
        for block in connect:
            README.run_checked(block, work, home, scripts, env)
    finally:
        _gpuspark("cluster down", work, env, check=False)
    record_quickstart(seconds, blocks, load)


def _team_spec(path: Path) -> Path:
    """The built-in spec (the embedded cluster) with one team, so ``quota status`` has a row."""
    team = '\n[[teams]]\nname = "vision"\nguaranteed_gpus = 2\nmax_gpus = 4\n'
    path.write_text(default_spec_text() + team)
    return path


def test_dicom_train_dataframe_and_quota_on_one_cluster(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = README.user_env(home)
    env["GPUSPARK_SPEC"] = str(_team_spec(work / "cluster.toml"))
    _gpuspark("cluster up", work, env)
    try:
        _gpuspark("datasets synth-ct ct --studies 10 --size 16", work, env)
        prep = _json(
            _gpuspark(
                "prep dicom ct/dicom ct-shards --labels ct/labels.csv --shape 8,16,16"
                " --split 0.8,0.2,0 --world-size 2 --team vision --json",
                work,
                env,
            )
        )
        assert (prep["rows"], prep["quarantined"]) == (10, 0), prep
        splits = prep["splits"]  # by patient: about 8 and 2
        assert set(splits) == {"train", "val"} and sum(splits.values()) == 10, prep
        assert splits["train"] >= 4, prep
        # One batch per rank (batch norm needs 2 or more samples in a batch).
        batch = splits["train"] // 2
        train = _json(
            _gpuspark(
                f"train resnet3d --data ct-shards --epochs 1 --batch-size {batch} --depth 10"
                " --width 0.25 --threads 1 --metrics-port 0 --checkpoint-dir ck"
                " --team vision --json",
                work,
                env,
            )
        )
        assert (train["world_size"], len(train["history"])) == (2, 1), train
        assert (work / "ck" / "best.pt").exists()
        frame = _frame_job(work, env)
        assert frame["rows"] == 600 and frame["per_rank"] == [300, 300], frame
        assert frame["distinct"] == 600 and frame["verify"] == [], frame
        assert frame["quota_rc"] == 0, frame["quota"]
        vision = next(t for t in frame["quota"]["teams"] if t["team"] == "vision")
        assert vision["gpus_in_use"] > 0 and vision["running_apps"] == 1, frame["quota"]
    finally:
        _gpuspark("cluster down", work, env, check=False)


def _frame_job(work: Path, env: dict[str, str]) -> dict[str, Any]:
    script = Path(__file__).with_name("_frame_job.py")
    argv = [sys.executable, str(script), str(work / "frames")]
    start = time.monotonic()
    proc = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
    )
    print(
        f"from_dataframe + quota status: rc {proc.returncode} in {time.monotonic() - start:.1f} s"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _gpuspark(command: str, cwd: Path, env: dict[str, str], *, check: bool = True) -> str:
    """``gpuspark COMMAND`` as a user runs it; its stdout."""
    start = time.monotonic()
    proc = subprocess.run(
        ["gpuspark", *shlex.split(command)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    )
    took = time.monotonic() - start
    print(f"$ gpuspark {command}: rc {proc.returncode} in {took:.1f} s\n{proc.stdout}")
    if check:
        assert proc.returncode == 0, f"gpuspark {command}:\n{proc.stderr[-6000:]}"
    return proc.stdout


def _json(stdout: str) -> dict[str, Any]:
    """The JSON document a ``--json`` command printed last (rank lines may come before it)."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))
