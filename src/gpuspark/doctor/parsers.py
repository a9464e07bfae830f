"""Parsers for the output of ``nvidia-smi`` (default table, ``-q``, ``--query-gpu`` CSV) and
``ibstat``. Pure functions on text, tested on outputs kept under ``tests/doctor/data/``.

nvidia-smi's text is not a stable interface (NVIDIA says so in its man page), so every parser
reads only labelled fields and leaves a value ``None`` when it is absent or ``N/A``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "GpuHealth",
    "IbPort",
    "SmiSummary",
    "parse_ibstat",
    "parse_nvidia_smi",
    "parse_nvidia_smi_q",
    "parse_query_csv",
]

_DRIVER = re.compile(r"Driver Version:\s*([0-9.]+)")
_CUDA = re.compile(r"CUDA Version:\s*([0-9.]+)")
_GPU_ROW = re.compile(
    r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f:.]+)\s+\S+\s*\|"
    r"\s*(\S+)\s*\|$"
)
_MEMORY = re.compile(r"\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_KV = re.compile(r"^(\s*)(\S.*?)\s*: (.*)$")
_HEADER = re.compile(r"^(\s*)(\S.*?)\s*$")


@dataclass(frozen=True)
class SmiSummary:
    """What the default ``nvidia-smi`` table says: driver, CUDA the driver supports, GPUs."""

    driver_version: str | None
    cuda_version: str | None
    """The newest CUDA this driver supports (not the toolkit installed)."""
    gpus: list[str] = field(default_factory=list)
    """GPU names by index (names may be cut short with ``...`` by the table)."""
    volatile_uncorrectable: list[int | None] = field(default_factory=list)
    """The table's "Volatile Uncorr. ECC" column per GPU (``None``: ``N/A``, or ``Off`` when ECC
    is disabled)."""
    memory_total_mib: list[int | None] = field(default_factory=list)
    """Each GPU's memory (the ``Memory-Usage`` column's total) in MiB (``None``: not shown)."""


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's memory-error state from ``nvidia-smi -q``."""

    bus_id: str
    product: str | None = None
    volatile_uncorrectable: int | None = None
    """Uncorrectable ECC errors since the driver loaded (``None``: ECC off or N/A)."""
    aggregate_uncorrectable: int | None = None
    retired_pending: bool | None = None
    """Retired Pages / Pending Page Blacklist (pre-Ampere; ``None``: N/A)."""
    remap_pending: bool | None = None
    """Remapped Rows / Pending: a reset is needed for the remap to take effect (Ampere+)."""
    remap_failure: bool | None = None
    """Remapped Rows / Remapping Failure Occurred: the GPU qualifies for NVIDIA's RMA check."""
    remapped_uncorrectable: int | None = None
    """Remapped Rows / Uncorrectable Error: rows remapped for uncorrectable errors so far."""
    reset_required: bool | None = None
    """GPU Reset Status / Reset Required (drivers 535+; ``None``: not reported)."""


@dataclass(frozen=True)
class IbPort:
    """One port of an InfiniBand host channel adapter, as ``ibstat`` shows it."""

    ca: str
    port: int
    state: str
    physical_state: str
    rate_gbps: float | None
    link_layer: str

    @property
    def healthy(self) -> bool:
        """``State: Active`` and ``Physical state: LinkUp``."""
        return self.state == "Active" and self.physical_state == "LinkUp"


