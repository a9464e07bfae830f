"""The one submit path (``gpuspark.cluster.submit``): a job reads its spec file once, checks
its team once, and a dry run fails where the run would.

Reads are counted on the real file: ``Path.read_text`` and ``open`` of the spec's path are
wrapped in the process that runs the command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.spec import example_spec

ROOT = Path(__file__).resolve().parents[2]

_COUNTING = """
import builtins, pathlib, sys
spec = {spec!r}
reads = [0]
read_text, open_ = pathlib.Path.read_text, builtins.open
def counted(path):
    if str(path) == spec:
        reads[0] += 1
def read_text_counted(self, *a, **k):
    counted(self)
    return read_text(self, *a, **k)
def open_counted(file, *a, **k):
    counted(file)
    return open_(file, *a, **k)
pathlib.Path.read_text = read_text_counted
builtins.open = open_counted
from gpuspark.cli.main import main
code = main({args!r})
print("SPEC_READS", reads[0], file=sys.stderr)
sys.exit(code)
"""


def _spec(tmp_path: Path) -> Path:
    """The example spec on the embedded cluster (it is never started: ``--local``)."""
    text = example_spec().replace('master = "spark://dgx01:7077"', 'master = "local-cluster"')
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(
        "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
    )
    return script


def _reads(args: list[str], spec: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    code = _COUNTING.format(spec=str(spec), args=args)
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    out = subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("SPEC_READS")][-1]
    return int(line.split()[1]), out.stdout


def test_launch_reads_the_spec_file_once(tmp_path: Path) -> None:
    spec, script = _spec(tmp_path), _script(tmp_path)
    args = ["launch", "-n", "2", "--local", "--gpus-per-process", "0"]
    args += ["--team", "vision", "--metrics-port", "0"]
    user = {"USER": "carol", "LOGNAME": "carol"}
    reads, out = _reads([*args, "--spec", str(spec), str(script)], spec, user)
    assert reads == 1
    assert "rank 0 of 2" in out and "rank 1 of 2" in out
    # the spec named by $GPUSPARK_SPEC: read once too
    reads, _ = _reads([*args, str(script)], spec, {**user, "GPUSPARK_SPEC": str(spec)})
    assert reads == 1


@pytest.mark.spark
@pytest.mark.slow  # ~70 s: a real launch; the default run covers the same path in parts below
def test_launch_on_spark_reads_the_spec_file_once(
    tmp_path: Path, local_cluster: Any, spark_factory: Any
) -> None:
    """``gpuspark launch -n 2 train.py`` on a standalone cluster (the tests' shared one): the
    driver reads the spec once, though the team, the session and the ranks' metrics settings
    all come from it."""
    spark_factory.stop()  # the shared session holds every core: the cluster to this launch
    spec, script = _spec(tmp_path), _script(tmp_path)
    args = ["launch", "-n", "2", "--master", local_cluster.master_url]
    args += ["--team", "vision", "--spec", str(spec), str(script)]
    state = str(local_cluster.state_dir)  # the master is known as the embedded cluster
    env = {"USER": "carol", "LOGNAME": "carol", "GPUSPARK_STATE_DIR": state}
    reads, out = _reads(args, spec, env)
    assert reads == 1
    assert "rank 0 of 2" in out and "rank 1 of 2" in out


def test_dry_run_reads_once_and_refuses_what_the_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, script = _spec(tmp_path), _script(tmp_path)
    monkeypatch.setattr("getpass.getuser", lambda: "carol")
    reads, out = _reads(
        ["launch", "-n", "2", "--team", "vision", "--dry-run", "--spec", str(spec), str(script)],
        spec,
        {"USER": "carol", "LOGNAME": "carol"},
    )
    assert reads == 1
    assert str(script) in out  # the plan printed
    # vision may hold 12 GPUs: 16 ranks of 1 GPU are refused in the dry run as in the run
    args = ["launch", "-n", "16", "--team", "vision", "--dry-run"]
    assert main([*args, "--spec", str(spec), str(script)]) == 1
    err = capsys.readouterr().err
    assert "asks 16 GPUs but team 'vision' may hold at most 12" in err
    assert len(err.strip().splitlines()) == 1


def test_the_session_gets_the_spec_object_not_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After :func:`prepare_job` nothing reads the spec again: the session is given the
    object (the session itself is not started here)."""
    from gpuspark.cluster import submit
    from gpuspark.spec import ClusterSpec

    seen: list[dict[str, Any]] = []

    class _Stop(Exception):
        pass

    def fake_session(**kwargs: Any) -> Any:
        seen.append(kwargs)
        raise _Stop

    monkeypatch.setattr(submit, "job_session", fake_session)
    monkeypatch.setattr("getpass.getuser", lambda: "carol")
    job = submit.prepare_job("training", spec=_spec(tmp_path), app_name="x", gpus=2)
    assert job.team == "vision" and job.app_name == "x [team=vision]"
    assert job.conf["spark.gpuspark.team"] == "vision"
    with pytest.raises(_Stop), job.session():
        pass
    assert isinstance(seen[0]["spec"], ClusterSpec) and seen[0]["spec"] is job.spec
    assert seen[0]["reuse_active"] is False  # a named spec never runs on another session
