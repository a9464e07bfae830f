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
from typing import TYPE_CHECKING, Any

from gpuspark.cluster.shape import EmbeddedShape, fraction, parse_memory_mb
from gpuspark.errors import ClusterError

if TYPE_CHECKING:
    from gpuspark.cluster.local import LocalCluster

__all__ = ["check_request", "describe_shape", "request_differences", "up_command"]

# Shape fields a --spec request compares, with their names in messages.
_SPEC_FIELDS = {
    "executor_gpus": "GPUs per executor",
    "executor_cores": "cores per executor",
    "executor_memory": "executor memory",
    "task_gpu_amount": "GPU per data task",
}


def describe_shape(shape: EmbeddedShape, hosts: int, secure: bool, host: str = "127.0.0.1") -> str:
    """``2 workers of 8 cores, 4g, 2 GPUs each on 127.0.0.1`` (and hosts, security)."""
    where = host if not hosts else f"{_count(hosts, 'host')} 127.0.0.2-{1 + hosts}"
    text = (
        f"{_count(shape.workers, 'worker')} of {_count(shape.cores_per_worker, 'core')}, "
        f"{shape.memory_per_worker}, {_count(shape.gpus_per_worker, 'GPU')} each on {where}"
    )
    return text + (", secure" if secure else "")


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
    now = describe_shape(running.shape, state.hosts, state.secure, state.host)
    want = describe_shape(shape, asked.hosts or 0, asked.secure, asked.host)
    down = "gpuspark cluster down" + (f" --state-dir {shlex.quote(state_dir)}" if state_dir else "")
    raise ClusterError(
        f"the embedded cluster at {running.master_url} runs {now}; this request is {want} "
        f"({'; '.join(diffs)}); nothing started",
        remedy=f"to get what was asked: `{down} && {up_command(asked, spec_path, state_dir)}`",
    )
