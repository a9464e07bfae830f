"""dcgm-exporter's counters file (``dcgm-exporter -f FILE``): its default counters plus every
DCGM field that gpuspark's alert rules and dashboards read.

The profiling fields (``DCGM_FI_PROF_SM_ACTIVE`` and the other ``DCGM_FI_PROF_*``) are not all
collected by default; a rule on a field dcgm-exporter does not collect never fires, and a panel
on it stays empty. The format is dcgm-exporter's (``etc/default-counters.csv``): ``#`` starts a
comment, every other line is ``DCGM FIELD, Prometheus metric type, help message`` (three
fields, so a help text has no comma).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "DCGM_EXPORTER_RELEASE",
    "DEFAULT_COUNTERS",
    "KNOWN_FIELDS",
    "counters_csv",
    "dcgm_field_names",
]

DCGM_EXPORTER_RELEASE = "4.5.3-4.8.2"
"""The dcgm-exporter release whose ``etc/default-counters.csv`` :data:`DEFAULT_COUNTERS`
copies (unchanged since 4.4.2-4.7.1)."""

_Counter = tuple[str, str, str]

DEFAULT_COUNTERS: tuple[_Counter, ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and"
        " data payloads - in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and"
        " data payloads - in bytes per second.",
    ),
)
"""The counters dcgm-exporter collects by default: the uncommented lines of its
``etc/default-counters.csv`` (:data:`DCGM_EXPORTER_RELEASE`), in its order."""

KNOWN_FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_PROF_SM_ACTIVE": (
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
    ),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gauge", "The ratio of number of warps resident on an SM."),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": ("gauge", "Ratio of cycles the fp64 pipes are active."),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ("gauge", "Ratio of cycles the fp32 pipes are active."),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": ("gauge", "Ratio of cycles the fp16 pipes are active."),
    "DCGM_FI_DEV_POWER_VIOLATION": (
        "counter",
        "Throttling duration due to power constraints (in ns).",
    ),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (
        "counter",
        "Throttling duration due to thermal constraints (in ns).",
    ),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (
        "counter",
        "Total number of single-bit volatile ECC errors.",
    ),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (
        "counter",
        "Total number of double-bit volatile ECC errors.",
    ),
    "DCGM_FI_DEV_RETIRED_SBE": (
        "counter",
        "Total number of retired pages due to single-bit errors.",
    ),
    "DCGM_FI_DEV_RETIRED_DBE": (
        "counter",
        "Total number of retired pages due to double-bit errors.",
    ),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("counter", "Total number of NVLink retries."),
}
"""Fields outside the default set, with the type and help the commented lines of
dcgm-exporter's own CSV files give them (``default-counters.csv``, ``dcp-metrics-included.csv``)."""

_FIELD = re.compile(r"\bDCGM_FI_[A-Z0-9_]+\b")


def dcgm_field_names(texts: Iterable[str]) -> set[str]:
    """Every ``DCGM_FI_*`` name in ``texts`` (rendered rules, dashboards)."""
    return {name for text in texts for name in _FIELD.findall(text)}


def _line(name: str, kind: str, help_text: str) -> str:
    return f"{name}, {kind}, {help_text}\n"


def counters_csv(cluster: str, used: Iterable[str]) -> str:
    """The counters file: :data:`DEFAULT_COUNTERS`, then each field in ``used`` that is not
    among them (a ``ValueError`` for one whose type :data:`KNOWN_FIELDS` does not give)."""
    default = {name for name, _, _ in DEFAULT_COUNTERS}
    extra = sorted(set(used) - default)
    unknown = [name for name in extra if name not in KNOWN_FIELDS]
    if unknown:
        raise ValueError(
            f"no metric type known for {', '.join(unknown)}: add it to KNOWN_FIELDS in"
            f" {__name__} with the type and help dcgm-exporter's CSV files give it"
        )
    lines = [
        f"# dcgm-exporter counters for cluster '{cluster}', rendered by gpuspark from its spec.\n",
        "# Edit the spec and render again rather than editing this file.\n",
        "# Format\n",
        "# If line starts with a '#' it is considered a comment\n",
        "# DCGM FIELD, Prometheus metric type, help message\n",
        "\n",
        f"# dcgm-exporter's default counters (release {DCGM_EXPORTER_RELEASE})\n",
    ]
    lines += [_line(*counter) for counter in DEFAULT_COUNTERS]
    if extra:
        lines.append(
            "\n# Read by gpuspark's alert rules and dashboards; not collected by default\n"
        )
        lines += [_line(name, *KNOWN_FIELDS[name]) for name in extra]
    return "".join(lines)
