"""``gpuspark doctor logs`` on Spark driver logs (issue: hardening, cases 3 and 21).

The logs under ``logs/driver/`` are gpuspark's own driver logs of provoked failures on the
embedded cluster (Spark 4.3.0, see ``logs/README.md``); ``test_provoked.py`` provokes the same
failures live. Also: INFO lines and log4j configuration text are never error lines, a FIFO or
a device is refused without being opened, and a large log is read fast.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spark_logs import write_driver_log  # tests/doctor/spark_logs.py
from typer.testing import CliRunner

from gpuspark.cli.main import app, main
from gpuspark.doctor import logfiles
from gpuspark.doctor.catalogue import load_catalogue
from gpuspark.doctor.logs import _texts, diagnose, diagnose_text

DRIVER = Path(__file__).parent / "logs" / "driver"
CATALOGUE = load_catalogue()


def _cli(*args: str) -> dict:
    result = CliRunner().invoke(app, ["doctor", "logs", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _found(data: dict) -> dict[str, dict]:
    return {f["id"]: f for f in data["findings"]}


@pytest.mark.parametrize(
    ("name", "entry", "values"),
    [
        ("launch-rank-raises", "gpuspark-rank-failed",
         {"rank": "1", "error": "ValueError: bad batch from shard 7"}),
        ("launch-rank-never-joins", "torch-rank-never-joined", {"missing": "1"}),
        ("executor-lost-barrier", "spark-executor-lost", {"executor": "1", "host": "127.0.0.1"}),
        ("executor-lost-barrier", "spark-executor-lost-failure", {"executor": "1"}),
        ("executor-lost-barrier", "spark-barrier-stage-failed", {"stage": "0", "partition": "1"}),
        ("task-retries", "spark-task-retries-exhausted", {"attempts": "4"}),
        ("job-cancelled", "spark-job-cancelled", {"group": "nightly-etl"}),
    ],
)  # fmt: skip
def test_a_real_driver_log_names_its_failure(name: str, entry: str, values: dict) -> None:
    data = _cli(str(DRIVER / f"driver-{name}.log"))
    assert data["known"], data["error_lines"]
    finding = _found(data)[entry]
    assert {k: finding["values"].get(k) for k in values} == values


def test_a_launch_whose_rank_never_joined_blames_that_rank() -> None:
    data = _cli(str(DRIVER / "driver-launch-rank-never-joins.log"))
    assert [f["id"] for f in data["findings"]] == ["torch-rank-never-joined"]
    finding = data["findings"][0]
    assert finding["cause"].startswith("rank 1 never joined the process group")
    assert "fix the error in the training code" not in " ".join(finding["fix"])


def test_a_folder_of_driver_logs_and_their_log4j_files() -> None:
    result = CliRunner().invoke(app, ["doctor", "logs", str(DRIVER)])
    assert result.exit_code == 0, result.output
    assert "no known problem" not in result.output
    data = _cli(str(DRIVER))
    assert {f["id"] for f in data["findings"]} >= {
        "gpuspark-rank-failed", "torch-rank-never-joined", "spark-executor-lost",
        "spark-barrier-stage-failed", "spark-task-retries-exhausted", "spark-job-cancelled",
    }  # fmt: skip
    assert not any(e["file"].endswith(".properties") for e in data["error_lines"])
    assert not any(" INFO " in e["text"] for e in data["error_lines"]), data["error_lines"]


def test_an_info_line_is_never_the_last_error_line(tmp_path: Path) -> None:
    """The driver log of a failed launch as it was before the launcher wrote its error there:
    Spark's lines only, the last with "failed" in it an INFO line."""
    lines = (DRIVER / "driver-launch-rank-raises.log").read_text().splitlines(keepends=True)
    spark_only = lines[: next(i for i, ln in enumerate(lines) if " WARN gpuspark: " in ln)]
    assert any("INFO DAGScheduler: failed: HashSet()" in ln for ln in spark_only)
    log = tmp_path / "driver.log"
    log.write_text("".join(spark_only))
    result = CliRunner().invoke(app, ["doctor", "logs", str(log)])
    assert result.exit_code == 0, result.output
    assert "no known problem found" in result.output
    assert "HashSet" not in result.output and "no error lines either" in result.output


@pytest.mark.parametrize(
    ("level", "shown"), [("INFO", False), ("DEBUG", False), ("WARN", True), ("ERROR", True)]
)
def test_structured_log_records_below_warn_are_not_error_lines(
    tmp_path: Path, level: str, shown: bool
) -> None:
    """Spark's JSON layout (spark.log.structuredLogging.enabled) carries the level as a key."""
    record = {"ts": "2026-12-02T12:36:13.000Z", "level": level,
              "msg": "Job 1 failed: collect at train.py:12", "logger": "DAGScheduler"}  # fmt: skip
    log = tmp_path / "driver.json.log"
    log.write_text(json.dumps(record) + "\n")
    assert bool(diagnose([log]).error_lines) == shown


def test_log4j_configuration_text_is_not_an_error_line(tmp_path: Path) -> None:
    config = (DRIVER / "driver-launch-rank-raises.log4j2.properties").read_text()
    assert "level = error" in config  # the lines that looked like errors
    log = tmp_path / "driver.log"
    log.write_text(config + "26/12/02 12:53:12 WARN gpuspark: the barrier stage failed in Spark\n")
    diag = diagnose([log])
    assert [e.line for e in diag.error_lines] == [len(config.splitlines()) + 1]
    assert not diagnose([DRIVER / "driver-launch-rank-raises.log4j2.properties"]).error_lines


