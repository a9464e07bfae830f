"""nvidia-smi and ibstat parsers on outputs kept under tests/doctor/data/ (written in the tools'
published formats: the default table, ``-q``, ``--query-gpu --format=csv``, ``ibstat``)."""

from __future__ import annotations

from pathlib import Path

from gpuspark.doctor.parsers import (
    parse_ibstat,
    parse_nvidia_smi,
    parse_nvidia_smi_q,
    parse_query_csv,
)

DATA = Path(__file__).parent / "data"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_default_table_driver_cuda_gpus_and_ecc_column() -> None:
    smi = parse_nvidia_smi(_read("nvidia-smi-a100.txt"))
    assert (smi.driver_version, smi.cuda_version) == ("535.104.05", "12.2")
    assert smi.gpus == ["NVIDIA A100-SXM4-80GB"] * 2
    assert smi.volatile_uncorrectable == [0, 2]


def test_default_table_of_an_older_driver() -> None:
    smi = parse_nvidia_smi(_read("nvidia-smi-v100-470.txt"))
    assert (smi.driver_version, smi.cuda_version) == ("470.103.01", "11.4")
    assert smi.gpus == ["Tesla V100-SXM2..."]


def test_query_remapped_rows_and_ecc_per_gpu() -> None:
    driver, cuda, gpus = parse_nvidia_smi_q(_read("nvidia-smi-q-a100.txt"))
    assert (driver, cuda) == ("535.104.05", "12.2")
    clean, bad = gpus
    assert clean.bus_id == "00000000:07:00.0" and clean.product == "NVIDIA A100-SXM4-80GB"
    assert (clean.volatile_uncorrectable, clean.remap_pending, clean.remap_failure) == (
        0,
        False,
        False,
    )
    assert clean.retired_pending is None  # "N/A" on Ampere
    assert (bad.volatile_uncorrectable, bad.remap_pending, bad.remap_failure) == (2, True, False)


def test_query_retired_pages_and_double_bit_totals_on_volta() -> None:
    _, _, (gpu,) = parse_nvidia_smi_q(_read("nvidia-smi-q-v100.txt"))
    assert gpu.volatile_uncorrectable == 1 and gpu.aggregate_uncorrectable == 1
    assert gpu.retired_pending is True and gpu.remap_pending is None


def test_query_csv_keys_without_units() -> None:
    rows = parse_query_csv(_read("nvidia-smi-query.csv"))
    assert [r["index"] for r in rows] == ["0", "1"]
    assert rows[1]["memory.total"] == "81920 MiB"
    assert rows[1]["ecc.errors.uncorrected.volatile.total"] == "2"


def test_ibstat_ports_states_and_rates() -> None:
    ports = parse_ibstat(_read("ibstat-hdr.txt"))
    assert [(p.ca, p.port, p.state, p.rate_gbps) for p in ports] == [
        ("mlx5_0", 1, "Active", 200.0),
        ("mlx5_1", 1, "Down", 10.0),
        ("mlx5_2", 1, "Active", 100.0),
    ]
    assert [p.healthy for p in ports] == [True, False, True]
    assert ports[1].physical_state == "Polling"


def test_ibstat_roce_port_is_ethernet() -> None:
    (port,) = parse_ibstat(_read("ibstat-roce.txt"))
    assert port.link_layer == "Ethernet" and port.healthy


def test_empty_outputs() -> None:
    assert parse_ibstat("") == [] and parse_query_csv("") == []
    smi = parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate")
    assert smi.driver_version is None and smi.gpus == []
