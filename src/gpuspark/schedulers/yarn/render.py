"""Team GPU quotas as YARN Capacity Scheduler queues: ``capacity-scheduler.xml`` (one leaf
queue per team under ``root``, plus ``default`` taking the rest), ``resource-types.xml`` and the
yarn-site GPU snippet, and each team's ``spark.yarn.queue``.

Capacities are GPU shares: a team's guaranteed GPUs / the cluster's GPUs x 100, rounded to
0.01 % by largest remainder so that the queues at each level add up to exactly 100."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, ROUND_UP, Decimal
from typing import TYPE_CHECKING

from gpuspark.schedulers.shares import (
    DEFAULT_QUEUE,
    format_decimal,
    percent_shares,
    resource_share,
    unique_names,
    yarn_queue_name,
)

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec

__all__ = [
    "AM_RESOURCE_PERCENT",
    "CAPACITY_FILE",
    "RESOURCE_CALCULATOR",
    "RESOURCE_TYPES_FILE",
    "YARN_SITE_FILE",
    "YarnQueue",
    "absolute_capacities",
    "parse_yarn_version",
    "render_yarn",
    "yarn_notes",
    "yarn_queues",
]

CAPACITY_FILE = "capacity-scheduler.xml"
RESOURCE_TYPES_FILE = "resource-types.xml"
YARN_SITE_FILE = "yarn-site-gpu.xml"
RESOURCE_CALCULATOR = "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
AM_RESOURCE_PERCENT = Decimal("0.2")
"""Share of a queue that ApplicationMasters (Spark drivers in cluster mode) may hold; YARN's
default 0.1 leaves small GPU queues stuck in ACCEPTED ("Queue's AM resource limit exceeded")."""
ABSOLUTE_SINCE = (3, 4)
_PREFIX = "yarn.scheduler.capacity"
_SCHEDULER = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler"


@dataclass(frozen=True)
class YarnQueue:
    """One leaf queue under ``root``, its values as YARN reads them."""

    name: str
    capacity: str
    maximum_capacity: str
    user_limit_factor: str
    acl_submit_applications: str
    priority: int
    users: tuple[str, ...] = ()


def parse_yarn_version(text: str) -> tuple[int, ...]:
    """``"3.3.6"`` -> ``(3, 3, 6)``; ``ValueError`` naming the text otherwise."""
    try:
        parts = tuple(int(p) for p in text.strip().split("."))
    except ValueError:
        parts = ()
    if not parts or parts[0] < 2:
        raise ValueError(f"{text!r} is not a Hadoop version like 3.3.6")
    return parts


def yarn_queues(spec: ClusterSpec, *, absolute: bool = False) -> list[YarnQueue]:
    """The teams' queues, then ``default`` (percentages, or absolute resources when asked)."""
    names = unique_names(spec, yarn_queue_name, "YARN", DEFAULT_QUEUE)
    if absolute:
        caps, maxes = absolute_capacities(spec)
        rest = spec.total_gpus - sum(t.guaranteed_gpus for t in spec.teams)
        pairs = [(t.guaranteed_gpus, t.max_gpus) for t in spec.teams] + [(rest, spec.total_gpus)]
        factors = [_user_limit_factor(Decimal(g), Decimal(m)) for g, m in pairs]
    else:
        caps, maxes, factors = _percentages(spec)
    queues = [
        YarnQueue(
            name=name,
            capacity=caps[i],
            maximum_capacity=maxes[i],
            user_limit_factor=factors[i],
            acl_submit_applications=_acl(team.members),
            priority=team.priority,
            users=tuple(team.members),
        )
        for i, (name, team) in enumerate(zip(names, spec.teams, strict=True))
    ]
    queues.append(YarnQueue(DEFAULT_QUEUE, caps[-1], maxes[-1], factors[-1], "*", 0))
    return queues


def _percentages(spec: ClusterSpec) -> tuple[list[str], list[str], list[str]]:
    total = spec.total_gpus
    caps = percent_shares([t.guaranteed_gpus for t in spec.teams], total)
    caps.append(Decimal(100) - sum(caps, Decimal(0)))
    maxes = [
        min(Decimal(100), max(cap, _percent(t.max_gpus, total)))
        for cap, t in zip(caps, spec.teams, strict=False)
    ]
    maxes.append(Decimal(100))
    factors = [_user_limit_factor(c, m) for c, m in zip(caps, maxes, strict=True)]
    return [format_decimal(c) for c in caps], [format_decimal(m) for m in maxes], factors


