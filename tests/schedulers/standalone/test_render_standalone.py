"""``gpuspark render standalone``: each host's ``spark-env.sh`` against the spec, the workers
file, the systemd units (``systemd-analyze verify``), dcgm-exporter's counters against the
rendered alert rules and dashboards, and the nftables file (``nft -c``).

``systemd-analyze verify`` checks that every ``ExecStart=`` binary exists and is executable.
``--root=DIR`` does not help: it then wants the whole unit tree under DIR (it stops at
"Unit sysinit.target not found"). So the units are rendered with their install paths
(``--spark-home``, ``--dcgm-exporter``, ``--node-exporter``) pointing at executable stub files
in a temporary folder, verified, and compared with the default rendering, which differs only
in those paths. ``verify`` reports a bad setting as a warning and still exits 0, so the tests
also require that it prints nothing about the unit.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.cmd_render_standalone import standalone_files
from gpuspark.cli.main import main
from gpuspark.cluster.conf import render_spark, write_rendered_tree
from gpuspark.monitor import names
from gpuspark.monitor.exporter import _PORT_TRIES
from gpuspark.monitor.render import render_monitoring
from gpuspark.schedulers.standalone.dcgm import DEFAULT_COUNTERS
from gpuspark.schedulers.standalone.firewall import RANK_PORT_TRIES
from gpuspark.schedulers.standalone.render import InstallPaths, Rendered, worker_memory_mib
from gpuspark.spec import ClusterSpec, example_spec, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "cluster.toml"
UNITS = (
    "spark-master.service",
    "spark-worker.service",
    "spark-history-server.service",
    "dcgm-exporter.service",
    "node-exporter.service",
)
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
NFT = shutil.which("nft")


def _spec(groups: list[dict[str, Any]] | None = None, **spark: Any) -> ClusterSpec:
    """The example spec with other node groups and ``[spark]`` fields (validated again)."""
    data = parse_spec(example_spec()).model_dump()
    if groups is not None:
        data["nodes"] = [{**data["nodes"][0], **g} for g in groups]
    data["spark"].update(spark)
    return ClusterSpec.model_validate(data)


def _two_groups(l40s_address: str | None = None) -> ClusterSpec:
    """Two node groups, one with addresses and network fields, one with neither (unless
    ``l40s_address`` is given)."""
    return _spec(
        [
            {
                "name": "dgx",
                "hosts": ["dgx01", "dgx02"],
                "addresses": ["192.0.2.11", "192.0.2.12"],
                "local_dirs": ["/raid/spark", "/raid2/spark"],
                "socket_ifname": "ens1f0",
                "ib_hca": ["mlx5_0:1", "mlx5_1:1"],
                "roce_gid_index": 3,
            },
            {
                "name": "l40s",
                "hosts": ["l40s01"],
                "gpus_per_node": 4,
                "gpu_model": "L40S",
                "gpu_memory_gb": 48,
                "cpu_cores": 64,
                "ram_gb": 512,
                "addresses": [l40s_address] if l40s_address else None,
            },
        ]
    )


def _stub_paths(root: Path) -> InstallPaths:
    """Install paths whose binaries are executable stubs under ``root``."""
    paths = InstallPaths(
        spark_home=str(root / "opt" / "spark"),
        dcgm_exporter=str(root / "usr" / "bin" / "dcgm-exporter"),
        node_exporter=str(root / "usr" / "bin" / "prometheus-node-exporter"),
    )
    for exe in (f"{paths.spark_home}/bin/spark-class", paths.dcgm_exporter, paths.node_exporter):
        Path(exe).parent.mkdir(parents=True, exist_ok=True)
        Path(exe).write_text("#!/bin/sh\nexit 0\n")
        Path(exe).chmod(0o755)
    return paths


def _verify(unit: Path) -> tuple[int, list[str]]:
    """``systemd-analyze verify`` of one unit: exit code, and the lines about that unit."""
    assert SYSTEMD_ANALYZE is not None
    out = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = (out.stdout + out.stderr).splitlines()
    return out.returncode, [line for line in lines if unit.name in line]


def _env(path: Path) -> dict[str, str]:
    """The variables ``spark-env.sh`` exports, as Spark's ``load-spark-env.sh`` sources it."""
    script = f'set -a; . "{path}"; set +a; env -0'
    out = subprocess.run(["bash", "-c", script], capture_output=True, env={}, check=True)
    pairs = (item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in pairs if k.startswith(("SPARK_", "NCCL_", "GLOO_"))}


