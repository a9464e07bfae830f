"""Spark configuration rendered from a spec: conf values, golden files, the discovery script,
``gpuspark render spark``, and a session built from the rendered conf on the embedded cluster.

Golden files live in ``tests/golden/spark/``; regenerate them after an intended change with
``GPUSPARK_UPDATE_GOLDEN=1 pytest tests/cluster/test_conf.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from gpuspark.cli.main import main
from gpuspark.cluster.conf import (
    DISCOVERY_SCRIPT,
    discovery_script,
    render_spark,
    spark_conf,
    write_rendered,
)
from gpuspark.spec import ClusterSpec, example_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FILE = ROOT / "examples" / "cluster.toml"
GOLDEN = ROOT / "tests" / "golden" / "spark"
UPDATE = os.environ.get("GPUSPARK_UPDATE_GOLDEN") == "1"


def _example(**spark: object) -> ClusterSpec:
    """The example spec with some ``[spark]`` fields replaced (validated again)."""
    data = parse_spec(example_spec()).model_dump()
    data["spark"].update(spark)
    return ClusterSpec.model_validate(data)


# ----------------------------------------------------------------------------- spark_conf


def test_conf_has_the_seed_gpu_settings() -> None:
    conf = spark_conf(parse_spec(example_spec()))
    assert conf["spark.executor.resource.gpu.amount"] == "1"
    assert conf["spark.task.resource.gpu.amount"] == "0.25"
    assert conf["spark.executor.resource.gpu.discoveryScript"] == (
        "/opt/gpuspark/getGpusResources.sh"
    )
    assert conf["spark.dynamicAllocation.enabled"] == "true"
    assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert conf["spark.dynamicAllocation.maxExecutors"] == "16"  # 16 GPUs / 1 per executor
    assert conf["spark.executor.cores"] == "16" and conf["spark.task.cpus"] == "4"
    assert conf["spark.executor.memory"] == "200g"
    assert conf["spark.ui.prometheus.enabled"] == "true"
    assert conf["spark.eventLog.enabled"] == "true"
    assert conf["spark.eventLog.dir"] == "hdfs://namenode:8020/gpuspark/spark-events"
    # [spark.conf] applied last
    assert conf["spark.executor.memoryOverhead"] == "24g"
    assert list(conf) == sorted(conf)


def test_conf_without_dynamic_allocation_or_event_log() -> None:
    conf = spark_conf(_example(dynamic_allocation=False, event_log=False))
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    assert not any(k.startswith("spark.dynamicAllocation.") and "enabled" not in k for k in conf)
    assert "spark.dynamicAllocation.shuffleTracking.enabled" not in conf
    assert conf["spark.eventLog.enabled"] == "false" and "spark.eventLog.dir" not in conf


def test_conf_overrides_win_and_whole_gpu_amounts_render_as_integers() -> None:
    spec = _example(
        executor_gpus=2,
        task_gpu_amount=1.0,
        executor_cores=2,
        task_cpus=1,
        conf={"spark.ui.prometheus.enabled": "false", "spark.eventLog.dir": "/x"},
    )
    conf = spark_conf(spec, discovery_script_path="/elsewhere/gpus.sh")
    assert conf["spark.task.resource.gpu.amount"] == "1"
    assert conf["spark.ui.prometheus.enabled"] == "false"
    assert conf["spark.eventLog.dir"] == "/x"
    assert conf["spark.executor.resource.gpu.discoveryScript"] == "/elsewhere/gpus.sh"


def _defaults(text: str) -> dict[str, str]:
    pairs = (ln.split(" ", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
    return {k: v for k, v in pairs}


def test_worker_settings_only_for_standalone() -> None:
    standalone = _defaults(render_spark(parse_spec(example_spec()))["spark-defaults.conf"])
    assert standalone["spark.worker.resource.gpu.amount"] == "8"
    assert standalone["spark.master"] == "spark://dgx01:7077"
    yarn = _defaults(render_spark(_example(master="yarn"))["spark-defaults.conf"])
    assert not any(k.startswith("spark.worker.") for k in yarn)
    assert yarn["spark.master"] == "yarn"
    k8s = spark_conf(_example(master="k8s://https://api.example:6443"))
    assert k8s["spark.executor.resource.gpu.vendor"] == "nvidia.com"
    assert "spark.executor.resource.gpu.vendor" not in spark_conf(_example(master="yarn"))
    embedded = _defaults(render_spark(_example(master="local-cluster"))["spark-defaults.conf"])
    assert "spark.master" not in embedded  # the embedded cluster's port is chosen at start
    assert embedded["spark.worker.resource.gpu.amount"] == "8"


def test_mixed_node_groups_leave_worker_amount_to_each_node() -> None:
    data = parse_spec(example_spec()).model_dump()
    data["nodes"].append({**data["nodes"][0], "name": "small", "hosts": ["s1"], "gpus_per_node": 4})
    data["teams"] = []
    text = render_spark(ClusterSpec.model_validate(data))["spark-defaults.conf"]
    assert "spark.worker.resource.gpu.amount" not in _defaults(text)
    assert "# spark.worker.resource.gpu.amount differs per node group (dgx=8, small=4)" in text


# ----------------------------------------------------------------------------- golden files


def test_rendered_example_matches_golden_files() -> None:
    files = render_spark(parse_spec(EXAMPLE_FILE.read_text(), source=str(EXAMPLE_FILE)))
    assert list(files) == ["spark-defaults.conf", "metrics.properties", DISCOVERY_SCRIPT]
    if UPDATE:
        write_rendered(files, GOLDEN)
    for name, content in files.items():
        assert (GOLDEN / name).read_text() == content, f"{name} differs from tests/golden/spark"
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(files)


def test_render_is_deterministic_and_names_the_spec() -> None:
    spec = parse_spec(example_spec())
    first, second = render_spark(spec), render_spark(spec)
    assert first == second
    for content in first.values():
        assert "cluster 'dgx-a100'" in content


def test_metrics_properties_uses_the_prometheus_servlet() -> None:
    text = render_spark(parse_spec(example_spec()))["metrics.properties"]
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    props = dict(ln.split("=", 1) for ln in lines)
    assert props["*.sink.prometheusServlet.class"] == (
        "org.apache.spark.metrics.sink.PrometheusServlet"
    )
    assert props["*.sink.prometheusServlet.path"] == "/metrics/prometheus"
    assert props["master.sink.prometheusServlet.path"] == "/metrics/master/prometheus"


# ----------------------------------------------------------------------------- discovery script


@pytest.fixture
def script(tmp_path: Path) -> Path:
    (path,) = write_rendered(
        {DISCOVERY_SCRIPT: discovery_script(parse_spec(example_spec()))}, tmp_path / "conf"
    )
    return path


def _bin_without_nvidia_smi(tmp_path: Path) -> Path:
    """A PATH directory holding only the tools the script needs (so no real nvidia-smi)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("tr",):
        found = shutil.which(tool)
        assert found, f"{tool} is needed by the discovery script"
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def _fake_nvidia_smi(bin_dir: Path, body: str) -> None:
    # FAKE nvidia-smi: there is no GPU on the test machine. It only mimics the output format
    # of `nvidia-smi --query-gpu=index --format=csv,noheader` (one index per line).
    fake = bin_dir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n# FAKE nvidia-smi for tests (no GPU here)\n"
        '[ "$1" = "--query-gpu=index" ] && [ "$2" = "--format=csv,noheader" ] || exit 64\n'
        f"{body}\n"
    )
    fake.chmod(0o755)