def _percent(gpus: int, total: int) -> Decimal:
    return (Decimal(gpus) * 100 / total).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _user_limit_factor(capacity: Decimal, maximum: Decimal) -> str:
    """One user may grow to the queue's maximum: maximum / capacity (at least 1)."""
    if capacity <= 0:
        return "1"
    factor = (maximum / capacity).quantize(Decimal("0.01"), rounding=ROUND_UP)
    return format_decimal(max(Decimal(1), factor))


def absolute_capacities(spec: ClusterSpec) -> tuple[list[str], list[str]]:
    """Capacities and maximum capacities as ``[memory=MB,vcores=N,yarn.io/gpu=G]`` (YARN >= 3.4):
    each team's guaranteed and max GPUs with the same fraction of cores and memory; ``default``
    gets what is left, and may grow to the whole cluster."""
    total = spec.total_gpus
    whole = _absolute(spec, total)
    caps, maxes = [], []
    used = [0, 0, 0]
    for team in spec.teams:
        caps.append(_absolute(spec, team.guaranteed_gpus))
        maxes.append(_absolute(spec, team.max_gpus))
        used = [u + v for u, v in zip(used, caps[-1], strict=True)]
    caps.append((whole[0] - used[0], whole[1] - used[1], whole[2] - used[2]))
    maxes.append(whole)
    return [_bracket(c) for c in caps], [_bracket(m) for m in maxes]


def _absolute(spec: ClusterSpec, gpus: int) -> tuple[int, int, int]:
    cores, ram_gib = resource_share(list(spec.nodes), gpus)
    return ram_gib * 1024, cores, gpus


def _bracket(values: tuple[int, ...]) -> str:
    memory, vcores, gpus = values
    return f"[memory={memory},vcores={vcores},yarn.io/gpu={gpus}]"


def _acl(members: list[str]) -> str:
    """``user1,user2 `` (users, a space, then groups: none); ``*`` for a team without members."""
    return f"{','.join(members)} " if members else "*"


def _mappings(queues: list[YarnQueue]) -> str:
    return ",".join(f"u:{user}:{q.name}" for q in queues for user in q.users)


def _capacity_properties(queues: list[YarnQueue]) -> list[tuple[str, str, str]]:
    props = [
        (f"{_PREFIX}.resource-calculator", RESOURCE_CALCULATOR, "GPU scheduling requires it."),
        (f"{_PREFIX}.root.queues", ",".join(q.name for q in queues), "One queue per team."),
        (f"{_PREFIX}.root.acl_submit_applications", " ", "Nobody by default: see each queue."),
        (f"{_PREFIX}.root.acl_administer_queue", " ", "Admins come from yarn.admin.acl."),
        (f"{_PREFIX}.queue-mappings", _mappings(queues), "Each member to the team's queue."),
        (f"{_PREFIX}.queue-mappings-override.enable", "false", "An explicit queue wins."),
    ]
    for q in queues:
        path = f"{_PREFIX}.root.{q.name}"
        props += [
            (f"{path}.capacity", q.capacity, "Guaranteed share."),
            (f"{path}.maximum-capacity", q.maximum_capacity, "Ceiling (max_gpus)."),
            (f"{path}.user-limit-factor", q.user_limit_factor, "One user may reach the ceiling."),
            (f"{path}.maximum-am-resource-percent", str(AM_RESOURCE_PERCENT), ""),
            (f"{path}.acl_submit_applications", q.acl_submit_applications, "Who may submit."),
            (f"{path}.priority", str(q.priority), "Higher is served first among siblings."),
            (f"{path}.state", "RUNNING", ""),
        ]
    return props


