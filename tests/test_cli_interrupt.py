"""Ctrl-C, SIGTERM or SIGHUP during a Spark-backed command: one ``interrupted:`` line, exit
code 128 + the signal's number (130 for Ctrl-C), nothing left.

The unit tests raise the interrupt (or a py4j error during the teardown it causes) inside a
command; the ``spark`` tests send a real signal to ``gpuspark prep ...`` while it runs on an
embedded cluster started for the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from _proc import descendants  # tests/_proc.py
from gpuspark.cli.main import main

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _prep_raising(exc: BaseException) -> Any:
    def prep_images(*_a: Any, progress: Any = None, **_kw: Any) -> Any:
        raise exc

    return prep_images


def test_keyboard_interrupt_is_one_line_and_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import gpuspark.data.prep as prep

    monkeypatch.setattr(prep, "prep_images", _prep_raising(KeyboardInterrupt()))
    assert main(["-v", "prep", "images", str(tmp_path), str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err
    line = "interrupted: prep images stopped; nothing was written; the old dataset, if any, "
    assert line + "is unchanged" in err and "Traceback" not in err and "aborted" not in err


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_a_command_as_ctrl_c_does(
    sig: int,
    code: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """The signal raises where the command is, so its ``finally`` runs; one line naming the
    signal, exit code 128 + its number; Python's default handler again after the command."""
    import gpuspark.data.prep as prep

    cleaned: list[bool] = []

    def prep_images(*_a: Any, **_kw: Any) -> Any:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(10)  # the handler raises before this ends
        finally:
            cleaned.append(True)

    monkeypatch.setattr(prep, "prep_images", prep_images)
    old = signal.signal(sig, signal.SIG_DFL)
    try:
        assert main(["prep", "images", str(tmp_path), str(tmp_path / "out")]) == code
        assert signal.getsignal(sig) is signal.SIG_DFL
    finally:
        signal.signal(sig, old)
    err = capsys.readouterr().err
    name = signal.Signals(sig).name
    assert f"interrupted by {name}: prep images stopped; nothing was written" in err, err
    assert cleaned == [True] and "Traceback" not in err


