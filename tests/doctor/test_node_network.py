"""The spec's network fields per node group (``socket_ifname``, ``ib_hca``, ``roce_gid_index``,
``ib_rate_gbps``): their validation, :func:`gpuspark.spec.network.network_env`, and
``gpuspark doctor``'s checks of them against a node.

ibstat outputs are the recorded transcriptions of ``tests/doctor/data`` (see its README: fake
readings in the real format, no HCA exists on this machine); interfaces are this machine's
real ones (``lo`` always exists) or, for states this machine cannot show, fake sysfs files
written into a temporary folder, labelled as such.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from gpuspark.doctor.node import (
    hca_checks,
    interface_checks,
    interface_state,
    node_checks,
    spec_network_checks,
)
from gpuspark.doctor.parsers import parse_ibstat
from gpuspark.doctor.report import Status
from gpuspark.errors import SpecError
from gpuspark.spec import ClusterSpec, example_spec, parse_spec
from gpuspark.spec.network import hca_ports, network_env, node_group_for

DATA = Path(__file__).parent / "data"
HDR = parse_ibstat((DATA / "ibstat-hdr.txt").read_text())  # recorded: mlx5_0 200, _1 Down, _2 100
MIXED = parse_ibstat((DATA / "ibstat-mixed.txt").read_text())  # recorded: mlx5_2 port 2 Down


def _spec(**group: Any) -> ClusterSpec:
    """The example spec with its node group's fields replaced (validated again)."""
    data = parse_spec(example_spec()).model_dump()
    data["nodes"][0].update(group)
    return ClusterSpec.model_validate(data)


def _spec_error(**group: Any) -> str:
    text = example_spec()
    extra = "".join(f"{k} = {v}\n" for k, v in group.items())
    with pytest.raises(SpecError) as err:
        parse_spec(text.replace("gpus_per_node = 8\n", "gpus_per_node = 8\n" + extra), "c.toml")
    return str(err.value)


# ----------------------------------------------------------------------------- the fields


def test_fields_are_optional_and_the_example_validates() -> None:
    group = parse_spec(example_spec()).nodes[0]
    assert (group.socket_ifname, group.ib_hca, group.roce_gid_index) == (None, None, None)
    assert group.addresses is None and group.local_dirs == ["/var/lib/spark/local"]
    assert network_env(parse_spec(example_spec()), "dgx01") == {}


def test_hca_list_or_nccls_own_form() -> None:
    assert _spec(ib_hca="=mlx5_0:1,mlx5_1:1").nodes[0].ib_hca == ["mlx5_0:1", "mlx5_1:1"]
    assert _spec(ib_hca=["mlx5_0", "mlx5_3:2"]).nodes[0].ib_hca == ["mlx5_0", "mlx5_3:2"]
    assert hca_ports(_spec(ib_hca=["mlx5_0", "mlx5_3:2"]).nodes[0]) == [
        ("mlx5_0", None),
        ("mlx5_3", 2),
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("socket_ifname", '"^docker"', 'nodes[0].socket_ifname="^docker": must name interfaces'),
        ("socket_ifname", '"a-name-longer-than-15"', "must name interfaces exactly"),
        ("ib_hca", '["mlx5 0"]', "'mlx5 0' is not an HCA as ibstat names it"),
        ("ib_hca", '["mlx5_0:x"]', "is not an HCA"),
        ("ib_hca", '["mlx5_0", "mlx5_0"]', "lists an HCA twice"),
        ("ib_hca", "[]", "must name at least one HCA"),
        ("roce_gid_index", "-1", "roce_gid_index=-1: must be greater than or equal to 0"),
        ("ib_rate_gbps", "0", "ib_rate_gbps=0: must be greater than 0"),
        ("addresses", '["10.0.0.1"]', "has 1 entries for 2 hosts"),
        ("addresses", '["10.0.0.1", "dgx02"]', "'dgx02' is not an IP address"),
        ("addresses", '["10.0.0.1", "10.0.0.1"]', "lists an address twice"),
        ("local_dirs", '["raid/spark"]', "must be an absolute path"),
        ("local_dirs", '["/a,b"]', "no spaces or commas"),
        ("local_dirs", '["/raid", "/raid/"]', "lists a directory twice"),
    ],
)
def test_bad_network_fields_name_field_and_value(field: str, value: str, message: str) -> None:
    assert message in _spec_error(**{field: value})


# ----------------------------------------------------------------------------- network_env


def test_network_env_of_a_host() -> None:
    spec = _spec(
        addresses=["10.0.0.11", "10.0.0.12"],
        socket_ifname="ens1f0,ens1f1",
        ib_hca="mlx5_0:1,mlx5_1:1",
        roce_gid_index=3,
    )
    # NCCL matches names by prefix (mlx5_1 would take mlx5_10 too): the exact "=" form.
    want = {
        "NCCL_SOCKET_IFNAME": "=ens1f0,ens1f1",
        "GLOO_SOCKET_IFNAME": "ens1f0,ens1f1",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "NCCL_IB_GID_INDEX": "3",
    }
    for host in ("dgx01", "DGX02.cluster.example.com", "10.0.0.12"):
        assert network_env(spec, host) == want, host
    assert network_env(spec, "laptop") == {}
    assert network_env(_spec(socket_ifname="bond0"), "dgx01") == {
        "NCCL_SOCKET_IFNAME": "=bond0",
        "GLOO_SOCKET_IFNAME": "bond0",
    }


