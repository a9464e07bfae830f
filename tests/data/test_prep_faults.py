"""`gpuspark prep dicom` on a two-host embedded cluster while an executor JVM is SIGKILLed at
a random moment of the header phase or of the series+write phase, over several trials: every
input ends in a record or in quarantine, no record twice, and the dataset verifies.

The moment is found by watching the job: an executor running and no shard staged yet (the
header phase, plus a seeded random 0-2 s), or the first shard file in the write's staging
directory (series+write). Every trial must have lost an executor (Spark's driver says so).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _cluster import hosts_cluster  # tests/_cluster.py
from _proc import comm, descendants  # tests/_proc.py
from _s3 import S3Bucket  # tests/_s3.py
from gpuspark.cluster.local import LocalCluster
from gpuspark.data import format as fmt
from gpuspark.data.write.commit import STAGING_PREFIX
from gpuspark.demo import synth_ct

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TRIALS = 6  # alternating phases: 3 in the header phase, 3 in series+write


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """``gpuspark cluster up --hosts 2``."""
    yield from hosts_cluster(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cohort")
    synth_ct(root, studies=10, seed=5, size=24)
    junk = root / "dicom" / "junk"
    junk.mkdir()
    for i in range(3):
        (junk / f"junk-{i}.dcm").write_bytes(b"not a DICOM file")
    return root


def _prep(
    cluster: LocalCluster, cohort: Path, out: Path | str, log: Path
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GPUSPARK_STATE_DIR": str(cluster.state_dir)}
    cli = str(Path(sys.executable).with_name("gpuspark"))
    args = [cli, "prep", "dicom", str(cohort / "dicom"), str(out), "--json", "--overwrite"]
    args += ["--labels", str(cohort / "labels.csv"), "--shape", "8,16,16", "--num-shards", "4"]
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def _result(proc: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    try:
        rc = proc.wait(timeout=420)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"timed out:\n{log.read_text()[-3000:]}") from None
    text = log.read_text()
    assert rc == 0, text[-3000:]
    return json.loads(text[text.index("{\n") :])


def _series(ds: Path | str) -> list[str]:
    m = fmt.load_manifest(ds)
    return [
        fmt.decode_example(rec, m.schema)["series_uid"]
        for shard in m.shards
        for rec in fmt.iter_records(f"{ds}/{shard.path}")
    ]


def _executors(cluster: LocalCluster) -> dict[int, str]:
    """The executor JVMs (the workers' child processes): pid -> application id."""
    assert cluster.state is not None
    workers = {w.pid for w in cluster.state.workers}
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid in workers and b"--app-id" in args:
            found[int(entry.name)] = args[args.index(b"--app-id") + 1].decode()
    return found


def _staged(out: Path | str) -> bool:
    """Whether a shard is being written: a file in the write's staging directory (an object
    under its staging prefix, for a URL)."""
    if isinstance(out, str):
        return any(STAGING_PREFIX in key for key in _keys(out))
    return any(out.glob(f"{STAGING_PREFIX}*/*"))


def _keys(url: str) -> list[str]:
    """Every object under ``url`` (read afresh), relative to it."""
    import fsspec

    fs, inner = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    try:
        return sorted(k.removeprefix(inner.rstrip("/") + "/") for k in fs.find(inner))
    except FileNotFoundError:
        return []


def _kill_in(
    cluster: LocalCluster, out: Path | str, phase: str, rng: random.Random, proc: Any, old: set[str]
) -> Any:
    """SIGKILL one executor (chosen by ``rng``) while the job is in ``phase``: headers (an
    executor runs Python tasks, no shard staged yet; after a random 0-2 s) or series+write
    (the first shard is being staged). Executors of the applications in ``old`` (finished
    jobs, on their way out) are not candidates. Returns ``(phase seen at the kill, pid)``, or
    None if the job ended."""

    def running() -> list[int]:  # executors of this job running Python tasks
        mine = [pid for pid, app in _executors(cluster).items() if app not in old]
        return sorted(pid for pid in mine if any(comm(c) == "python" for c in descendants([pid])))

    while proc.poll() is None:
        executors, staged = running(), _staged(out)
        if phase == "headers" and executors and not staged:
            time.sleep(rng.uniform(0.0, 2.0))
        elif not (phase == "series+write" and executors and staged):
            time.sleep(0.05)
            continue
        executors = running()
        if executors:
            seen = "series+write" if _staged(out) else "headers"
            victim = rng.choice(executors)
            os.kill(victim, signal.SIGKILL)
            return seen, victim
    return None


@pytest.mark.timeout(1800)  # 7 prep runs: 60-90 s each on 2 busy cores
def test_executor_sigkill_during_prep_dicom_loses_and_duplicates_nothing(
    hosts: LocalCluster, cohort: Path, tmp_path: Path
) -> None:
    ref = _result(
        _prep(hosts, cohort, tmp_path / "ref", tmp_path / "ref.log"), tmp_path / "ref.log"
    )
    expected = sorted(_series(tmp_path / "ref"))
    assert ref["files_in_rows"] + ref["quarantined"] == ref["inputs"] and ref["quarantined"] == 3
    assert len(expected) == ref["rows"] == len(set(expected)) > 0
    rng = random.Random(18)
    kills = []
    for trial in range(TRIALS):
        phase = "headers" if trial % 2 == 0 else "series+write"
        out, log = tmp_path / f"trial-{trial}", tmp_path / f"trial-{trial}.log"
        old = set(_executors(hosts).values())
        proc = _prep(hosts, cohort, out, log)
        killed = _kill_in(hosts, out, phase, rng, proc, old)
        res = _result(proc, log)
        kills.append((trial, phase, killed))
        assert res["inputs"] == ref["inputs"] and res["quarantined"] == ref["quarantined"]
        assert res["files_in_rows"] + res["quarantined"] == res["inputs"], res
        series = _series(out)
        assert sorted(series) == expected, f"trial {trial}: lost or duplicated records"
        assert fmt.verify_dataset(out) == []
        assert "Lost executor" in log.read_text(), f"trial {trial}: no executor lost: {killed}"
    print("kills (trial, phase asked, (phase seen, executor pid)):", kills)
    seen = [k[2][0] for k in kills if k[2] is not None]
    assert len(seen) == TRIALS and set(seen) == {"headers", "series+write"}, kills


@pytest.mark.timeout(1200)
def test_executor_sigkill_during_prep_dicom_to_s3_leaves_no_partial_dataset(
    hosts: LocalCluster, cohort: Path, tmp_path: Path, s3: S3Bucket
) -> None:
    """The same kill while shards are staged in a bucket (moto's S3 server): nothing is
    visible before the manifest, the records are exactly the reference's, and after the
    commit the prefix holds the manifest's objects only (no staging, no orphans)."""
    ref = _result(
        _prep(hosts, cohort, tmp_path / "ref", tmp_path / "ref.log"), tmp_path / "ref.log"
    )
    expected = sorted(_series(tmp_path / "ref"))
    rng = random.Random(7)
    for trial in range(2):
        out, log = f"{s3.url}/trial-{trial}", tmp_path / f"s3-{trial}.log"
        old = set(_executors(hosts).values())
        proc = _prep(hosts, cohort, out, log)
        killed = _kill_in(hosts, out, "series+write", rng, proc, old)
        assert killed is not None and killed[0] == "series+write", killed
        assert "manifest.json" not in _keys(out)  # staged shards are no dataset
        res = _result(proc, log)
        assert res["rows"] == ref["rows"] and res["quarantined"] == ref["quarantined"]
        assert sorted(_series(out)) == expected, f"trial {trial}: lost or duplicated records"
        assert "Lost executor" in log.read_text()
        m = fmt.load_manifest(out)
        owned = {p for s in m.shards for p in (s.path, s.index)} | set(m.extra["files"].values())
        assert set(_keys(out)) == owned | {"manifest.json"}, _keys(out)