def parse_nvidia_smi(text: str) -> SmiSummary:
    """The default ``nvidia-smi`` table -> :class:`SmiSummary`.

    Reads the rows that name a GPU (index, name, persistence mode, bus id) in every layout
    (470's narrow table, 535's, 550+'s wider Bus-Id column); the "MIG devices" and "Processes"
    tables have no such rows. The memory total comes from the line after a GPU's row."""
    driver = _DRIVER.search(text)
    cuda = _CUDA.search(text)
    gpus: list[str] = []
    ecc: list[int | None] = []
    memory: list[int | None] = []
    lines = [line.rstrip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        row = _GPU_ROW.match(line)
        if row:
            gpus.append(row.group(2))
            ecc.append(_int(row.group(4)))
            used = _MEMORY.search(lines[i + 1]) if i + 1 < len(lines) else None
            memory.append(int(used.group(2)) if used else None)
    return SmiSummary(
        driver.group(1) if driver else None, cuda.group(1) if cuda else None, gpus, ecc, memory
    )


def _int(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None


def _yes(value: str | None) -> bool | None:
    if value is None or value.strip() in ("N/A", ""):
        return None
    return value.strip() == "Yes"


def _sections(text: str) -> list[tuple[tuple[str, ...], str]]:
    """``nvidia-smi -q`` as (path of section names + key, value) pairs, by indentation."""
    stack: list[tuple[int, str]] = []
    out: list[tuple[tuple[str, ...], str]] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        kv = _KV.match(line)
        match = kv or _HEADER.match(line)
        if match is None:
            continue
        indent = len(match.group(1).expandtabs(4))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(name for _, name in stack), match.group(2))
        if kv:
            out.append((path, kv.group(3).strip()))
        else:
            stack.append((indent, match.group(2)))
    return out


def _top_value(pairs: list[tuple[tuple[str, ...], str]], key: str) -> str | None:
    return next((v for p, v in pairs if p == (key,) and v != "N/A"), None)


def parse_nvidia_smi_q(text: str) -> tuple[str | None, str | None, list[GpuHealth]]:
    """``nvidia-smi -q`` -> (driver version, CUDA version, one :class:`GpuHealth` per GPU)."""
    pairs = _sections(text)
    by_gpu: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for path, value in pairs:
        if path[0].startswith("GPU ") and len(path) > 1:
            by_gpu.setdefault(path[0][4:], []).append((path[1:], value))
    gpus = [_gpu_health(bus, rows) for bus, rows in by_gpu.items()]
    return _top_value(pairs, "Driver Version"), _top_value(pairs, "CUDA Version"), gpus


def _uncorrectable(rows: list[tuple[tuple[str, ...], str]], scope: str) -> int | None:
    """Sum of uncorrectable ECC counts under ``ECC Errors/<scope>``: Ampere+ names them
    ``... Uncorrectable``; older GPUs have ``Double Bit/Total``."""
    values = [
        _int(v)
        for p, v in rows
        if p[:2] == ("ECC Errors", scope)
        and ("Uncorrectable" in p[-1] or (len(p) == 4 and p[2] == "Double Bit" and p[3] == "Total"))
    ]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _gpu_health(bus_id: str, rows: list[tuple[tuple[str, ...], str]]) -> GpuHealth:
    get = dict(rows).get
    return GpuHealth(
        bus_id=bus_id,
        product=get(("Product Name",)),
        volatile_uncorrectable=_uncorrectable(rows, "Volatile"),
        aggregate_uncorrectable=_uncorrectable(rows, "Aggregate"),
        retired_pending=_yes(get(("Retired Pages", "Pending Page Blacklist"))),
        remap_pending=_yes(get(("Remapped Rows", "Pending"))),
        remap_failure=_yes(get(("Remapped Rows", "Remapping Failure Occurred"))),
        remapped_uncorrectable=_int(get(("Remapped Rows", "Uncorrectable Error")) or ""),
        reset_required=_yes(get(("GPU Reset Status", "Reset Required"))),
    )


def parse_query_csv(text: str) -> list[dict[str, str]]:
    """``nvidia-smi --query-gpu=... --format=csv`` -> one dict per GPU, keyed by the query
    field names (units such as ``[MiB]`` dropped from the header)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    keys = [re.sub(r"\s*\[.*\]$", "", k.strip()) for k in lines[0].split(",")]
    return [dict(zip(keys, (v.strip() for v in ln.split(",")), strict=False)) for ln in lines[1:]]


_IB_HEADER = re.compile(r"^(?:CA|Switch|Router|iWARP RNIC|\?\?\?):? '([^']+)'$")
_IB_PORT = re.compile(r"^Port (\d+):$")
_IB_PORT_FIELDS = frozenset(
    {"State", "Physical state", "Rate", "Base lid", "LMC", "SM lid", "Capability mask"}
    | {"Port GUID", "Link layer"}
)
_RATE = re.compile(r"^(\d+(?:\.\d+)?)")


def parse_ibstat(text: str) -> list[IbPort]:
    """``ibstat`` (all CAs) or ``ibstat CA PORT`` (one port) -> one :class:`IbPort` per port.

    A port's fields are the known port keys after its ``Port N:`` line, whatever the
    indentation: ibstat writes tabs, but pasted or logged copies often carry spaces, and the
    one-port form has none. CA-level fields (``Firmware version``...) come before the first
    port, and other lines (``ibpanic: ...`` from stderr) are ignored."""
    found: list[tuple[str, dict[str, str]]] = []
    ca = ""
    fields: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        header = _IB_HEADER.match(line)
        port = _IB_PORT.match(line)
        if header:
            ca, fields = header.group(1), None
        elif port:
            fields = {"port": port.group(1)}
            found.append((ca, fields))
        elif fields is not None and ": " in line:
            key, value = line.split(": ", 1)
            if key in _IB_PORT_FIELDS:
                fields[key] = value.strip()
    return [_port(name, f) for name, f in found]


def _port(ca: str, fields: dict[str, str]) -> IbPort:
    """``Rate`` is Gb/s: ``2.5`` for 1x SDR, ``40 (FDR10)`` for FDR10 links."""
    rate = _RATE.match(fields.get("Rate", ""))
    return IbPort(
        ca=ca,
        port=int(fields["port"]),
        state=fields.get("State", ""),
        physical_state=fields.get("Physical state", ""),
        rate_gbps=float(rate.group(1)) if rate else None,
        link_layer=fields.get("Link layer", ""),
    )