@pytest.fixture(scope="module")
def example_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Rendered]:
    """``render standalone`` of examples/cluster.toml, with stub binaries, written out."""
    tmp = tmp_path_factory.mktemp("standalone")
    rendered = standalone_files(load_spec(EXAMPLE), _stub_paths(tmp / "root"))
    write_rendered_tree(rendered.files, tmp / "out")
    return tmp / "out", rendered


# ----------------------------------------------------------------------------- systemd


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", UNITS)
def test_every_unit_passes_systemd_analyze_verify(
    unit: str, example_out: tuple[Path, Rendered]
) -> None:
    rc, complaints = _verify(example_out[0] / "systemd" / unit)
    assert rc == 0 and complaints == [], complaints


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_verify_catches_a_bad_unit(example_out: tuple[Path, Rendered], tmp_path: Path) -> None:
    good = (example_out[0] / "systemd" / "spark-worker.service").read_text()
    bad = tmp_path / "spark-worker.service"
    bad.write_text(good.replace("Restart=on-failure", "Restart=whenever"))
    assert any("Restart" in line or "restart" in line for line in _verify(bad)[1])
    bad.write_text(good.replace("/bin/spark-class", "/bin/no-such-spark-class"))
    rc, complaints = _verify(bad)
    assert rc != 0 and any("not executable" in line for line in complaints)


def test_default_units_differ_from_the_verified_ones_only_in_paths(
    example_out: tuple[Path, Rendered],
) -> None:
    stubbed = example_out[1].files
    default = standalone_files(load_spec(EXAMPLE)).files
    root = str(Path(example_out[0]).parent / "root")
    for unit in UNITS:
        assert stubbed[f"systemd/{unit}"].replace(root, "") == default[f"systemd/{unit}"], unit


def test_unit_contents() -> None:
    files = standalone_files(load_spec(EXAMPLE)).files
    worker = files["systemd/spark-worker.service"]
    assert "ExecStart=/opt/spark/bin/spark-class org.apache.spark.deploy.worker.Worker" in worker
    assert worker.split("Worker ")[1].startswith("spark://dgx01:7077\n")
    for unit in ("spark-master", "spark-worker", "spark-history-server"):
        text = files[f"systemd/{unit}.service"]
        assert "User=spark\n" in text and "Restart=on-failure\n" in text
        assert "Type=simple\n" in text and "Environment=SPARK_CONF_DIR=/opt/spark/conf\n" in text
    assert "LimitMEMLOCK=infinity" in worker  # NCCL over InfiniBand registers memory
    dcgm = files["systemd/dcgm-exporter.service"]
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/gpuspark-counters.csv" in dcgm
    assert f"-a :{names.DCGM_PORT}\n" in dcgm
    node = files["systemd/node-exporter.service"]
    assert "--collector.infiniband" in node
    assert f"--web.listen-address=:{names.NODE_EXPORTER_PORT}" in node


@pytest.mark.skipif(
    shutil.which("prometheus-node-exporter") is None, reason="prometheus-node-exporter absent"
)
def test_node_exporter_knows_the_flags_of_its_unit() -> None:
    unit = standalone_files(load_spec(EXAMPLE)).files["systemd/node-exporter.service"]
    flags = re.findall(r"(--[a-z.-]+)", unit.split("ExecStart=")[1].splitlines()[0])
    out = subprocess.run(
        ["prometheus-node-exporter", "--help"], capture_output=True, text=True, timeout=60
    )
    assert flags and all(flag in out.stdout + out.stderr for flag in flags), flags


