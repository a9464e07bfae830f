"""Teams on URL roots: with ``[storage] root = "s3://bucket/data"``, a job of team radiology
writing under team vision's root (``s3://bucket/data/teams/vision``, also spelled ``s3a://``)
is refused in one line before anything starts: before a session, a cluster, a rank, and
before the write probe that would need the store's credentials."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuspark.spec.example import example_spec


def _spec(tmp_path: Path) -> Path:
    text = example_spec().replace(
        'root = "hdfs://namenode:8020/gpuspark"', 'root = "s3://bucket/data"'
    )
    text = text.replace('members = ["alice", "bob"]', f'members = ["{getpass.getuser()}"]')
    assert 'root = "s3://bucket/data"' in text
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


def _gpuspark(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "gpuspark.cli.main", *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "command",
    [
        ["prep", "dicom", ".", "s3a://bucket/data/teams/vision/ds"],
        [
            "train",
            "resnet3d",
            "--data",
            "ds",
            "--local",
            "-n",
            "1",
            "--checkpoint-dir",
            "s3://bucket/data/teams/vision/run",
        ],
    ],
    ids=["prep", "train"],
)
def test_another_teams_url_root_is_refused_before_anything(
    command: list[str], tmp_path: Path
) -> None:
    spec = _spec(tmp_path)
    out = _gpuspark(tmp_path, *command, "--spec", str(spec), "--team", "radiology")
    assert out.returncode == 1, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: team radiology may not write s3")
    assert "it is in team vision's root (s3://bucket/data/teams/vision)" in lines[0]
    assert "Traceback" not in out.stderr
