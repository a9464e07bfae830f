"""Checkpoints on object stores and ``file:`` URLs, against a real S3-protocol server.

``train --checkpoint-dir s3://bucket/run`` used to be accepted and then written through
``Path``: the checkpoints landed in a local folder named ``s3:/bucket/run`` and the user
believed the run was safe in the bucket. Now every checkpoint read and write goes through
``gpuspark.storage``: single-file and sharded (DCP) checkpoints, ``best.pt``, ``history.json``,
resume; a scheme with no installed client, a missing bucket or missing credentials is refused
before any rank starts, in one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _s3 import SECRET_KEY, S3Bucket
from gpuspark import storage
from gpuspark.train import checkpoint as ck


def _linear(seed: int) -> object:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def _same_weights(a: object, b: object) -> bool:
    import torch

    return all(
        torch.equal(x, y)
        for x, y in zip(a.parameters(), b.parameters(), strict=True)  # type: ignore[attr-defined]
    )


def test_save_list_prune_and_load_on_s3(s3: S3Bucket) -> None:
    run = f"{s3.url}/run"
    model = _linear(0)
    for step in range(1, 5):
        written = ck.save(run, model=model, epoch=0, step=step, keep=2, run_id="r1")
        assert written is not None and str(written) == f"{run}/step-{step:09d}.pt"
    assert s3.keys("run") == ["run/step-000000003.pt", "run/step-000000004.pt"]
    assert [p.name for p in ck.list_checkpoints(run)] == ["step-000000003.pt", "step-000000004.pt"]
    newest = ck.latest(run)
    assert newest is not None and str(newest) == f"{run}/step-000000004.pt"
    assert ck.run_of(newest) == "r1"
    fresh = _linear(1)
    resumed = ck.load(run, model=fresh)
    assert resumed is not None and resumed.step == 4 and _same_weights(model, fresh)
    info = ck.inspect(run)
    assert info is not None and info.step == 4 and info.run_id == "r1"


def test_a_new_run_into_an_s3_prefix_with_an_earlier_run_is_refused_then_cleared(
    s3: S3Bucket,
) -> None:
    run = f"{s3.url}/run"
    ck.save(run, model=_linear(0), epoch=0, step=1)
    storage.atomic_write_text(f"{run}/notes.txt", "mine")
    with pytest.raises(ck.CheckpointError, match="already holds an earlier training run"):
        ck.check_new_run(run, overwrite=False, what="--checkpoint-dir")
    assert ck.clear_run(run) == ["step-000000001.pt"]
    assert s3.keys("run") == ["run/notes.txt"]  # a foreign object stays


def test_sharded_checkpoint_on_s3_is_committed_by_its_meta(s3: S3Bucket) -> None:
    from gpuspark.train import sharded

    run = f"{s3.url}/fsdp"
    model = _linear(0)
    path = sharded.save(run, model=model, epoch=0, step=3)
    assert path is not None and str(path) == f"{run}/step-000000003.dcp"
    keys = s3.keys("fsdp")
    assert "fsdp/step-000000003.dcp/meta.pt" in keys and "fsdp/step-000000003.dcp/.metadata" in keys
    fresh = _linear(1)
    resumed = sharded.load(run, model=fresh)
    assert resumed is not None and resumed.step == 3 and _same_weights(model, fresh)
    # without its meta.pt (a writer killed before the commit) the prefix is no checkpoint
    storage.remove(storage.as_path(f"{run}/step-000000003.dcp/meta.pt"))
    assert ck.latest(run) is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("gs://some-bucket/run", "no client for gs:// is installed (gcsfs is missing)"),
        ("nosuch://x/run", "nosuch:// is not a known storage scheme"),
    ],
)
def test_a_scheme_without_a_client_is_refused_up_front(url: str, expected: str) -> None:
    pytest.importorskip("s3fs")
    if url.startswith("gs:"):
        try:
            import gcsfs  # noqa: F401
        except ImportError:
            pass
        else:
            pytest.skip("gcsfs is installed here")
    with pytest.raises(ck.CheckpointError, match="--checkpoint-dir") as info:
        ck.check_dir(url)
    assert expected in str(info.value)


def test_a_missing_bucket_is_one_line_before_anything_runs(s3: S3Bucket) -> None:
    with pytest.raises(ck.CheckpointError) as info:
        ck.check_dir("s3://gpuspark-no-such-bucket/run")
    assert str(info.value) == (
        "--checkpoint-dir s3://gpuspark-no-such-bucket/run: the bucket does not exist "
        "(create the bucket, or check the URL)"
    )
    ck.check_dir(f"{s3.url}/run")  # a usable prefix passes and leaves nothing behind
    assert s3.keys() == []


def test_launch_descriptions_redact_store_secrets(s3: S3Bucket, tmp_path: Path) -> None:
    from gpuspark.launch.request import build_request

    script = tmp_path / "x.py"
    script.write_text("print(1)\n")
    env = storage.credential_env()
    assert env["AWS_SECRET_ACCESS_KEY"] == SECRET_KEY
    text = build_request(str(script), (), {}, env=env, num_processes=2).materialize()
    assert SECRET_KEY not in text and "AWS_SECRET_ACCESS_KEY=*****(redacted)" in text
    assert f"AWS_ENDPOINT_URL={s3.endpoint}" in text


def test_launch_forwards_store_credentials_to_cluster_ranks_redacted(
    s3: S3Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpuspark launch SCRIPT`` on a cluster: its ranks run in executors started with their
    own environment, so the shell's store credentials go with the request (as torchrun's
    ranks inherit them), and every printed form shows the secret redacted."""
    import json

    from gpuspark.cli.main import main

    script = tmp_path / "x.py"
    script.write_text("print(1)\n")
    args = ["launch", "-n", "2", "--gpus-per-process", "0", "--master", "local[2]", "--dry-run"]
    assert main([*args, "--json", str(script)]) == 0
    out = capsys.readouterr().out
    env = json.loads(out)["env"]
    assert env["AWS_SECRET_ACCESS_KEY"] == "*****(redacted)" and env["AWS_ENDPOINT_URL"]
    assert main([*args, str(script)]) == 0
    out += capsys.readouterr().out
    assert SECRET_KEY not in out and "AWS_SECRET_ACCESS_KEY=*****(redacted)" in out


