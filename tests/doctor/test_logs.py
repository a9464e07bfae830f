"""The log catalogue (gpuspark.doctor.catalogue) and its matcher (gpuspark.doctor.logs): every
entry's published excerpt, near misses, files, directories, JSON lines, the CLI, the README."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuspark.cli.main import app
from gpuspark.doctor.catalogue import (
    load_catalogue,
    parse_catalogue,
    parse_size,
)
from gpuspark.doctor.logs import diagnose, diagnose_text
from gpuspark.errors import GpusparkError

HERE = Path(__file__).parent
README = HERE.parents[1] / "README.md"
CATALOGUE = load_catalogue()


# ---------------------------------------------------------------------------- the catalogue


@pytest.mark.parametrize("entry", CATALOGUE.entries, ids=lambda e: e.id)
def test_every_entry_diagnoses_its_published_excerpt(entry) -> None:
    diag = diagnose_text(entry.example, network=entry.network)
    assert entry.id in diag.ids(), diag.ids()
    finding = diag.findings[diag.ids().index(entry.id)]
    for name, want in entry.expect.items():
        assert finding.values.get(name) == want, (name, finding.values)
    told = " ".join([finding.cause, *finding.fixes])
    assert not re.search(r"\{\w+\}", told), told  # every placeholder filled
    assert " ? " not in told and "(?)" not in told, told  # from the example's own figures


def test_the_catalogue_covers_the_issue_list() -> None:
    ids = {e.id for e in CATALOGUE.entries}
    need = {
        "yarn-queue-am-limit", "yarn-user-am-limit", "yarn-not-activated", "yarn-waiting-am",
        "yarn-cluster-empty", "yarn-physical-memory", "yarn-preempted", "spark-no-resources",
        "spark-worker-too-small", "spark-barrier-slots", "spark-barrier-dynamic-allocation",
        "spark-gpu-no-discovery-script", "spark-python-version-mismatch",
        "python-module-not-found", "nccl-watchdog-timeout", "nccl-operations-failed",
        "nccl-unhandled-system-error", "nccl-remote-error", "connection-refused",
        "nccl-ib-no-device", "nccl-socket-on-infiniband", "nccl-ib-retry-exceeded",
        "nccl-socket-timeout-env", "gloo-timeout", "gloo-peer-closed", "cuda-oom", "nvrm-xid",
        "gpuspark-rank-failed", "gpuspark-not-enough-slots", "gpuspark-dynamic-allocation",
        "gpuspark-corrupt-shard", "gpuspark-quarantine",
    }  # fmt: skip
    assert need <= ids, sorted(need - ids)


def test_a_specific_yarn_reason_supersedes_the_generic_line() -> None:
    entry = CATALOGUE.entry("yarn-queue-am-limit")
    assert diagnose_text(entry.example).ids() == ["yarn-queue-am-limit"]
    generic = CATALOGUE.entry("yarn-not-activated").example
    assert diagnose_text(generic).ids() == ["yarn-not-activated"]


def test_cuda_oom_hints_follow_the_figures() -> None:
    oom = CATALOGUE.entry("cuda-oom")
    fixes = diagnose_text(oom.example).findings[0].fixes
    assert any("expandable_segments:True" in f and "3.75 GiB" in f for f in fixes)
    assert any("pid 12345" in f and "40.00 GiB" in f for f in fixes)
    # Little reserved-but-unallocated memory and no other process: no such hints.
    line = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
        "total capacity of 79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, "
        "this process has 77.90 GiB memory in use. Of the allocated memory 77.12 GiB is "
        "allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated."
    )
    finding = diagnose_text(line).findings[0]
    assert finding.values["gpu"] == "3" and finding.values["other_pid"] is None
    assert len(finding.fixes) == 1
    assert "GPU 3 (79.15 GiB) had 1.23 GiB free when 2.00 GiB" in finding.cause


@pytest.mark.parametrize(
    ("code", "kind", "word"),
    [("79", "drain", "drain"), ("31", "application", "application"), ("48", "reset", "reset"),
     ("999", "unknown", "NVIDIA's XID catalogue")],
)  # fmt: skip
def test_xid_codes_are_explained(code: str, kind: str, word: str) -> None:
    line = f"[ 812.345] NVRM: Xid (PCI:0000:b1:00): {code}, pid=77, name=python3, Ch 00000008"
    finding = diagnose_text(line).findings[0]
    assert finding.values["xid_kind"] == kind
    assert word in " ".join(finding.fixes) or word in finding.cause


def test_socket_transport_is_a_problem_only_on_infiniband() -> None:
    line = CATALOGUE.entry("nccl-socket-on-infiniband").example
    assert diagnose_text(line, network="infiniband").ids() == ["nccl-socket-on-infiniband"]
    assert not diagnose_text(line, network="ethernet").known
    assert not diagnose_text(line).known


def test_sizes() -> None:
    assert parse_size("3.75 GiB") == 3.75 * 2**30
    assert parse_size("10 GB") == 10e9
    assert parse_size("512 B") == 512
    with pytest.raises(ValueError):
        parse_size("lots")


def _raw(**overrides) -> dict:
    base = {
        "id": "x-y",
        "title": "t",
        "source": "spark",
        "pattern": "boom (?P<n>\\d+)",
        "cause": "c",
        "fix": "f",
        "example": "boom 3",
    }
    return {"entry": [{**base, **overrides}]}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pattern": "boom ("}, "does not compile"),
        ({"example": "nothing here"}, "does not match its example"),
        ({"source": "slurm"}, "is not one of"),
        ({"id": "Bad_Id"}, "kebab-case"),
        ({"fix": ""}, "needs a non-empty 'fix'"),
        ({"hints": [{"when": "m", "text": "x"}]}, "no group for"),
        ({"superseded_by": ["nope"]}, "names no entry"),
    ],
)
def test_a_broken_entry_is_refused_by_name(overrides: dict, message: str) -> None:
    with pytest.raises(GpusparkError, match=message):
        parse_catalogue(_raw(**overrides))


def test_duplicate_ids_are_refused() -> None:
    data = _raw()
    data["entry"].append(dict(data["entry"][0]))
    with pytest.raises(GpusparkError, match="used twice"):
        parse_catalogue(data)


# ---------------------------------------------------------------------------- unknown logs


@pytest.mark.parametrize("name", ["unrelated.log", "near_miss.log"])
def test_unknown_logs_give_no_known_problem_and_the_last_error_lines(name: str) -> None:
    diag = diagnose([HERE / "logs" / name])
    assert not diag.known, diag.ids()
    assert diag.error_lines
    last = diag.error_lines[-1]
    assert last.file.endswith(name) and last.line == len(
        (HERE / "logs" / name).read_text().splitlines()
    )
    result = CliRunner().invoke(app, ["doctor", "logs", str(HERE / "logs" / name)])
    assert result.exit_code == 0, result.output
    assert "no known problem found" in result.output
    assert "last error lines:" in result.output
    assert last.text.strip()[:60] in result.output


# ---------------------------------------------------------------------------- files and dirs


def test_directories_json_lines_gzip_and_rank_files(tmp_path: Path) -> None:
    events = tmp_path / "eventlogs" / "app-20240602081540-0003"
    events.parent.mkdir()
    failure = CATALOGUE.entry("spark-barrier-slots").example
    records = [
        {"Event": "SparkListenerApplicationStart", "App Name": "train"},
        {"Event": "SparkListenerJobEnd", "Job ID": 3, "Job Result": {
            "Result": "JobFailed", "Exception": {"Message": "Job aborted", "Stack Trace": [
                {"Declaring Class": "x", "Method Name": "y"}]}}},
        {"Event": "SparkListenerStageCompleted", "Stage Info": {"Failure Reason": failure}},
    ]  # fmt: skip
    events.write_text("".join(json.dumps(r) + "\n" for r in records))
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank-3.error.json").write_text(
        json.dumps({"rank": 3, "type": "KeyError", "message": "'image'", "traceback": ["x"]})
    )
    oom = CATALOGUE.entry("cuda-oom").example
    with gzip.open(ranks / "rank-1.log.gz", "wt") as fh:
        fh.write("step 10 loss 0.3\n" + oom + "\n")
    (ranks / "result.pkl").write_bytes(b"\x80\x04\x00binary")
    diag = diagnose([tmp_path])
    by_id = {f.entry.id: f for f in diag.findings}
    assert set(by_id) == {"spark-barrier-slots", "gpuspark-rank-failed", "cuda-oom"}
    assert by_id["spark-barrier-slots"].line == 3
    assert by_id["gpuspark-rank-failed"].rank == 3
    assert by_id["gpuspark-rank-failed"].values["error"] == "KeyError: 'image'"
    assert by_id["cuda-oom"].rank == 1 and by_id["cuda-oom"].line == 2
    assert diag.skipped == [str(ranks / "result.pkl")]


def test_first_occurrence_with_a_count_or_every_one() -> None:
    entry = CATALOGUE.entry("nccl-watchdog-timeout")
    text = "\n".join(entry.example.replace("Rank 1]", f"Rank {r}]") for r in (1, 2, 5))
    first = diagnose_text(text)
    assert [(f.entry.id, f.count, f.rank) for f in first.findings] == [(entry.id, 3, 1)]
    every = diagnose_text(text, every=True)
    assert [f.rank for f in every.findings] == [1, 2, 5]


def test_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GpusparkError, match="no such log file"):
        diagnose([tmp_path / "nope.log"])


# ---------------------------------------------------------------------------- CLI and README


def test_cli_names_cause_and_fix(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    log.write_text("noise\n" + CATALOGUE.entry("nccl-ib-retry-exceeded").example + "\n")
    result = CliRunner().invoke(app, ["doctor", "logs", str(log)])
    assert result.exit_code == 0, result.output
    assert "InfiniBand transport retry exceeded" in result.output
    assert f"{log}:2" in result.output
    assert "cause:" in result.output and "fix:" in result.output
    assert "1 known problem(s) in 1 file(s), 2 line(s)" in result.output
    result = CliRunner().invoke(app, ["doctor", "logs", "--json", str(log)])
    data = json.loads(result.output)
    assert data["known"] and data["findings"][0]["values"]["vendor_err"] == "129"
    assert data["findings"][0]["fix"][0].startswith("check the peer node")


def test_cli_spec_sets_the_network(tmp_path: Path) -> None:
    from gpuspark.spec import example_spec

    spec = tmp_path / "cluster.toml"
    spec.write_text(example_spec())
    kind = re.search(r'kind = "(\w+)"', example_spec().split("[networks.compute]")[1]).group(1)
    log = tmp_path / "rank-0.log"
    log.write_text(CATALOGUE.entry("nccl-socket-on-infiniband").example + "\n")
    result = CliRunner().invoke(app, ["doctor", "logs", "--spec", str(spec), str(log)])
    assert result.exit_code == 0, result.output
    assert ("NCCL uses TCP sockets" in result.output) == (kind == "infiniband")