def test_a_jvm_crash_report_in_comment_lines_is_still_an_error(tmp_path: Path) -> None:
    log = tmp_path / "executor.log"
    log.write_text(
        "#\n# A fatal error has been detected by the Java Runtime Environment:\n#\n"
        "#  SIGSEGV (0xb) at pc=0x00007f3c2d1e2b40, pid=4711, tid=4712\n#\n"
        "---------------  S U M M A R Y ------------\n"
    )
    assert [e.line for e in diagnose([log]).error_lines] == [2]


def test_a_rank_that_hosts_the_store_and_waits_is_not_named() -> None:
    """torch's own rendezvous (rank 0 hosts the TCPStore; rank 2 never came): rank 0 waits for
    clients, rank 1 waits for rank 0's address. Rank 0 is not the missing one. (Messages of
    torch 2.13, captured from such a run.)"""
    text = (
        "[rank1]: torch.distributed.DistStoreError: wait timeout after 3000ms, "
        "keys: /default_pg/0//cpu//0/0\n"
        "[rank0]: torch.distributed.DistStoreError: Timed out after 4 seconds waiting for "
        "clients. 2/3 clients joined.\n"
    )
    diag = diagnose_text(text)
    assert diag.ids() == ["torch-store-clients-missing"]
    assert "only 2 of 3 processes" in diag.findings[0].cause


# ---------------------------------------------------------------------------- not a file


def _doctor_logs(*paths: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gpuspark.cli.main", "doctor", "logs", *paths]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_fifo_is_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "driver.log"
    os.mkfifo(fifo)  # opening it would block (nobody writes to it): a process of its own
    done = _doctor_logs(str(fifo))
    assert done.returncode == 1, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and f"{fifo} is not a regular file (a FIFO)" in err, err


def test_a_device_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "logs", "/dev/zero"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "/dev/zero is not a regular file (a character device)" in err
    assert "no such log file" not in err


def test_a_fifo_in_a_directory_is_skipped(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "driver.log").write_text(CATALOGUE.entry("spark-executor-lost").example + "\n")
    diag = diagnose([tmp_path])
    assert diag.ids() == ["spark-executor-lost"] and diag.skipped == [str(tmp_path / "pipe")]


# ---------------------------------------------------------------------------- speed


def test_a_large_driver_log_is_read_fast(tmp_path: Path) -> None:
    """50 MB took 21 s (2.4 MB/s) when every pattern ran on every line; CPU time, not wall
    time, so that other work on the machine does not fail it."""
    log = tmp_path / "driver.log"
    write_driver_log(log, 16_000_000)
    start = time.process_time()
    diag = diagnose([log])
    seconds = time.process_time() - start
    assert diag.lines > 100_000 and diag.error_lines
    assert log.stat().st_size / seconds > 20e6, f"{log.stat().st_size / seconds / 1e6:.1f} MB/s"


def _every_line(path: Path) -> list[tuple[str, int]]:
    """What matching every text of every line with every entry finds (the slow reference)."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        for text in _texts(line):
            ids = {e.id for e in CATALOGUE.entries if e.pattern.search(text)}
            out += [
                (e.id, n)
                for e in CATALOGUE.entries
                if e.network is None and e.id in ids and not ids.intersection(e.superseded_by)
            ]
    return out


def test_the_fast_path_finds_what_every_line_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every entry's example, as a line and inside a JSON record, spread over a driver log read
    in small blocks (lines across block ends): the same findings as the slow reference."""
    monkeypatch.setattr(logfiles, "BLOCK", 4096)
    base = tmp_path / "base.log"
    write_driver_log(base, 300_000, seed=3)
    lines = base.read_text().splitlines()
    rng = random.Random(7)
    for e in CATALOGUE.entries:
        for ex in e.example.splitlines():
            lines.insert(rng.randrange(len(lines)), ex)
            record = {"Event": "SparkListenerTaskEnd", "Task End Reason": {"Reason": ex}}
            lines.insert(rng.randrange(len(lines)), json.dumps(record))
    log = tmp_path / "driver.log"
    log.write_text("\n".join(lines))  # no newline after the last line
    found = [(f.entry.id, f.line) for f in diagnose([log], every=True).findings]
    assert sorted(found) == sorted(_every_line(log))


def _tail(paths: list[Path]) -> list[tuple[str, int, str]]:
    return [(Path(e.file).name, e.line, e.text) for e in diagnose(paths).error_lines]


def test_the_error_tail_read_from_the_end_is_the_tail_of_the_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from the files' ends in small pieces, gzipped, over two files, without a last
    newline: the same last error lines as reading everything."""
    import gzip

    from gpuspark.doctor import logs

    first, second = tmp_path / "a.log", tmp_path / "b.log"
    write_driver_log(first, 200_000, seed=5)
    second.write_text("26/12/02 14:00:00 INFO DAGScheduler: failed: HashSet()\nTraceback: one")
    monkeypatch.setattr(logs, "_TAIL_SPAN", 1 << 30)
    whole = _tail([first, second])
    assert len(whole) == logs.ERROR_TAIL and whole[-1] == ("b.log", 2, "Traceback: one")
    monkeypatch.setattr(logs, "_TAIL_SPAN", 64)
    assert _tail([first, second]) == whole
    packed = tmp_path / "a.log.gz"
    with gzip.open(packed, "wb") as fh:
        fh.write(first.read_bytes())
    assert [t[1:] for t in _tail([packed])] == [t[1:] for t in _tail([first])]