def _run(script: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", str(script)],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("output", "addresses"),
    [
        ("printf '0\\n'", ["0"]),
        ("printf '0\\n1\\n2\\n3\\n4\\n5\\n6\\n7\\n'", [str(i) for i in range(8)]),
        ("printf '0\\r\\n 1\\r\\n'", ["0", "1"]),
    ],
    ids=["one-gpu", "eight-gpus", "crlf-and-spaces"],
)
def test_discovery_script_with_fake_nvidia_smi(
    script: Path, tmp_path: Path, output: str, addresses: list[str]
) -> None:
    bin_dir = _bin_without_nvidia_smi(tmp_path)
    _fake_nvidia_smi(bin_dir, output)
    proc = _run(script, bin_dir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"name": "gpu", "addresses": addresses}
    assert proc.stderr == ""


def test_discovery_script_is_executable(script: Path) -> None:
    assert script.stat().st_mode & stat.S_IXUSR
    assert script.read_text().startswith("#!/bin/sh\n")


def test_discovery_script_without_nvidia_smi(script: Path, tmp_path: Path) -> None:
    proc = _run(script, _bin_without_nvidia_smi(tmp_path))
    assert proc.returncode != 0 and proc.stdout == ""
    assert "nvidia-smi not found on PATH" in proc.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo 'NVIDIA-SMI has failed: driver not loaded' >&2; exit 9", "nvidia-smi"),
        ("echo 'No devices were found'", "unexpected line from nvidia-smi"),
        ("true", "lists no GPUs"),
    ],
    ids=["fails", "garbage", "empty"],
)
def test_discovery_script_reports_nvidia_smi_problems(
    script: Path, tmp_path: Path, body: str, message: str
) -> None:
    bin_dir = _bin_without_nvidia_smi(tmp_path)
    _fake_nvidia_smi(bin_dir, body)
    proc = _run(script, bin_dir)
    assert proc.returncode != 0 and proc.stdout == ""
    assert message in proc.stderr
    if "driver not loaded" in body:
        assert "driver not loaded" in proc.stderr  # nvidia-smi's own message passes through


