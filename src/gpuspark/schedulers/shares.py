"""Arithmetic and names shared by the quota renderers: exact percentage shares (largest
remainder), Kubernetes object names, YARN queue names and Spark memory sizes."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuspark._util.yamltext import dump_yaml
from gpuspark.errors import SpecError

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec, NodeGroup

__all__ = [
    "DEFAULT_QUEUE",
    "executor_memory_mib",
    "format_decimal",
    "kube_name",
    "largest_remainder",
    "percent_shares",
    "resource_share",
    "spark_conf_text",
    "unique_names",
    "yaml_documents",
    "yarn_queue_name",
]

DEFAULT_QUEUE = "default"
"""The queue YARN and Volcano always have; it takes the GPUs no team is guaranteed."""

_UNITS_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}


def largest_remainder(weights: list[int], units: int) -> list[int]:
    """Split ``units`` in proportion to ``weights`` into integers that add up to exactly
    ``units`` (Hamilton's method: floors, then one more unit to the largest remainders, ties to
    the earlier entry). All weights zero gives all zeros."""
    whole = sum(weights)
    if whole == 0:
        return [0] * len(weights)
    floors = [w * units // whole for w in weights]
    remainders = [w * units % whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-remainders[i], i))
    for i in order[: units - sum(floors)]:
        floors[i] += 1
    return floors


def percent_shares(gpus: list[int], total: int) -> list[Decimal]:
    """``gpus[i] / total * 100`` to 0.01 %, summing to exactly 100 when ``sum(gpus) == total``."""
    hundredths = largest_remainder([*gpus, total - sum(gpus)], 10000)[: len(gpus)]
    return [Decimal(h) / 100 for h in hundredths]


def format_decimal(value: Decimal) -> str:
    """``12.50`` -> ``12.5``, ``50.00`` -> ``50``: the float form YARN reads."""
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def kube_name(text: str) -> str:
    """``text`` as a DNS-1123 label (lower case, ``-`` for anything else), e.g. a flavor or
    namespace name: ``A100-SXM4-80GB`` -> ``a100-sxm4-80gb``."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")
    return name or "x"


def yarn_queue_name(team: str) -> str:
    """A team's YARN leaf queue: its name, with ``.`` (YARN's path separator) as ``_``."""
    return team.replace(".", "_")


def unique_names(
    spec: ClusterSpec, to_name: Callable[[str], str], scheduler: str, reserved: str
) -> list[str]:
    """The teams' names under ``to_name`` (a ``str -> str`` function); a one-line error when two
    teams map to one name or a team maps to the ``reserved`` name of ``scheduler``."""
    names = [to_name(team.name) for team in spec.teams]
    seen: dict[str, str] = {}
    for team, name in zip(spec.teams, names, strict=True):
        if reserved and name == reserved:
            raise SpecError(
                f"team '{team.name}' would be {scheduler}'s own '{reserved}' queue",
                remedy="rename the team in [[teams]]",
            )
        if name in seen:
            raise SpecError(
                f"teams '{seen[name]}' and '{team.name}' both become {scheduler} name '{name}'",
                remedy="rename one of them in [[teams]]",
            )
        seen[name] = team.name
    return names


def executor_memory_mib(memory: str, overhead: str | None = None) -> int:
    """Spark's ``spark.executor.memory`` plus its overhead, in MiB (the container's size).

    The overhead is ``overhead`` when set, else Spark's default ``max(384m, 10 %)``.
    """
    heap = _mib(memory)
    extra = _mib(overhead) if overhead else max(384, heap // 10)
    return heap + extra


def _mib(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)([kmgtp]?)b?", text.strip().lower())
    if match is None:
        raise SpecError(f"'{text}' is not a Spark memory size", remedy="write it like 4g or 512m")
    number, unit = int(match.group(1)), match.group(2) or "m"
    return max(1, int(number * _UNITS_MIB[unit]))


def resource_share(groups: list[NodeGroup], gpus: int) -> tuple[int, int]:
    """(cores, memory in GiB) that go with ``gpus`` of the GPUs in ``groups``: the same fraction
    of the groups' cores and RAM, rounded down."""
    total_gpus = sum(g.gpus for g in groups)
    cores = sum(g.cpu_cores * len(g.hosts) for g in groups)
    ram = sum(int(g.ram_gb) * len(g.hosts) for g in groups)
    if total_gpus == 0:
        return 0, 0
    return cores * gpus // total_gpus, ram * gpus // total_gpus


def yaml_documents(header: list[str], docs: list[dict[str, Any]]) -> str:
    """``docs`` as one multi-document YAML file, ``header`` lines as ``#`` comments on top."""

    top = "".join(f"# {line}\n" for line in header)
    return top + "---\n".join(dump_yaml(doc) for doc in docs)


def spark_conf_text(title: str, conf: dict[str, str], notes: tuple[str, ...] = ()) -> str:
    """A spark-defaults style file (``key value`` lines) for ``--properties-file``."""
    lines = [f"# {title}\n", *(f"# {note}\n" for note in notes)]
    return "".join(lines + [f"{key} {value}\n" for key, value in conf.items()])
