"""``gpuspark render monitoring``: the rendered Prometheus config, alert rules, their promtool
unit tests and the Alertmanager config, checked by the real ``promtool`` and ``amtool``.

No mocks: the rule tests are promtool's own unit-test runner fed with the exporters' real
series names and labels. A mutated threshold must make them fail (they bite).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuspark.cli.main import main
from gpuspark.errors import SpecError
from gpuspark.monitor import names
from gpuspark.monitor.alertmanager import alertmanager_yml, receiver_name
from gpuspark.monitor.prometheus import EmbeddedScrape, prometheus_yml
from gpuspark.monitor.render import (
    check_commands,
    render_monitoring,
    runbook_text,
    write_monitoring,
)
from gpuspark.monitor.rule_tests import TESTS_FILE, alert_rule_tests
from gpuspark.monitor.rules import ALERTS, RULES_FILE, alert_rules, rule_expressions, rule_groups
from gpuspark.spec import ClusterSpec, default_spec, load_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FILE = ROOT / "examples" / "cluster.toml"
TOOLS = shutil.which("promtool") and shutil.which("amtool")
needs_tools = pytest.mark.skipif(
    not TOOLS, reason="promtool/amtool missing: install prometheus / prometheus-alertmanager"
)


def _example() -> ClusterSpec:
    return load_spec(EXAMPLE_FILE)


def _with_monitoring(spec: ClusterSpec, **fields: Any) -> ClusterSpec:
    data = spec.model_dump()
    data["monitoring"].update(fields)
    return ClusterSpec.model_validate(data)


def _no_teams() -> ClusterSpec:
    data = _example().model_dump()
    data["teams"] = []
    return ClusterSpec.model_validate(data)


SPECS = {"example": _example, "default": default_spec, "no-teams": _no_teams}


def _run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)


def _check_all(out: Path) -> None:
    """Every check command the CLI prints, run for real; each must succeed."""
    for line in check_commands(out):
        proc = _run(*line.split())
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"


@needs_tools
@pytest.mark.parametrize("which", sorted(SPECS))
def test_rendered_files_pass_promtool_and_amtool(tmp_path: Path, which: str) -> None:
    spec = SPECS[which]()
    files = render_monitoring(spec, targets_dir=tmp_path / "targets")
    write_monitoring(files, tmp_path / "mon")
    _check_all(tmp_path / "mon")
    glob_check = _run("promtool", "check", "rules", *sorted((tmp_path / "mon/rules").glob("*.yml")))
    assert glob_check.returncode == 0, glob_check.stdout + glob_check.stderr


@needs_tools
def test_cli_writes_files_that_pass_the_printed_checks(tmp_path: Path, capsys) -> None:
    out = tmp_path / "mon"
    assert main(["render", "monitoring", str(EXAMPLE_FILE), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    expected = {"prometheus.yml", "alertmanager.yml", "runbook.md", f"rules/{RULES_FILE}"}
    for rel in [*expected, f"tests/{TESTS_FILE}"]:
        assert (out / rel).is_file()
        assert f"wrote {out / rel}" in printed
    assert "promtool test rules" in printed and "amtool check-config" in printed
    _check_all(out)


def test_cli_json_and_print(tmp_path: Path, capsys) -> None:
    import json

    assert main(["render", "monitoring", str(EXAMPLE_FILE), "--json"]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert set(files) == set(render_monitoring(_example()))
    assert main(["render", "monitoring", str(EXAMPLE_FILE), "--targets-dir", "/srv/tg"]) == 0
    printed = capsys.readouterr().out
    assert "# ==> prometheus.yml <==" in printed and "/srv/tg/runs/*.json" in printed
    assert not list(tmp_path.iterdir())


def test_cli_bad_out_dir_is_one_line(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x\n")
    assert main(["render", "monitoring", "--spec", str(EXAMPLE_FILE), "-o", str(blocker)]) == 1
    err = capsys.readouterr().err.strip()
    assert "--out" in err and str(blocker) in err and len(err.splitlines()) == 1


def _rules(spec: ClusterSpec) -> list[dict[str, Any]]:
    doc = yaml.safe_load(alert_rules(spec))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _runbook_anchors() -> set[str]:
    return {m.lower() for m in re.findall(r"^## (\S+)$", runbook_text(), re.MULTILINE)}


def test_every_alert_is_complete_and_has_a_runbook_section() -> None:
    spec = _example()
    rules = _rules(spec)
    assert [r["alert"] for r in rules] == [a.name for a in ALERTS]
    anchors = _runbook_anchors()
    for rule, info in zip(rules, ALERTS, strict=True):
        assert rule["for"], rule["alert"]
        assert rule["labels"]["severity"] == info.severity in {"critical", "warning", "info"}
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], rule["alert"]
        base, _, anchor = notes["runbook_url"].partition("#")
        assert base == spec.monitoring.runbook_url
        assert anchor == rule["alert"].lower() and anchor in anchors, rule["alert"]


def test_docs_runbook_is_the_shipped_runbook() -> None:
    assert (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8") == runbook_text()
    assert render_monitoring(default_spec())["runbook.md"] == runbook_text()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"monitor/*.md"' in pyproject  # ships as package data


@pytest.mark.parametrize("which", sorted(SPECS))
def test_every_alert_has_a_firing_and_a_silent_test_case(which: str) -> None:
    spec = SPECS[which]()
    doc = yaml.safe_load(alert_rule_tests(spec))
    assert doc["rule_files"] == [f"../rules/{RULES_FILE}"]
    firing: set[str] = set()
    silent: set[str] = set()
    for group in doc["tests"]:
        for check in group["alert_rule_test"]:
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    every = {a.name for a in ALERTS}
    assert firing == every
    assert silent == every


def test_dcgm_tests_use_both_host_label_spellings() -> None:
    text = alert_rule_tests(_example())
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"):
        lines = [ln for ln in text.splitlines() if f"series: {metric}{{" in ln]
        assert any('Hostname="' in ln for ln in lines), metric
        assert any('hostname="' in ln for ln in lines), metric


THRESHOLDS = {
    "gpu_memory_pct": (90.5, "> 90.5"),
    "gpu_temp_c": (78.5, "> 78.5"),
    "gpu_util_low_pct": (5.0, "< 5"),
    "data_wait_pct": (40.5, "> 40.5"),
    "nvme_free_pct": (15.0, "< 15"),
    "executor_lost_per_hour": (1, "> 1"),
    "stall_minutes": (1.5, "> 90"),
}


@needs_tools
def test_non_default_thresholds_land_in_the_rules_and_their_tests(tmp_path: Path) -> None:
    fields = {k: v for k, (v, _) in THRESHOLDS.items()} | {"idle_allocated_minutes": 2.5}
    spec = _with_monitoring(_example(), **fields)
    exprs = dict(zip([a.name for a in ALERTS], rule_expressions(spec), strict=True))
    assert "> 90.5" in exprs["GpuMemoryHigh"] and "> 78.5" in exprs["GpuTemperatureHigh"]
    assert "< 5\n" in exprs["GpuAllocatedIdle"] and "> 40.5" in exprs["TrainingInputBound"]
    assert "< 15" in exprs["NvmeFreeSpaceLow"] and exprs["SparkExecutorsLost"].endswith("> 1")
    assert "> 90\n" in exprs["TrainingStalled"]
    idle = next(r for r in _rules(spec) if r["alert"] == "GpuAllocatedIdle")
    assert idle["for"] == "150s"
    write_monitoring(render_monitoring(spec, targets_dir=tmp_path / "t"), tmp_path / "mon")
    _check_all(tmp_path / "mon")


MUTATIONS = {  # threshold -> a shifted value the rendered tests must notice
    "gpu_memory_pct": ("GpuMemoryHigh", 3.0),
    "gpu_temp_c": ("GpuTemperatureHigh", 6.0),
    "gpu_util_low_pct": ("GpuAllocatedIdle", 1.0),
    "idle_allocated_minutes": ("GpuAllocatedIdle", 10.0),
    "data_wait_pct": ("TrainingInputBound", 11.0),
    "nvme_free_pct": ("NvmeFreeSpaceLow", 2.0),
    "executor_lost_per_hour": ("SparkExecutorsLost", 1),
    "stall_minutes": ("TrainingStalled", 10.0),
}


@needs_tools
@pytest.mark.parametrize(
    "fields",
    [sorted(set(MUTATIONS) - {"gpu_util_low_pct"}), ["gpu_util_low_pct"]],
    ids=["all-but-util", "util"],
)
def test_shifted_thresholds_fail_the_rule_tests(tmp_path: Path, fields: list[str]) -> None:
    """Rules whose expressions (and ``for``) come from a spec with thresholds shifted, but whose
    annotations are the original ones: promtool's tests of the original spec must fail on
    exactly the alerts those thresholds feed (one promtool run checks many thresholds; the
    two that feed the same alert run separately)."""
    spec = _example()
    shifts = {f: getattr(spec.monitoring, f) + MUTATIONS[f][1] for f in fields}
    changed = {
        r["alert"]: r for g in rule_groups(_with_monitoring(spec, **shifts)) for r in g["rules"]
    }
    groups = rule_groups(spec)
    for group in groups:
        for rule in group["rules"]:
            rule["expr"] = changed[rule["alert"]]["expr"]
            rule["for"] = changed[rule["alert"]]["for"]
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules" / RULES_FILE).write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / "tests" / TESTS_FILE).write_text(alert_rule_tests(spec))
    proc = _run("promtool", "test", "rules", tmp_path / "tests" / TESTS_FILE)
    assert proc.returncode != 0, proc.stdout
    failed = set(re.findall(r"alertname: (\w+)", proc.stdout + proc.stderr))
    assert failed == {MUTATIONS[f][0] for f in fields}


def test_prometheus_yml_scrapes_every_node_and_the_discovery_folders(tmp_path: Path) -> None:
    spec = _example()
    doc = yaml.safe_load(prometheus_yml(spec, targets_dir=tmp_path))
    jobs = {job["job_name"]: job for job in doc["scrape_configs"]}
    hosts = [h for g in spec.nodes for h in g.hosts]
    for job, port in ((names.JOB_DCGM, names.DCGM_PORT), (names.JOB_NODE, 9100)):
        targets = [t for sc in jobs[job]["static_configs"] for t in sc["targets"]]
        assert targets == [f"{h}:{port}" for h in hosts]
    assert jobs[names.JOB_SPARK_MASTER]["static_configs"] == [{"targets": ["dgx01:8080"]}]
    expected_sd = {
        names.JOB_RUNS: ("runs", "/metrics"),
        names.JOB_SPARK_APPS: ("spark-apps", "/metrics/prometheus"),
        names.JOB_SPARK_EXECUTORS: ("spark-apps", "/metrics/executors/prometheus"),
        names.JOB_SPARK_MASTER: ("spark-master", "/metrics/master/prometheus"),
    }
    for job, (kind, path) in expected_sd.items():
        assert jobs[job]["metrics_path"] == path
        assert jobs[job]["file_sd_configs"] == [{"files": [str(tmp_path / kind / "*.json")]}]
    assert jobs[names.JOB_RUNS]["honor_labels"] is True
    assert doc["global"]["scrape_interval"] == f"{spec.monitoring.scrape_interval_s}s"
    assert doc["rule_files"] == ["rules/*.yml"]
    assert doc["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["localhost:9093"]


@needs_tools
def test_embedded_variant_has_no_dcgm_and_is_valid(tmp_path: Path) -> None:
    text = prometheus_yml(
        default_spec(),
        targets_dir=tmp_path,
        embedded=EmbeddedScrape(node_exporter="127.0.0.1:9100"),
    )
    doc = yaml.safe_load(text)
    jobs = {job["job_name"]: job for job in doc["scrape_configs"]}
    assert names.JOB_DCGM not in jobs and "alerting" not in doc and "rule_files" not in doc
    assert jobs[names.JOB_NODE]["static_configs"] == [{"targets": ["127.0.0.1:9100"]}]
    assert "static_configs" not in jobs[names.JOB_SPARK_MASTER]
    bare = yaml.safe_load(prometheus_yml(default_spec(), embedded=EmbeddedScrape()))
    assert names.JOB_NODE not in {job["job_name"] for job in bare["scrape_configs"]}
    (tmp_path / "prometheus.yml").write_text(text)
    proc = _run("promtool", "check", "config", tmp_path / "prometheus.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_alertmanager_routes_each_team_to_its_receiver() -> None:
    spec = _example()
    doc = yaml.safe_load(alertmanager_yml(spec))
    routes = doc["route"]["routes"]
    assert [r["matchers"] for r in routes] == [[f'team="{t.name}"'] for t in spec.teams]
    assert [r["receiver"] for r in routes] == [receiver_name(t.name) for t in spec.teams]
    assert doc["route"]["receiver"] == "default"
    assert {r["name"] for r in doc["receivers"]} == {"default"} | {
        receiver_name(t.name) for t in spec.teams
    }
    assert "routes" not in yaml.safe_load(alertmanager_yml(_no_teams()))["route"]


def test_rule_expressions_are_the_rendered_ones() -> None:
    spec = _example()
    assert rule_expressions(spec) == [r["expr"] for r in _rules(spec)]
    assert len(rule_expressions(spec)) == len(ALERTS)


def test_rendering_is_deterministic_across_processes(tmp_path: Path) -> None:
    """Same spec, same bytes: no hash seeds, timestamps or dict-order accidents."""
    import os
    import sys

    code = (
        "import json, sys; from gpuspark.spec import load_spec;"
        "from gpuspark.monitor.render import render_monitoring;"
        "print(json.dumps(render_monitoring(load_spec(sys.argv[1]), targets_dir='/t')))"
    )
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", code, str(EXAMPLE_FILE)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outs.add(proc.stdout)
    assert len(outs) == 1


@pytest.mark.parametrize("field", ["gpu_memory_pct", "data_wait_pct"])
def test_a_threshold_no_share_can_exceed_is_refused(
    field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``> 100`` on a share can never fire: the spec refuses 100 with one line."""
    text = re.sub(rf"(?m)^{field} = .*$", f"{field} = 100", EXAMPLE_FILE.read_text())
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert main(["validate", "--spec", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"monitoring.{field}=100" in err, err
    assert "less than 100" in err


@needs_tools
@settings(max_examples=6, deadline=None)
@given(
    memory=st.floats(0.01, 99.99),
    data_wait=st.floats(0.01, 99.99),
    util_low=st.floats(0.01, 100),
    nvme=st.floats(0.01, 100),
)
def test_rendered_rule_tests_pass_over_the_allowed_range(
    memory: float, data_wait: float, util_low: float, nvme: float
) -> None:
    """Every valid spec renders rules whose promtool tests pass, the edges included."""
    import tempfile

    spec = _with_monitoring(
        default_spec(),
        gpu_memory_pct=round(memory, 2),
        data_wait_pct=round(data_wait, 2),
        gpu_util_low_pct=round(util_low, 2),
        nvme_free_pct=round(nvme, 2),
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mon"
        write_monitoring(render_monitoring(spec, targets_dir=Path(tmp) / "targets"), out)
        _check_all(out)


# ----------------------------------------------------------------------------- no machine paths


def test_cli_render_carries_no_path_of_the_rendering_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``render monitoring -o DIR`` as typed on a laptop: neither its home, its monitor
    folder nor its working directory may reach the files; file_sd reads ``targets/`` beside
    ``prometheus.yml`` (Prometheus resolves relative paths from the file's folder)."""
    machine = tmp_path / "render-machine"
    monkeypatch.setenv("HOME", str(machine / "home"))
    monkeypatch.setenv("GPUSPARK_MONITOR_DIR", str(machine / "monitor"))
    monkeypatch.chdir(tmp_path)
    assert main(["render", "monitoring", "--spec", str(EXAMPLE_FILE), "-o", "mon"]) == 0
    capsys.readouterr()
    for path in (tmp_path / "mon").rglob("*"):
        if path.is_file():
            assert str(tmp_path) not in path.read_text(), path
    doc = yaml.safe_load((tmp_path / "mon" / "prometheus.yml").read_text())
    files = [
        f
        for job in doc["scrape_configs"]
        for c in job.get("file_sd_configs", [])
        for f in c["files"]
    ]
    assert files and all(f.startswith("targets/") for f in files), files
    assert "targets/runs/*.json" in files
    assert "[monitoring] targets_dir" in (tmp_path / "mon" / "prometheus.yml").read_text()


def test_targets_dir_is_written_as_given_and_a_tilde_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shared = _with_monitoring(_example(), targets_dir="/shared/prometheus/targets")
    doc = yaml.safe_load(prometheus_yml(shared))
    assert doc["scrape_configs"][-1]["file_sd_configs"] == [
        {"files": ["/shared/prometheus/targets/runs/*.json"]}
    ]
    home = _with_monitoring(_example(), targets_dir="~/targets")
    with pytest.raises(SpecError, match="starts with '~'"):
        prometheus_yml(home)