# -- through the CLI, as a user types it -------------------------------------------------------


@pytest.fixture
def tabular(tmp_path: Path) -> str:
    """A small credit-risk shard dataset (local), written by the real prep path."""
    from gpuspark.data.write import ShardWriter

    rng = np.random.default_rng(0)
    out = tmp_path / "ct"
    with ShardWriter(out) as w:
        for i in range(8):
            vol = rng.integers(0, 255, (8, 8, 8), dtype=np.uint8)
            w.write({"volume": vol, "label": i % 2}, split="train" if i % 4 else "val")
    return str(out)


def _gpuspark(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, "-m", "gpuspark.cli.main", *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _train(data: str, ckdir: str, *extra: str) -> list[str]:
    return [
        "train", "resnet3d", "--data", data, "--epochs", "1", "--batch-size", "2",
        "--width", "0.25", "--local", "--num-processes", "1", "--metrics-port", "0",
        "--checkpoint-dir", ckdir, *extra,
    ]  # fmt: skip


def _no_url_folders(top: Path) -> list[str]:
    return [str(p) for p in top.rglob("*") if p.name.endswith(":")]


def _s3_run(tabular: str, tmp_path: Path, s3: S3Bucket) -> tuple[Path, str]:
    """``train --mlflow`` reading its shards from the bucket and writing checkpoints there;
    returns the working folder and the checkpoint URL."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.put(tabular, f"{s3.url.removeprefix('s3://')}/shards", recursive=True)
    work = tmp_path / "work"
    work.mkdir()
    run = f"{s3.url}/ck/run"
    tracked = ("--mlflow", f"sqlite:///{work / 'mlflow.db'}")
    out = _gpuspark(work, *_train(f"{s3.url}/shards", run, *tracked))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    keys = s3.keys("ck/run")
    assert "ck/run/best.pt" in keys and "ck/run/history.json" in keys, keys
    assert any(k.startswith("ck/run/step-") and k.endswith(".pt") for k in keys), keys
    assert SECRET_KEY not in out.stdout + out.stderr
    assert _no_url_folders(work) == [] and _no_url_folders(tmp_path) == []
    # the planted secret is in no output, log, MLflow record (params, artifacts) or file
    leaks = [
        p for p in tmp_path.rglob("*") if p.is_file() and SECRET_KEY.encode() in p.read_bytes()
    ]
    assert leaks == [] and (work / "mlflow.db").is_file()
    return work, run


def _resume(work: Path, data: str, run: str) -> None:
    """``--resume`` to a second epoch from the newest checkpoint in ``run``."""
    first = ck.inspect(run)
    assert first is not None
    again = _gpuspark(work, *_train(data, run, "--epochs", "2", "--resume"))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert SECRET_KEY not in again.stdout + again.stderr
    resumed = ck.inspect(run)
    assert resumed is not None and resumed.epoch == first.epoch + 1


def test_train_reads_the_bucket_and_checkpoints_there(
    tabular: str, tmp_path: Path, s3: S3Bucket
) -> None:
    _s3_run(tabular, tmp_path, s3)  # a resume from the bucket: ck.load in the tests above


@pytest.mark.slow  # four training runs
def test_a_resume_from_the_bucket_has_the_local_runs_weights_bit_for_bit(
    tabular: str, tmp_path: Path, s3: S3Bucket
) -> None:
    work, run = _s3_run(tabular, tmp_path, s3)
    _resume(work, f"{s3.url}/shards", run)
    local = tmp_path / "local-ck"
    for extra in ((), ("--epochs", "2", "--resume")):
        same = _gpuspark(work, *_train(tabular, str(local), *extra))
        assert same.returncode == 0, same.stdout[-2000:] + same.stderr[-3000:]
    on_s3, on_disk = ck.latest(run), ck.latest(local)
    assert on_s3 is not None and on_disk is not None and on_s3.name == on_disk.name
    a = ck.load_payload(on_s3)["model"]
    b = ck.load_payload(on_disk)["model"]
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def test_train_file_url_checkpoints_land_in_that_folder(tabular: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = tmp_path / "abs" / "dir"
    out = _gpuspark(work, *_train(tabular, f"file://{target}"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert (target / "best.pt").is_file() and list(target.glob("step-*.pt"))
    assert _no_url_folders(work) == []


def test_train_refuses_a_scheme_without_a_client_before_any_rank(
    tabular: str, tmp_path: Path
) -> None:
    pytest.importorskip("s3fs")
    out = _gpuspark(tmp_path, *_train(tabular, "nosuch://bucket/run"))
    assert out.returncode == 1
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: --checkpoint-dir nosuch://bucket/run: nosuch:// is not a known storage scheme "
        "(use a local path, a file:// URL or s3://, gs://, abfs://, hdfs:// (docs/storage.md))"
    ], out.stderr
    assert _no_url_folders(tmp_path) == []
