"""nvidia-smi and ibstat parsers on outputs kept under tests/doctor/data/ (transcribed in the
tools' formats as real captures show them - see data/README.md for the public captures checked:
the default table of drivers 470, 535, 550 and 580, ``-q`` of Volta, Ampere and Hopper,
``--query-gpu --format=csv``, ``ibstat`` with InfiniBand and RoCE ports)."""

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
    assert smi.memory_total_mib == [81920, 81920]


def test_default_table_of_an_older_driver() -> None:
    smi = parse_nvidia_smi(_read("nvidia-smi-v100-470.txt"))
    assert (smi.driver_version, smi.cuda_version) == ("470.103.01", "11.4")
    assert smi.gpus == ["Tesla V100-SXM2..."]
    assert smi.memory_total_mib == [16160]


def test_default_table_550_layout_with_mig_and_process_tables() -> None:
    """550+ widened the Bus-Id column (3 leading spaces); the "MIG devices" rows and the
    "Processes" rows below the GPU table are not GPUs."""
    smi = parse_nvidia_smi(_read("nvidia-smi-h100-550.txt"))
    assert (smi.driver_version, smi.cuda_version) == ("550.127.08", "12.4")
    assert smi.gpus == ["NVIDIA H100 80GB HBM3"] * 4
    assert smi.volatile_uncorrectable == [0, 0, 0, 0]
    assert smi.memory_total_mib == [81559] * 4


def test_default_table_580_layout_ecc_off_and_fan_error() -> None:
    """580 draws the header's lower border with ``+``; ECC disabled shows ``Off``, a fan it
    cannot read ``ERR!``."""
    smi = parse_nvidia_smi(_read("nvidia-smi-l40s-580.txt"))
    assert (smi.driver_version, smi.cuda_version) == ("580.82.07", "13.0")
    assert smi.gpus == ["NVIDIA L40S", "NVIDIA L40S"]
    assert smi.volatile_uncorrectable == [None, 0]
    assert smi.memory_total_mib == [46068, 46068]


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
    assert (clean.remapped_uncorrectable, bad.remapped_uncorrectable) == (0, 1)
    assert bad.reset_required is None  # no "GPU Reset Status" section in this output


def test_query_hopper_sram_parity_and_sec_ded_counted_once() -> None:
    """Hopper (and Ampere on 550+) split SRAM uncorrectable into Parity and SEC-DED and add an
    "Aggregate Uncorrectable SRAM Sources" breakdown, which must not be added again."""
    driver, cuda, (clean, bad) = parse_nvidia_smi_q(_read("nvidia-smi-q-h100.txt"))
    assert (driver, cuda) == ("550.127.08", "12.4")
    assert (clean.volatile_uncorrectable, clean.aggregate_uncorrectable) == (0, 0)
    assert (clean.reset_required, clean.remapped_uncorrectable) == (False, 0)
    assert (bad.volatile_uncorrectable, bad.aggregate_uncorrectable) == (1, 3)
    assert (bad.reset_required, bad.remapped_uncorrectable, bad.remap_pending) == (True, 2, False)


def test_query_retired_pages_and_double_bit_totals_on_volta() -> None:
    _, _, (gpu,) = parse_nvidia_smi_q(_read("nvidia-smi-q-v100.txt"))
    assert gpu.volatile_uncorrectable == 1 and gpu.aggregate_uncorrectable == 1
    assert gpu.retired_pending is True and gpu.remap_pending is None
    assert gpu.remapped_uncorrectable is None  # "Remapped Rows : N/A" on one line


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


def test_ibstat_mixed_cas_dual_port_fdr10_and_stderr_noise() -> None:
    ports = parse_ibstat(_read("ibstat-mixed.txt"))
    assert [
        (p.ca, p.port, p.state, p.physical_state, p.rate_gbps, p.link_layer) for p in ports
    ] == [
        ("mlx5_0", 1, "Active", "LinkUp", 400.0, "InfiniBand"),
        ("mlx5_1", 1, "Initializing", "LinkUp", 400.0, "InfiniBand"),
        ("mlx5_2", 1, "Active", "LinkUp", 100.0, "Ethernet"),
        ("mlx5_2", 2, "Down", "Disabled", 40.0, "Ethernet"),
        ("mlx4_0", 1, "Active", "LinkUp", 40.0, "InfiniBand"),
    ]
    assert [p.healthy for p in ports] == [True, False, True, False, True]


def test_ibstat_pasted_with_spaces_reads_the_same() -> None:
    """ibstat writes tabs; copies pasted into tickets and logs often carry spaces instead."""
    for name in ("ibstat-hdr.txt", "ibstat-mixed.txt"):
        text = _read(name)
        assert parse_ibstat(text.expandtabs(8)) == parse_ibstat(text) != []


def test_ibstat_of_one_port() -> None:
    """``ibstat mlx5_4 1``: a ``CA: 'name'`` line and unindented port fields."""
    (port,) = parse_ibstat(_read("ibstat-one-port.txt"))
    assert (port.ca, port.port, port.state, port.physical_state) == ("mlx5_4", 1, "Down", "Polling")
    assert port.rate_gbps == 10.0 and not port.healthy


def test_empty_outputs() -> None:
    assert parse_ibstat("") == [] and parse_query_csv("") == []
    smi = parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate")
    assert smi.driver_version is None and smi.gpus == []