def test_node_group_for_matches_short_names_and_addresses() -> None:
    spec = _spec(addresses=["10.0.0.11", "10.0.0.12"])
    assert node_group_for(spec, "dgx02") is spec.nodes[0]
    assert node_group_for(spec, "dgx02.example.com") is spec.nodes[0]
    assert node_group_for(spec, "10.0.0.11") is spec.nodes[0]
    assert node_group_for(spec, "dgx03") is None


# ----------------------------------------------------------------------------- doctor


def test_loopback_of_this_machine_is_up() -> None:
    # Real sysfs: lo exists; its operstate is "unknown" (the loopback driver tracks none).
    assert interface_state("lo") in ("unknown", "up")
    [check] = interface_checks({"lo": interface_state("lo")}, ["lo"])
    assert check.status is Status.OK and "lo operstate" in check.evidence


def test_missing_interface_fails_naming_what_the_node_has() -> None:
    assert interface_state("gsparkx0") is None
    [check] = interface_checks({"gsparkx0": interface_state("gsparkx0")}, ["eth0", "lo"])
    assert check.status is Status.FAILURE
    assert "no interface gsparkx0 on this node (it has eth0, lo)" in check.evidence


def test_interface_that_is_down_fails(tmp_path: Path) -> None:
    # Fake sysfs (written here): an interface whose operstate reads "down".
    (tmp_path / "ens1f0").mkdir()
    (tmp_path / "ens1f0" / "operstate").write_text("down\n")
    state = interface_state("ens1f0", root=str(tmp_path))
    [check] = interface_checks({"ens1f0": state}, ["ens1f0"])
    assert check.status is Status.FAILURE and check.evidence == "ens1f0 is down"
    assert "ip link set ens1f0 up" in check.fix


def test_hcas_against_recorded_ibstat() -> None:
    wanted = [("mlx5_0", None), ("mlx5_1", 1), ("mlx5_2", 1), ("mlx5_7", None)]
    checks = {c.name: c for c in hca_checks(wanted, HDR, 200)}
    assert checks["ib_hca mlx5_0"].status is Status.OK
    assert checks["ib_hca mlx5_0"].evidence == "port 1: State: Active, Rate: 200"
    assert checks["ib_hca mlx5_1:1"].status is Status.FAILURE
    assert "State: Down" in checks["ib_hca mlx5_1:1"].evidence
    assert checks["ib_hca mlx5_2:1"].status is Status.WARNING
    assert "Rate: 100 Gb/s, below the spec's 200 Gb/s" in checks["ib_hca mlx5_2:1"].evidence
    assert checks["ib_hca mlx5_7"].status is Status.FAILURE
    assert "it lists mlx5_0:1, mlx5_1:1, mlx5_2:1" in checks["ib_hca mlx5_7"].evidence


def test_hca_without_port_needs_one_active_port() -> None:
    # Recorded: mlx5_2 has port 1 Active at 100 and port 2 Down/Disabled.
    [any_port] = hca_checks([("mlx5_2", None)], MIXED, 100)
    assert any_port.status is Status.OK and "port 2" not in any_port.evidence
    [port_two] = hca_checks([("mlx5_2", 2)], MIXED, 100)
    assert port_two.status is Status.FAILURE and "State: Down" in port_two.evidence


def test_no_ibstat_is_skipped() -> None:
    [check] = hca_checks([("mlx5_0", None)], None, 200)
    assert check.status is Status.SKIPPED and "infiniband-diags" in check.fix


def test_spec_checks_for_this_host() -> None:
    host = socket.gethostname()
    spec = _spec(hosts=[host, "other"], socket_ifname="lo", ib_hca=["mlx5_0", "mlx5_1"])
    checks = {c.name: c.status for c in spec_network_checks(spec, host, HDR)}
    assert checks == {
        "socket_ifname lo": Status.OK,
        "ib_hca mlx5_0": Status.OK,
        "ib_hca mlx5_1": Status.FAILURE,  # recorded: Down/Polling
    }


def test_spec_rate_defaults_to_the_compute_network() -> None:
    host = socket.gethostname()
    # The example's compute network is 100 Gb/s: mlx5_2 at 100 passes, then fails at 200.
    spec = _spec(hosts=[host, "other"], ib_hca=["mlx5_2"])
    assert [c.status for c in spec_network_checks(spec, host, HDR)] == [Status.OK]
    spec = _spec(hosts=[host, "other"], ib_hca=["mlx5_2"], ib_rate_gbps=200)
    assert [c.status for c in spec_network_checks(spec, host, HDR)] == [Status.WARNING]


def test_no_fields_no_checks_and_unknown_host_is_said() -> None:
    assert spec_network_checks(parse_spec(example_spec()), "dgx01", HDR) == []
    [check] = spec_network_checks(_spec(socket_ifname="lo"), "laptop", HDR)
    assert check.status is Status.INFO and "laptop is in no [[nodes]] group" in check.evidence


def test_node_checks_on_this_machine_check_the_spec_interface() -> None:
    spec = _spec(hosts=[socket.gethostname(), "other"], socket_ifname="lo")
    [check] = [c for c in node_checks(spec) if c.name == "socket_ifname lo"]
    assert check.status is Status.OK