# ----------------------------------------------------------------------------- writing, CLI


def test_write_rendered_is_atomic_and_replaces(tmp_path: Path) -> None:
    out = tmp_path / "conf"
    files = render_spark(parse_spec(example_spec()))
    write_rendered(files, out)
    (out / "spark-defaults.conf").write_text("old\n")
    paths = write_rendered(files, out)
    assert [p.name for p in paths] == list(files)
    assert sorted(p.name for p in out.iterdir()) == sorted(files)  # no temp files left
    assert (out / "spark-defaults.conf").read_text() == files["spark-defaults.conf"]
    assert stat.S_IMODE((out / "metrics.properties").stat().st_mode) == 0o644
    assert stat.S_IMODE((out / DISCOVERY_SCRIPT).stat().st_mode) == 0o755


def test_cli_render_prints_exactly_what_it_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "spark", str(EXAMPLE_FILE)]) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "conf"
    assert main(["render", "spark", str(EXAMPLE_FILE), "-o", str(out)]) == 0
    assert capsys.readouterr().out.count("wrote ") == 3
    expected = "".join(
        f"# ==> {name} <==\n{(out / name).read_text()}"
        for name in ["spark-defaults.conf", "metrics.properties", DISCOVERY_SCRIPT]
    )
    assert printed == expected
    # the seed's three settings and the discovery script
    assert "spark.executor.resource.gpu.amount 1\n" in printed
    assert "spark.task.resource.gpu.amount 0.25\n" in printed
    assert "spark.dynamicAllocation.enabled true\n" in printed
    assert "nvidia-smi --query-gpu=index --format=csv,noheader" in printed


def test_cli_render_bad_spec_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUSPARK_DEBUG", raising=False)
    bad = tmp_path / "cluster.toml"
    bad.write_text(example_spec().replace("task_gpu_amount = 0.25", "task_gpu_amount = 2.5"))
    out = tmp_path / "conf"
    assert main(["render", "spark", "--spec", str(bad), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"error: {bad}: spark.task_gpu_amount=2.5: must be a fraction in (0, 1] or a whole"
        " number, e.g. 0.25 or 2\n"
    )
    assert not out.exists()


# ----------------------------------------------------------------------------- on Spark


def _session_conf_from_rendered(tmp_path: Path) -> dict[str, str]:
    """spark-defaults.conf rendered from the example, adapted to the embedded test cluster."""
    data = parse_spec(example_spec()).model_dump()
    data["spark"].update(
        master="local-cluster",
        executor_gpus=1,
        task_gpu_amount=0.25,
        executor_cores=4,
        task_cpus=1,
        executor_memory="1g",
        dynamic_allocation=False,
        conf={},
    )
    data["storage"]["root"] = str(tmp_path)
    rendered = render_spark(ClusterSpec.model_validate(data))["spark-defaults.conf"]
    conf = _defaults(rendered)
    (tmp_path / "spark-events").mkdir()
    # Workers assign GPU addresses to executors here; worker settings belong to the workers.
    return {
        k: v
        for k, v in conf.items()
        if not k.startswith("spark.worker.") and not k.endswith(".discoveryScript")
    }


@pytest.mark.slow  # ~50 s; the session path's GPU task sharing runs by default in test_spine
@pytest.mark.spark
@pytest.mark.own_session
def test_session_from_rendered_conf_schedules_gpu_tasks(spark_factory, tmp_path: Path) -> None:
    conf = _session_conf_from_rendered(tmp_path)
    assert conf["spark.executor.resource.gpu.amount"] == "1"
    assert conf["spark.task.resource.gpu.amount"] == "0.25"
    spark = spark_factory.get(**conf)
    sc = spark.sparkContext
    assert sc.getConf().get("spark.task.resource.gpu.amount") == "0.25"

    def where(index: int, _rows: object) -> list[tuple[int, list[str]]]:
        from pyspark import TaskContext

        resources = TaskContext.get().resources()
        gpu = resources.get("gpu")
        return [(index, list(gpu.addresses) if gpu is not None else [])]

    got = sc.parallelize(range(16), 16).mapPartitionsWithIndex(where).collect()
    assert sorted(i for i, _ in got) == list(range(16))
    for index, addresses in got:
        assert len(addresses) == 1, f"task {index} got GPU addresses {addresses}"
        assert addresses[0] in {"0", "1", "2", "3"}  # the simulated slots of the two workers
