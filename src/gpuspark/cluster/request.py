"""What ``gpuspark cluster up`` asks for against the cluster that already runs.

``cluster up`` on a running cluster starts nothing. That is right when the request is the
running cluster (the same command twice); a request for another shape is refused with both
shapes and the command that gives what was asked, instead of being ignored. Only what the
request names is compared: ``--workers``, ``--cores``, ``--memory``, ``--gpus``, ``--hosts``,
``--secure``, and with ``--spec`` the whole shape the spec gives (a plain ``cluster up``
asks for nothing in particular and matches any running cluster).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuspark.cluster.shape import EmbeddedShape, fraction, parse_memory_mb, worker_address
from gpuspark.errors import ClusterError

if TYPE_CHECKING:
    from gpuspark.cluster.local import LocalCluster
    from gpuspark.cluster.state import ClusterState

__all__ = [
    "address_span",
    "check_request",
    "describe_shape",
    "request_differences",
    "running_addresses",
    "up_command",
]

# Shape fields a --spec request compares, with their names in messages.
_SPEC_FIELDS = {
    "executor_gpus": "GPUs per executor",
    "executor_cores": "cores per executor",
    "executor_memory": "executor memory",
    "task_gpu_amount": "GPU per data task",
}


def describe_shape(
    shape: EmbeddedShape,
    addresses: Sequence[str],
    secure: bool,
    *,
    hosts: int = 0,
    netns: bool = False,
) -> str:
    """``2 workers of 8 cores, 4g, 2 GPUs each on 127.0.0.1`` (and hosts, security).

    ``addresses``: the workers' distinct addresses, as the cluster records them (a running
    one) or will bind them (a request); ``hosts``: ``--hosts``, 0 for none; ``netns``: the
    hosts are network namespaces (a request's addresses are picked at start: none given).
    """
    if hosts or netns:
        where = _count(hosts or len(addresses), "host")
        where += f" {address_span(addresses)}" if addresses else ""
        where += " in network namespaces" if netns else ""
    else:
        where = address_span(addresses)
    text = (
        f"{_count(shape.workers, 'worker')} of {_count(shape.cores_per_worker, 'core')}, "
        f"{shape.memory_per_worker}, {_count(shape.gpus_per_worker, 'GPU')} each on {where}"
    )
    return text + (", secure" if secure else "")


def address_span(addresses: Sequence[str]) -> str:
    """``198.18.0.2-3`` for consecutive IPv4 addresses of one /24, else ``a, b, c``."""
    parts = [a.rsplit(".", 1) for a in addresses]
    if len(parts) > 1 and all(len(p) == 2 and p[1].isdigit() for p in parts):
        nets, last = {p[0] for p in parts}, [int(p[1]) for p in parts]
        if len(nets) == 1 and last == list(range(last[0], last[0] + len(last))):
            return f"{parts[0][0]}.{last[0]}-{last[-1]}"
    return ", ".join(addresses)


def running_addresses(state: ClusterState, shape: EmbeddedShape) -> list[str]:
    """The running cluster's worker addresses as its state records them, as ``cluster
    status`` shows them: the namespace hosts' (``--netns``), else each worker's, else (no
    worker recorded yet) where its workers were to bind."""
    if state.netns is not None and state.netns.hosts:
        found = [h.address for h in state.netns.hosts]
    elif state.workers:
        found = [w.host or state.host for w in state.workers]
    else:
        found = [worker_address(i, state.hosts or None, state.host) for i in range(shape.workers)]
    return list(dict.fromkeys(found))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _value(shape: EmbeddedShape, name: str) -> Any:
    value = getattr(shape, name)
    if name.endswith("memory") or name == "memory_per_worker":
        return parse_memory_mb(value)
    return value


def _named(asked: LocalCluster) -> list[tuple[str, str]]:
    """(shape field, message name) of what the request names."""
    given = asked.overrides
    fields = [
        ("workers", "workers", "workers"),
        ("cores", "cores_per_worker", "cores per worker"),
        ("memory", "memory_per_worker", "memory per worker"),
        ("gpus", "gpus_per_worker", "GPUs per worker"),
    ]
    named = [(field, label) for option, field, label in fields if given[option] is not None]
    if asked.spec is not None:
        named = [(field, label) for _option, field, label in fields]
        named += list(_SPEC_FIELDS.items())
    return named


def _shown(shape: EmbeddedShape, name: str) -> str:
    value = getattr(shape, name)
    return fraction(value) if isinstance(value, float) else str(value)


def request_differences(
    asked: LocalCluster, running: LocalCluster, want: EmbeddedShape | None = None
) -> list[str]:
    """What ``asked`` names that ``running`` is not, as ``"workers 2 -> 3"`` (empty: the
    request is the running cluster). ``want``: ``asked``'s planned shape, if known."""
    state, now = running.state, running.shape
    if state is None or now is None:
        return []
    want = want or asked.plan_shape()
    diffs = [
        f"{label} {_shown(now, name)} -> {_shown(want, name)}"
        for name, label in _named(asked)
        if _value(now, name) != _value(want, name)
    ]
    if asked.hosts is not None and asked.hosts != state.hosts:
        diffs.append(f"hosts {state.hosts or 'none'} -> {asked.hosts}")
    if asked.secure and not state.secure:
        diffs.append("security off -> on")
    return diffs + _netns_differences(asked, state.netns)


def _netns_differences(asked: LocalCluster, net: Any) -> list[str]:
    """``--netns`` hosts (and their link rate) asked for against the running cluster's."""
    if asked.netns != (net is not None):
        return [f"network namespaces {'on' if net else 'off'} -> {'on' if asked.netns else 'off'}"]
    rate = asked.link_rate or ""
    if net is not None and rate != (net.link_rate or ""):
        return [f"link rate {net.link_rate or 'none'} -> {rate or 'none'}"]
    return []


def up_command(
    asked: LocalCluster, spec_path: str | None = None, state_dir: str | None = None
) -> str:
    """The ``gpuspark cluster up`` line that asks for what ``asked`` asks for."""
    words = ["gpuspark", "cluster", "up"]
    if spec_path is not None:
        words += ["--spec", spec_path]
    for option, value in asked.overrides.items():
        if value is not None:
            words += [f"--{option}", str(value)]
    if asked.hosts is not None:
        words += ["--hosts", str(asked.hosts)]
    if asked.secure:
        words.append("--secure")
    if asked.netns:
        words.append("--netns")
    if asked.link_rate:
        words += ["--link-rate", asked.link_rate]
    if state_dir is not None:
        words += ["--state-dir", state_dir]
    return shlex.join(words)


def check_request(
    asked: LocalCluster,
    running: LocalCluster,
    *,
    spec_path: str | None = None,
    state_dir: str | None = None,
) -> None:
    """Refuse, naming both shapes and the commands that give what was asked, a request that
    differs from the running cluster; nothing when it is the same (see the module)."""
    shape = asked.plan_shape()
    diffs = request_differences(asked, running, shape)
    if not diffs or running.state is None or running.shape is None:
        return
    state = running.state
    here = running_addresses(state, running.shape)
    netns = state.netns is not None
    now = describe_shape(running.shape, here, state.secure, hosts=state.hosts, netns=netns)
    # a --netns request's addresses are picked when it starts
    asked_at = [] if asked.netns else [asked.worker_host(i) for i in range(shape.workers)]
    want = describe_shape(
        shape,
        list(dict.fromkeys(asked_at)),
        asked.secure,
        hosts=asked.hosts or 0,
        netns=asked.netns,
    )
    down = "gpuspark cluster down" + (f" --state-dir {shlex.quote(state_dir)}" if state_dir else "")
    raise ClusterError(
        f"the embedded cluster at {running.master_url} runs {now}; this request is {want} "
        f"({'; '.join(diffs)}); nothing started",
        remedy=f"to get what was asked: `{down} && {up_command(asked, spec_path, state_dir)}`",
    )