def test_py4j_error_raised_while_interrupted_counts_as_the_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from py4j.protocol import Py4JError, Py4JNetworkError

    import gpuspark.data.prep as prep

    def torn_down() -> BaseException:
        try:
            try:
                raise KeyboardInterrupt
            finally:  # e.g. spark.stop() in job_session while the JVM goes away
                raise Py4JNetworkError("Answer from Java side is empty")
        except Py4JError as exc:
            return exc

    monkeypatch.setattr(prep, "prep_images", _prep_raising(torn_down()))
    assert main(["prep", "images", str(tmp_path), str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err
    assert "interrupted: prep images stopped" in err and "py4j" not in err.lower()
    # A py4j error that no Ctrl-C caused is not called an interrupt.
    monkeypatch.setattr(prep, "prep_images", _prep_raising(Py4JError("boom")))
    with pytest.raises(Py4JError, match="boom"):
        main(["prep", "images", str(tmp_path), str(tmp_path / "out")])


class _Output:
    """Collects a process's merged output on a thread, so the test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.text = ""
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.text += line

    def wait_for(self, needle: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self._proc.poll() is None:
            if needle in self.text:
                return True
            time.sleep(0.2)
        return needle in self.text

    def close(self) -> str:
        self._thread.join(timeout=10)
        return self.text


def _alive(pid: int) -> bool:
    """Running; a zombie is not (in a container whose PID 1 does not reap orphans, a stopped
    JVM of the CLI's cluster can stay a zombie after the CLI exited)."""
    from gpuspark._util.procs import pid_alive

    return pid_alive(pid)


def _prep_source(tmp_path: Path, kind: str) -> list[str]:
    """The source of ``prep KIND`` and the command's options."""
    if kind == "images":
        from gpuspark.demo import synth_images

        synth_images(tmp_path / "src", classes=3, per_class=60, seed=0)
        return [str(tmp_path / "src"), "--predecode", "--size", "96"]
    from gpuspark.demo import pydoc_text

    pydoc_text(tmp_path / "src")
    return [str(tmp_path / "src")]


def _cli(tmp_path: Path, *args: str, **more_env: str) -> subprocess.Popen[str]:
    """``gpuspark ARGS`` in its own session (a terminal's Ctrl-C goes to the foreground process
    group), with a private state, log dir and home, and ``more_env``."""
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "GPUSPARK_STATE_DIR": str(tmp_path / "state"),
        "GPUSPARK_LOG_DIR": str(tmp_path / "logs"),
        "HOME": str(tmp_path / "home"),
        "COLUMNS": "200",
        **more_env,
    }
    env.pop("GPUSPARK_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gpuspark.cli.main", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _signal_group(
    proc: subprocess.Popen[str], out: _Output, sig: int = signal.SIGINT, timeout: float = 60
) -> tuple[int, str]:
    """``sig`` to the command's process group (Ctrl-C, a terminal's hang-up and GNU
    ``timeout`` signal so); its exit code and whole output."""
    try:
        assert proc.poll() is None, out.text
        os.killpg(proc.pid, sig)
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return rc, out.close()


def _quiet(text: str, *noise: str) -> None:
    for word in ("Traceback", "py4j", "Exception ignored", "\tat ", *noise):
        assert word not in text, (word, text)


@pytest.mark.spark
@pytest.mark.slow  # a fresh cluster per command (about 30 s); the unit tests run by default
@pytest.mark.parametrize("kind", ["images", "text"])
def test_sigint_during_prep_stops_cleanly(tmp_path: Path, kind: str) -> None:
    args = _prep_source(tmp_path, kind)
    state, dst = tmp_path / "state", tmp_path / "dst"
    proc = _cli(tmp_path, "prep", kind, args[0], str(dst), *args[1:])
    out = _Output(proc)
    try:
        assert out.wait_for("embedded cluster up", 180), out.text
        pids = [*_cluster_pids(state / "cluster.json")]
        out.wait_for("Spark driver log", 60)  # logged once the session is up
        time.sleep(3)  # the listing job runs
    finally:
        rc, text = _signal_group(proc, out)
    assert rc == 130, text
    assert f"interrupted: prep {kind} stopped; nothing was written" in text, text
    _quiet(text)
    assert not [ln for ln in text.splitlines() if ln.startswith("done ")], text  # the bar
    assert not (dst / "manifest.json").exists()
    assert not (state / "cluster.json").exists(), text
    assert pids and not [p for p in pids if _alive(p)]


def _cluster_pids(path: Path) -> list[int]:
    for _ in range(50):
        if path.exists():
            data = json.loads(path.read_text())
            return [data["master_pid"], *(w["pid"] for w in data["workers"])]
        time.sleep(0.2)
    return []


def _risk_table(folder: Path, parts: int = 4, rows: int = 50_000) -> Path:
    """A small Parquet table (written by pyarrow: no Spark) that ``prep parquet`` reads."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for part in range(parts):
        ids = np.arange(part * rows, (part + 1) * rows)
        table = {"id": ids, "a": rng.normal(size=rows), "b": rng.normal(size=rows)}
        table["label"] = rng.integers(0, 2, rows)
        pq.write_table(pa.table(table), folder / f"part-{part}.parquet")
    return folder


def _wait_until(what: Any, proc: subprocess.Popen[str], out: _Output, timeout: float) -> Any:
    """``what()`` once it is true, polled while the command runs; a failure after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not reached in {timeout:.0f} s (exit {proc.poll()}):\n{out.text}")


def _cluster_up(state: Path) -> list[int] | None:
    """Master and worker pids once the state file records every worker of the cluster and
    the master answers that all of them registered (else ``None``)."""
    from gpuspark.cluster.local import LocalCluster

    cluster = LocalCluster.running(state)
    if cluster is None or cluster.state is None or cluster.shape is None:
        return None
    workers = cluster.state.workers
    info = cluster.master_json(timeout=1.0) or {}
    alive = [w for w in info.get("workers", []) if w.get("state") == "ALIVE"]
    if len(workers) < cluster.shape.workers or len(alive) < len(workers):
        return None
    return [cluster.state.master_pid, *(w.pid for w in workers)]


@pytest.mark.spark
@pytest.mark.slow  # a fresh cluster per signal (1 to 3 minutes on 2 busy cores)
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
def test_signal_during_prep_stops_the_cluster_it_started(tmp_path: Path, sig: int) -> None:
    """``timeout 20 gpuspark prep parquet risk/ risk/sub`` left the embedded cluster it had
    started ALIVE and ``_gpuspark_staging-*`` behind. Each signal, sent to the command's
    process group (the driver JVM gets it too) while the job writes into its staging folder,
    ends it with one line and exit code 128 + the signal's number, and leaves no master,
    worker or executor, no state file, no staging folder, no Spark or Python temp file."""
    src, dst, state = _risk_table(tmp_path / "risk"), tmp_path / "out", tmp_path / "state"
    spark_tmp, py_tmp = tmp_path / "spark-tmp", tmp_path / "tmp"
    spark_tmp.mkdir()
    py_tmp.mkdir()
    args = ["prep", "parquet", str(src), str(dst), "--label", "label"]
    proc = _cli(tmp_path, *args, SPARK_LOCAL_DIRS=str(spark_tmp), TMPDIR=str(py_tmp))
    out = _Output(proc)
    try:
        pids = _wait_until(lambda: _cluster_up(state), proc, out, 240)
        _wait_until(lambda: next(dst.glob("_gpuspark_staging-*/p*"), None), proc, out, 240)
        cluster = descendants(pids)  # the executors and their Python workers too
    finally:
        rc, text = _signal_group(proc, out, sig, timeout=120)
    name = "" if sig == signal.SIGINT else f" by {signal.Signals(sig).name}"
    assert rc == 128 + sig, text
    assert f"interrupted{name}: prep parquet stopped; nothing was written" in text, text
    # A quiet output is not asserted: a SparkContext stopped in the middle of the write, by
    # any of the three signals, often has Spark print a RejectedExecutionException trace on
    # stderr (a Scala future's reporter, past log4j). test_sigint_during_prep_stops_cleanly
    # checks quiet for an interrupt during the listing.
    assert not [p for p in cluster if _alive(p)], text
    assert not (state / "cluster.json").exists(), text
    assert not dst.exists()  # its staging folder went, then the folder the job had made
    assert not list(spark_tmp.iterdir()) and not list(py_tmp.iterdir())
    assert sorted(p.name for p in src.iterdir()) == [f"part-{i}.parquet" for i in range(4)]


@pytest.mark.spark
@pytest.mark.slow
def test_sigterm_leaves_the_cluster_the_user_started(tmp_path: Path) -> None:
    """A job stops only what it started: on SIGTERM its staging folder goes, but a cluster
    that was running before it (``gpuspark cluster up``) keeps running."""
    from gpuspark.cluster.local import LocalCluster

    src, dst, state = _risk_table(tmp_path / "risk"), tmp_path / "out", tmp_path / "state"
    cluster = LocalCluster(state_dir=state).start()
    try:
        assert cluster.state is not None
        pids = [cluster.state.master_pid, *(w.pid for w in cluster.state.workers)]
        proc = _cli(tmp_path, "prep", "parquet", str(src), str(dst), "--label", "label")
        out = _Output(proc)
        try:
            _wait_until(lambda: next(dst.glob("_gpuspark_staging-*/p*"), None), proc, out, 240)
        finally:
            rc, text = _signal_group(proc, out, signal.SIGTERM, timeout=120)
        assert rc == 143 and "interrupted by SIGTERM: prep parquet stopped" in text, text
        assert "no embedded cluster running" not in text, text  # it used the running one
        assert all(_alive(p) for p in pids) and LocalCluster.running(state) is not None
        assert not dst.exists()
    finally:
        cluster.stop()


@pytest.mark.parametrize("written", [False, True])
def test_train_interrupt_says_which_checkpoints_exist(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    written: bool,
) -> None:
    """Ctrl-C before the first checkpoint says none was written; after, names the newest."""
    from gpuspark.train import recipes

    ck = tmp_path / "ck"

    def interrupted(*_a: Any, **_kw: Any) -> Any:
        if written:
            ck.mkdir(exist_ok=True)
            (ck / "step-000000004.pt").write_bytes(b"")
            (ck / "step-000000008.pt").write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setattr(recipes, "run", interrupted)
    argv = ["train", "tabular", "--data", str(tmp_path), "--checkpoint-dir", str(ck)]
    assert main(argv) == 130
    err = capsys.readouterr().err
    if written:
        assert f"checkpoints in {ck} are kept (--resume continues from step-000000008.pt)" in err
    else:
        assert f"no checkpoint was written to {ck} yet" in err and "kept" not in err
    assert main(["train", "tabular", "--data", str(tmp_path)]) == 130
    assert "no checkpoints were written (no --checkpoint-dir)" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_sigint_during_train_on_spark_is_one_line(tmp_path: Path) -> None:
    """Ctrl-C while the ranks train on Spark: the ``interrupted:`` line naming the newest
    checkpoint, no Python or Java stack trace, no "Exception ignored", the cluster gone."""
    import numpy as np

    from gpuspark.data.write import ShardWriter

    rng = np.random.default_rng(0)
    with ShardWriter(tmp_path / "ct") as w:
        for i in range(16):
            vol = rng.integers(0, 255, (8, 8, 8), dtype=np.uint8)
            w.write({"volume": vol, "label": i % 2}, split="train" if i % 4 else "val")
    ck = tmp_path / "ck"
    args = ["--data", str(tmp_path / "ct"), "-n", "2", "--epochs", "500", "--batch-size", "4"]
    args += ["--depth", "10", "--checkpoint-dir", str(ck), "--metrics-port", "0"]
    proc = _cli(tmp_path, "train", "resnet3d", *args)
    out = _Output(proc)
    try:
        assert out.wait_for("[rank 0] epoch 1:", 240), out.text
    finally:
        rc, text = _signal_group(proc, out, timeout=90)
    assert rc == 130, text
    assert f"interrupted: train stopped; checkpoints in {ck} are kept" in text, text
    _quiet(text, "ERROR")
    assert not (tmp_path / "state" / "cluster.json").exists(), text
