"""`gpuspark doctor logs` explains a launch ended by a host cut off from the network: the
launcher's one line names the unreachable host, and the gloo timeout quoted in it is a
consequence, not a second finding."""

from __future__ import annotations

from pathlib import Path

from gpuspark.doctor.logs import diagnose, diagnose_text
from gpuspark.launch import make_request
from gpuspark.launch.results import host_unreachable_error

GLOO_TIMEOUT = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete"
)


def train() -> None:
    return None


def _unreachable_line() -> str:
    req = make_request(train, num_processes=2)
    error = {"type": "RuntimeError", "message": GLOO_TIMEOUT.split(": ", 1)[1], "time": 1.0}
    reports = [{"ok": False, "failures": [{"rank": 0, "host": "198.18.0.2", "error": error}]}]
    return str(host_unreachable_error("198.18.0.3", 22.4, req, reports))


def test_the_launchers_line_is_explained_with_the_cut_host(tmp_path: Path) -> None:
    # As the launcher writes it to the driver log (log4j, logger "gpuspark", WARN).
    log = tmp_path / "driver-1.log"
    log.write_text(
        "26/12/03 03:47:17 INFO TaskSchedulerImpl: Killing all running tasks in stage 0\n"
        f"26/12/03 03:47:22 WARN gpuspark: {_unreachable_line()}\n"
    )
    diag = diagnose([log])
    found = [f for f in diag.findings if f.entry.id == "gpuspark-host-unreachable"]
    assert len(found) == 1, diag.ids()
    assert "gloo-timeout" not in diag.ids()  # the quoted timeout follows from the cut
    finding = found[0]
    assert finding.values["host"] == "198.18.0.3" and finding.values["silent_s"] == "22"
    assert finding.line == 2
    assert "198.18.0.3" in finding.cause and "partitioned" in finding.cause
    assert any("--max-attempts 2" in fix for fix in finding.fixes)


def test_a_gloo_timeout_alone_is_still_a_gloo_timeout() -> None:
    assert diagnose_text(GLOO_TIMEOUT).ids() == ["gloo-timeout"]