def yarn_notes(spec: ClusterSpec, *, yarn_version: str = "3.3") -> list[str]:
    """What the rendered YARN files mean and what they leave to the administrator."""
    absolute = parse_yarn_version(yarn_version) >= ABSOLUTE_SINCE
    notes = []
    if not spec.teams:
        notes.append(
            f"the spec has no [[teams]]: every job shares one queue, root.{DEFAULT_QUEUE}, with"
            " all the cluster's GPUs"
        )
    if absolute:
        notes.append(
            f"capacities are absolute [memory=MB,vcores=N,yarn.io/gpu=G] (YARN {yarn_version}"
            " >= 3.4); memory and vcores are the spec's node totals: lower them to what the"
            " NodeManagers offer (yarn.nodemanager.resource.*)"
        )
    else:
        notes.append(
            f"capacities are GPU-share percentages (guaranteed GPUs / {spec.total_gpus} cluster"
            " GPUs x 100) and, with the DominantResourceCalculator, apply to memory and vcores"
            " too; the absolute form [memory=...,vcores=...,yarn.io/gpu=N] is emitted only with"
            " --yarn-version >= 3.4 (older schedulers silently drop GPU from absolute capacities)"
        )
    notes.append(
        "queue ACLs take effect only with yarn.acl.enable=true (in yarn-site-gpu.xml); apply"
        " queue changes with `yarn rmadmin -refreshQueues`"
    )
    notes.append(
        "GPU isolation on the NodeManagers also needs the LinuxContainerExecutor with cgroups"
        " and [gpu] module.enabled=true in container-executor.cfg"
    )
    notes += _team_notes(spec)
    return notes


def _team_notes(spec: ClusterSpec) -> list[str]:
    notes = []
    seen: dict[str, str] = {}
    for team in spec.teams:
        if not team.members:
            notes.append(f"team '{team.name}' lists no members: its queue accepts anyone (*)")
        if team.guaranteed_gpus == 0:
            notes.append(
                f"team '{team.name}' has guaranteed_gpus = 0: its queue has capacity 0 and"
                " gets only idle GPUs, which its user limit may deny; give it a guarantee"
            )
        for user in team.members:
            if user in seen:
                notes.append(
                    f"user '{user}' is in teams '{seen[user]}' and '{team.name}': the queue"
                    f" mapping sends them to '{seen[user]}' unless they set spark.yarn.queue"
                )
            seen.setdefault(user, team.name)
    return notes


def render_yarn(spec: ClusterSpec, *, yarn_version: str = "3.3") -> dict[str, str]:
    """``capacity-scheduler.xml``, ``resource-types.xml``, ``yarn-site-gpu.xml`` and one
    ``spark-yarn-TEAM.conf`` per team (file name -> content)."""
    absolute = parse_yarn_version(yarn_version) >= ABSOLUTE_SINCE
    queues = yarn_queues(spec, absolute=absolute)
    notes = yarn_notes(spec, yarn_version=yarn_version)
    files = {
        CAPACITY_FILE: configuration_xml(
            _capacity_properties(queues), _header(spec, "Capacity Scheduler queues", notes)
        ),
        RESOURCE_TYPES_FILE: configuration_xml(
            [("yarn.resource-types", "yarn.io/gpu", "GPUs as a YARN resource.")],
            _header(spec, "YARN resource types", []),
        ),
        YARN_SITE_FILE: configuration_xml(_yarn_site(), _header(spec, "yarn-site.xml GPU", [])),
    }
    for queue, team in zip(queues, spec.teams, strict=False):
        files[f"spark-yarn-{queue.name}.conf"] = (
            f"# Spark on YARN settings for team '{team.name}' of cluster '{spec.name}'.\n"
            f"spark.yarn.queue {queue.name}\n"
        )
    return files


def _yarn_site() -> list[tuple[str, str, str]]:
    return [
        ("yarn.resourcemanager.scheduler.class", _SCHEDULER, ""),
        ("yarn.acl.enable", "true", "Queue ACLs are ignored without it."),
        ("yarn.nodemanager.resource-plugins", "yarn.io/gpu", "NodeManager GPU plugin."),
        (
            "yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices",
            "auto",
            "All GPUs nvidia-smi finds; or a list like 0:0,1:1.",
        ),
    ]


def _header(spec: ClusterSpec, what: str, notes: list[str]) -> list[str]:
    lines = [
        f"{what} for cluster '{spec.name}', rendered by gpuspark from its spec.",
        "Edit the spec and render again rather than editing this file.",
    ]
    return lines + [f"Note: {n}" for n in notes]


def configuration_xml(properties: list[tuple[str, str, str]], comments: list[str]) -> str:
    """A Hadoop ``<configuration>`` document: ``(name, value, description)`` in order, indented,
    with ``comments`` at the top; the same input always gives the same text."""
    root = ET.Element("configuration")
    for line in comments:
        root.append(ET.Comment(f" {line.replace('--', '')} "))  # no -- inside a comment
    for name, value, description in properties:
        prop = ET.SubElement(root, "property")
        ET.SubElement(prop, "name").text = name
        ET.SubElement(prop, "value").text = value
        if description:
            ET.SubElement(prop, "description").text = description
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