# ----------------------------------------------------------------------------- dcgm counters


def _counters(text: str) -> dict[str, str]:
    """Field -> type of a dcgm-exporter counters file, each line checked for three fields."""
    rows = {}
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or row[0].startswith("#"):
            continue
        assert len(row) == 3, row  # dcgm-exporter refuses any other count
        assert row[1] in ("gauge", "counter", "label"), row
        rows[row[0].strip()] = row[1]
    return rows


def test_counters_cover_every_dcgm_field_of_the_rendered_rules_and_dashboards(
    example_out: tuple[Path, Rendered],
) -> None:
    out = example_out[0]
    counters = _counters((out / "dcgm-exporter" / "gpuspark-counters.csv").read_text())
    monitoring = render_monitoring(load_spec(EXAMPLE))
    rules = monitoring["rules/gpuspark-alerts.yml"]
    dashboards = [v for k, v in monitoring.items() if k.startswith("grafana/dashboards/")]
    assert dashboards
    used = set(re.findall(r"DCGM_FI_[A-Z0-9_]+", "\n".join([rules, *dashboards])))
    assert "DCGM_FI_PROF_SM_ACTIVE" in used  # a profiling field, not collected by default
    assert used <= set(counters), used - set(counters)
    assert {name for name, _, _ in DEFAULT_COUNTERS} <= set(counters)
    assert counters["DCGM_FI_PROF_SM_ACTIVE"] == "gauge"
    assert counters["DCGM_FI_DEV_XID_ERRORS"] == "gauge"  # the last XID, not a count
    assert counters["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"


def test_counters_file_has_dcgm_exporters_header(example_out: tuple[Path, Rendered]) -> None:
    text = (example_out[0] / "dcgm-exporter" / "gpuspark-counters.csv").read_text()
    assert "# Format\n" in text and "# DCGM FIELD, Prometheus metric type, help message\n" in text


# ----------------------------------------------------------------------------- spark-env.sh


def test_spark_env_of_each_host_matches_the_spec(tmp_path: Path) -> None:
    spec = _two_groups()
    write_rendered_tree(standalone_files(spec).files, tmp_path)
    for group in spec.nodes:
        for i, host in enumerate(group.hosts):
            env = _env(tmp_path / "hosts" / host / "spark-env.sh")
            address = group.addresses[i] if group.addresses else host
            assert env["SPARK_LOCAL_IP"] == address
            assert env["SPARK_WORKER_CORES"] == str(group.cpu_cores)
            assert env["SPARK_WORKER_MEMORY"] == f"{worker_memory_mib(group) // 1024}g"
            assert env["SPARK_WORKER_OPTS"].split() == [
                f"-Dspark.worker.resource.gpu.amount={group.gpus_per_node}",
                "-Dspark.worker.resource.gpu.discoveryScript=/opt/gpuspark/getGpusResources.sh",
            ]
            assert env["SPARK_LOCAL_DIRS"] == ",".join(group.local_dirs)
            assert ("SPARK_MASTER_HOST" in env) == (host == "dgx01")
    dgx01 = _env(tmp_path / "hosts" / "dgx01" / "spark-env.sh")
    assert dgx01["SPARK_MASTER_HOST"] == "dgx01" and dgx01["SPARK_MASTER_PORT"] == "7077"
    assert dgx01["SPARK_HISTORY_OPTS"] == (
        "-Dspark.history.fs.logDirectory=hdfs://namenode:8020/gpuspark/spark-events"
    )
    assert {k: v for k, v in dgx01.items() if k.startswith(("NCCL", "GLOO"))} == {
        "NCCL_SOCKET_IFNAME": "=ens1f0",
        "GLOO_SOCKET_IFNAME": "ens1f0",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "NCCL_IB_GID_INDEX": "3",
    }
    assert not any(k.startswith("NCCL") for k in _env(tmp_path / "hosts/l40s01/spark-env.sh"))


def test_worker_memory_leaves_a_tenth_to_the_system() -> None:
    env = standalone_files(load_spec(EXAMPLE)).files["hosts/dgx02/spark-env.sh"]
    assert "export SPARK_WORKER_MEMORY=1843g" in env  # 2048 GB less 10 %, rounded down


def test_a_master_outside_the_nodes_gets_a_folder_of_its_own() -> None:
    rendered = standalone_files(_spec(master="spark://head01:7077"))
    env = rendered.files["hosts/head01/spark-env.sh"]
    assert "export SPARK_MASTER_HOST=head01" in env and "SPARK_WORKER_CORES" not in env
    assert rendered.hosts["head01"][-2:] == [
        "systemd/spark-master.service",
        "systemd/spark-history-server.service",
    ]
    assert "systemd/spark-worker.service" in rendered.hosts["dgx01"]
    assert any("head01 is a master host outside [[nodes]]" in n for n in rendered.notes)


def test_master_named_by_address_is_that_node(tmp_path: Path) -> None:
    spec = _spec(
        [{"hosts": ["dgx01", "dgx02"], "addresses": ["192.0.2.11", "192.0.2.12"]}],
        master="spark://192.0.2.11:7077",
    )
    rendered = standalone_files(spec)
    assert set(rendered.hosts) == {"dgx01", "dgx02"}
    assert "export SPARK_MASTER_HOST=192.0.2.11" in rendered.files["hosts/dgx01/spark-env.sh"]


def test_workers_file_lists_every_host() -> None:
    text = standalone_files(_two_groups()).files["workers"]
    hosts = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert hosts == ["dgx01", "dgx02", "l40s01"]


def test_spark_defaults_are_render_sparks() -> None:
    spec = load_spec(EXAMPLE)
    files = standalone_files(spec).files
    for name, content in render_spark(spec).items():
        assert files[name] == content


def test_not_a_standalone_master_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.toml"
    spec.write_text(example_spec().replace('master = "spark://dgx01:7077"', 'master = "yarn"'))
    assert main(["render", "standalone", "--spec", str(spec), "-o", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- nftables


def _expected_ports(spec: ClusterSpec) -> list[str]:
    rank_last = spec.monitoring.metrics_port + 8 - 1 + RANK_PORT_TRIES - 1
    return [
        "7077", "8080", "7078", "8081", "18080", "4040-4056",
        str(names.DCGM_PORT), str(names.NODE_EXPORTER_PORT),
        f"{spec.monitoring.metrics_port}-{rank_last}", "32768-60999",
    ]  # fmt: skip


def test_nftables_names_every_port_and_only_cluster_sources() -> None:
    spec = _two_groups()
    text = standalone_files(spec, allow=["198.51.100.0/24"]).files["nftables/gpuspark.nft"]
    assert "define gpuspark_hosts_v4 = { 192.0.2.11, 192.0.2.12, l40s01, 198.51.100.0/24 }" in text
    for port in _expected_ports(spec):
        rule = f"ip saddr $gpuspark_hosts_v4 tcp dport {port} accept comment "
        assert rule in text, port
        assert re.search(rf"^#   {port}\s+\S", text, re.M), port
    drop = text.split("tcp dport { ")[1].split(" }")[0]
    assert drop == "4040-4056, 7077-7078, 8080-8081, 9100, 9400, 9700-9770, 18080"
    assert RANK_PORT_TRIES == _PORT_TRIES  # the exporter's own window


def test_fixed_spark_ports_are_opened() -> None:
    data = parse_spec(example_spec()).model_dump()
    data["spark"]["conf"].update({"spark.driver.port": "40000", "spark.blockManager.port": "40100"})
    text = standalone_files(ClusterSpec.model_validate(data)).files["nftables/gpuspark.nft"]
    assert 'tcp dport 40000-40016 accept comment "Spark spark.driver.port"' in text
    assert 'tcp dport 40100-40116 accept comment "Spark spark.blockManager.port"' in text


def _nft_check(path: Path) -> subprocess.CompletedProcess[str]:
    assert NFT is not None
    return subprocess.run([NFT, "-c", "-f", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(NFT is None, reason="nft is not installed (apt-get install nftables)")
def test_nftables_file_parses(tmp_path: Path) -> None:
    example = _spec([{"addresses": ["192.0.2.11", "192.0.2.12"]}])
    v6 = _spec([{"addresses": ["192.0.2.11", "2001:db8::12"]}])
    # Host names: nft resolves them while loading, so only names this machine knows parse.
    by_name = _spec(
        [{"hosts": ["localhost"], "gpus_per_node": 16}], master="spark://localhost:7077"
    )
    for i, spec in enumerate((example, v6, by_name, _two_groups("192.0.2.21"))):
        path = tmp_path / f"{i}.nft"
        path.write_text(
            standalone_files(spec, allow=["198.51.100.7"]).files["nftables/gpuspark.nft"]
        )
        out = _nft_check(path)
        assert out.returncode == 0, out.stderr
    text = (tmp_path / "1.nft").read_text()
    assert "define gpuspark_hosts_v6 = { 2001:db8::12 }" in text
    assert "ip6 saddr $gpuspark_hosts_v6 tcp dport 7077 accept" in text


@pytest.mark.skipif(NFT is None, reason="nft is not installed (apt-get install nftables)")
def test_nft_check_catches_a_broken_file(tmp_path: Path) -> None:
    text = standalone_files(_two_groups()).files["nftables/gpuspark.nft"]
    path = tmp_path / "bad.nft"
    path.write_text(text.replace("tcp dport 7077 accept", "tcp dport 70777 accept"))
    assert _nft_check(path).returncode != 0


def test_allow_refuses_what_is_not_an_address(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (
        main(
            ["render", "standalone", "--spec", str(EXAMPLE), "-o", str(out), "--allow", "promhost"]
        )
        == 1
    )
    assert not out.exists()


# ----------------------------------------------------------------------------- the command


def test_command_writes_the_tree_and_lists_files_per_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["render", "standalone", "--spec", str(EXAMPLE), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["hosts"]) == {"dgx01", "dgx02"}
    for host, files in report["hosts"].items():
        assert str(out / "hosts" / host / "spark-env.sh") in files
        assert all(Path(f).is_file() for f in files)
    assert str(out / "systemd" / "spark-master.service") in report["hosts"]["dgx01"]
    assert str(out / "systemd" / "spark-master.service") not in report["hosts"]["dgx02"]
    files = {str(p) for p in out.rglob("*") if p.is_file()}
    assert sorted(report["written"]) == sorted(files - {str(out / ".gpuspark-render.json")})
    assert str(out / ".gpuspark-render.json") in files  # what render owns (tests/cluster)
    assert any("gives no addresses" in note for note in report["notes"])
    assert (out / "getGpusResources.sh").stat().st_mode & 0o111


def test_command_prints_without_out(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSPARK_SPEC", str(EXAMPLE))
    assert main(["render", "standalone"]) == 0
    text = capsys.readouterr().out
    assert "# ==> hosts/dgx02/spark-env.sh <==" in text and "# ==> workers <==" in text
    assert main(["render", "standalone", str(EXAMPLE)]) == 0  # the older argument form
    assert capsys.readouterr().out == text


def test_rendering_is_deterministic() -> None:
    assert standalone_files(_two_groups()).files == standalone_files(_two_groups()).files


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--spark-home", "opt/spark"),
        ("--node-exporter", "/usr/bin/node exporter"),
        ("--user", "a b"),
    ],
)
def test_paths_on_the_hosts_must_be_absolute(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "standalone", "--spec", str(EXAMPLE), option, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: Invalid value for '{option}'")
