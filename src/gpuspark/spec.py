"""The cluster spec: one TOML file describing nodes, networks, storage, Spark, teams, alerts.

The models are plain data (pydantic v2, unknown keys forbidden); the rules that tie fields
together (quotas against GPUs, Spark's GPU/CPU slot agreement, ...) run when a spec is built,
so a :class:`ClusterSpec` in hand is always consistent. Every problem becomes a
:class:`~gpuspark.errors.SpecError` with one line of the form
``cluster.toml: teams[1].max_gpus=4 is below guaranteed_gpus=8``.

Public API: :func:`load_spec`, :func:`parse_spec`, :func:`example_spec`, :func:`summary`.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuspark.errors import SpecError, did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "ClusterSpec",
    "ComputeNetwork",
    "Monitoring",
    "Networks",
    "NodeGroup",
    "SparkSettings",
    "StorageNetwork",
    "StorageSettings",
    "Team",
    "example_spec",
    "gpu_slots_per_executor",
    "load_spec",
    "parse_spec",
    "summary",
    "write_example",
]

DEFAULT_DISCOVERY_SCRIPT = "/opt/gpuspark/getGpusResources.sh"

_NAME = r"^[A-Za-z][A-Za-z0-9_.-]*$"
_MEMORY = re.compile(r"^[1-9][0-9]*[kmgtp]?$", re.IGNORECASE)
_HOST_PORT = r"[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}"
_MASTER_FORMS = (
    re.compile(r"^local-cluster$"),
    re.compile(r"^local(\[([1-9][0-9]*|\*)\])?$"),
    re.compile(rf"^spark://{_HOST_PORT}(,{_HOST_PORT})*$"),
    re.compile(r"^yarn$"),
    re.compile(r"^k8s://(https?://)?[A-Za-z0-9_.\-]+(:[0-9]{1,5})?/?$"),
)
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")

# Spark properties owned by typed fields: setting them in [spark.conf] would bypass the checks.
_MANAGED_CONF = {
    "spark.executor.resource.gpu.amount": "executor_gpus",
    "spark.task.resource.gpu.amount": "task_gpu_amount",
    "spark.executor.cores": "executor_cores",
    "spark.task.cpus": "task_cpus",
    "spark.executor.memory": "executor_memory",
    "spark.dynamicAllocation.enabled": "dynamic_allocation",
    "spark.master": "master",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Name = Annotated[str, Field(pattern=_NAME, max_length=64)]
PositiveInt = Annotated[int, Field(gt=0)]
Positive = Annotated[float, Field(gt=0)]
Percent = Annotated[float, Field(gt=0, le=100)]


class NodeGroup(_Model):
    """A group of identical GPU servers."""

    name: Name
    """Group name, e.g. ``dgx-a100``."""
    hosts: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    """Host names of the servers in the group."""
    gpus_per_node: PositiveInt
    gpu_model: Annotated[str, Field(min_length=1)]
    """GPU model as ``nvidia-smi`` names it, e.g. ``A100-SXM4-80GB``."""
    gpu_memory_gb: Positive
    """Memory of one GPU, GB."""
    nvlink_gbytes_per_s: Annotated[float, Field(ge=0)] = 0.0
    """NVLink bandwidth per GPU, gigaBYTES per second as NVIDIA quotes it (A100: 600); 0: none."""
    cpu_cores: PositiveInt
    """Physical CPU cores per server (all sockets)."""
    ram_gb: Positive
    """Host memory per server, GB."""
    nvme_tb: Annotated[float, Field(ge=0)] = 0.0
    """Local NVMe scratch per server, TB."""

    @property
    def gpus(self) -> int:
        """GPUs in the whole group."""
        return len(self.hosts) * self.gpus_per_node


class ComputeNetwork(_Model):
    """The network the GPUs talk over (gradient all-reduce, shuffle)."""

    kind: Literal["infiniband", "ethernet"]
    gbps: Positive
    """Link speed per node, gigaBITS per second."""
    latency_us: Positive
    """One-way latency, microseconds."""


class StorageNetwork(_Model):
    """The network to the shared storage."""

    kind: Literal["infiniband", "ethernet"] = "ethernet"
    gbps: Positive
    """Link speed per node, gigaBITS per second."""


class Networks(_Model):
    """Compute and storage networks."""

    compute: ComputeNetwork
    storage: StorageNetwork


class StorageSettings(_Model):
    """Where datasets, checkpoints and Spark event logs live."""

    root: Annotated[str, Field(min_length=1)] = "gpuspark-data"
    """A local path or a URL (``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``, ``file://``)."""

    @field_validator("root")
    @classmethod
    def _root_form(cls, value: str) -> str:
        if "://" in value and not _URL_SCHEME.match(value):
            raise ValueError("must be a local path or a URL like hdfs://host/path or s3a://bucket/")
        return value


class SparkSettings(_Model):
    """How Spark applications are placed on the cluster."""

    master: str = "local-cluster"
    """``local-cluster`` (the embedded cluster), ``spark://host:port``, ``yarn``, ``k8s://…``."""
    executor_gpus: PositiveInt = 1
    """``spark.executor.resource.gpu.amount``."""
    task_gpu_amount: Positive = 0.25
    """``spark.task.resource.gpu.amount``: a fraction in (0, 1] or a whole number."""
    executor_cores: PositiveInt = 4
    task_cpus: PositiveInt = 1
    executor_memory: str = "4g"
    """JVM memory string, e.g. ``4g`` or ``512m``."""
    dynamic_allocation: bool = True
    """On for data preparation; training (barrier stages) turns it off per application."""
    event_log: bool = True
    event_log_dir: str | None = None
    """Default: ``<storage.root>/spark-events``."""
    discovery_script: str = DEFAULT_DISCOVERY_SCRIPT
    """Where ``getGpusResources.sh`` is installed on every node."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark properties, applied last. Quote dotted keys or nest tables; both work."""

    @field_validator("master")
    @classmethod
    def _master_form(cls, value: str) -> str:
        if not any(form.match(value) for form in _MASTER_FORMS):
            raise ValueError(
                "must be local-cluster, local[N], spark://host:port, yarn or k8s://https://host:port"
            )
        return value

    @field_validator("task_gpu_amount")
    @classmethod
    def _task_amount(cls, value: float) -> float:
        # Spark's rule for custom resources: (0, 1] shares one address, above 1 whole addresses.
        if value > 1 and not float(value).is_integer():
            raise ValueError("must be a fraction in (0, 1] or a whole number, e.g. 0.25 or 2")
        return value

    @field_validator("executor_memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        if not _MEMORY.match(value):
            raise ValueError("must be a JVM memory size like 512m, 4g or 1t")
        return value

    @field_validator("conf", mode="before")
    @classmethod
    def _flatten_conf(cls, value: Any) -> Any:
        return _flatten(value) if isinstance(value, dict) else value


class Team(_Model):
    """A team sharing the cluster: a guaranteed share, a ceiling, a priority."""

    name: Name
    guaranteed_gpus: Annotated[int, Field(ge=0)]
    max_gpus: PositiveInt
    priority: Annotated[int, Field(ge=0)] = 0
    """Higher runs first when GPUs are contended."""
    members: list[str] = Field(default_factory=list)


class Monitoring(_Model):
    """Alert thresholds for the rendered Prometheus rules and ``gpuspark doctor``."""

    gpu_memory_pct: Percent = 95.0
    """Alert when a GPU's framebuffer is fuller than this."""
    gpu_temp_c: Annotated[float, Field(gt=0, le=120)] = 85.0
    """Alert when a GPU runs hotter than this."""
    gpu_util_low_pct: Percent = 10.0
    """A GPU below this utilisation counts as idle."""
    idle_allocated_minutes: Positive = 30.0
    """Alert when an allocated GPU stays idle this long."""
    data_wait_pct: Percent = 25.0
    """Alert when a training step spends more than this share waiting for data."""
    nvme_free_pct: Percent = 10.0
    """Alert when local NVMe scratch has less free space than this."""
    executor_lost_per_hour: Annotated[int, Field(ge=1)] = 3
    """Alert when an application loses more executors than this in an hour."""


class ClusterSpec(_Model):
    """A whole cluster: see ``gpuspark init`` for a commented example."""

    name: Name
    nodes: Annotated[list[NodeGroup], Field(min_length=1)]
    networks: Networks
    storage: StorageSettings = Field(default_factory=StorageSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    teams: list[Team] = Field(default_factory=list)
    monitoring: Monitoring = Field(default_factory=Monitoring)

    @property
    def total_gpus(self) -> int:
        """GPUs in all node groups."""
        return sum(group.gpus for group in self.nodes)

    @property
    def total_hosts(self) -> int:
        """Servers in all node groups."""
        return sum(len(group.hosts) for group in self.nodes)

    @property
    def event_log_dir(self) -> str:
        """Where Spark writes event logs (``spark.event_log_dir`` or under the storage root)."""
        return self.spark.event_log_dir or f"{self.storage.root.rstrip('/')}/spark-events"

    @model_validator(mode="after")
    def _rules(self) -> ClusterSpec:
        problems = _rule_violations(self)
        if problems:
            raise _RuleViolations(problems)
        return self


class _RuleViolations(ValueError):
    """Cross-field problems; each is a complete ``path=value what-is-wrong`` line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# ----------------------------------------------------------------------------- rules


def gpu_slots_per_executor(executor_gpus: int, task_gpu_amount: float) -> int:
    """Tasks one executor can run at once by GPU (Spark: ``floor(1/amount)`` per address)."""
    if task_gpu_amount <= 1:
        return executor_gpus * math.floor(1 / task_gpu_amount + 1e-9)
    return executor_gpus // int(task_gpu_amount)


def _rule_violations(spec: ClusterSpec) -> list[str]:
    return [
        *_unique_names(spec),
        *_team_rules(spec),
        *_executor_fits_node(spec),
        *_slot_rule(spec.spark),
        *_managed_conf(spec.spark),
    ]


def _managed_conf(s: SparkSettings) -> list[str]:
    return [
        f'spark.conf."{key}"={_show(value)} is set by spark.{_MANAGED_CONF[key]}; set that instead'
        for key, value in sorted(s.conf.items())
        if key in _MANAGED_CONF
    ]


def _unique_names(spec: ClusterSpec) -> list[str]:
    problems = []
    seen: dict[str, str] = {}
    for i, group in enumerate(spec.nodes):
        for j, host in enumerate(group.hosts):
            if host in seen:
                problems.append(f'nodes[{i}].hosts[{j}]="{host}" is already listed in {seen[host]}')
            seen.setdefault(host, f"nodes[{i}].hosts")
    for label, names in (
        ("nodes", [g.name for g in spec.nodes]),
        ("teams", [t.name for t in spec.teams]),
    ):
        first: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in first:
                problems.append(
                    f'{label}[{i}].name="{name}" repeats {label}[{first[name]}].name;'
                    " names must be unique"
                )
            first.setdefault(name, i)
    return problems


def _team_rules(spec: ClusterSpec) -> list[str]:
    problems = []
    total = spec.total_gpus
    for i, team in enumerate(spec.teams):
        if team.max_gpus < team.guaranteed_gpus:
            problems.append(
                f"teams[{i}].max_gpus={team.max_gpus}"
                f" is below guaranteed_gpus={team.guaranteed_gpus}"
            )
        if team.max_gpus > total:
            problems.append(
                f"teams[{i}].max_gpus={team.max_gpus} is above the {total} GPUs in the cluster"
            )
    guaranteed = sum(team.guaranteed_gpus for team in spec.teams)
    if guaranteed > total:
        problems.append(
            f"teams[*].guaranteed_gpus add up to {guaranteed}, more than the {total} GPUs in the"
            " cluster; lower the guarantees to a total of at most"
            f" {total}"
        )
    return problems


def _executor_fits_node(spec: ClusterSpec) -> list[str]:
    problems = []
    s = spec.spark
    for i, group in enumerate(spec.nodes):
        if s.executor_gpus > group.gpus_per_node:
            problems.append(
                f"spark.executor_gpus={s.executor_gpus} is above nodes[{i}].gpus_per_node="
                f"{group.gpus_per_node}; an executor runs on one node"
            )
        if s.executor_cores > group.cpu_cores:
            problems.append(
                f"spark.executor_cores={s.executor_cores} is above nodes[{i}].cpu_cores="
                f"{group.cpu_cores}; an executor runs on one node"
            )
    return problems


def _slot_rule(s: SparkSettings) -> list[str]:
    if s.task_gpu_amount > s.executor_gpus:
        return [
            f"spark.task_gpu_amount={_num(s.task_gpu_amount)} is above executor_gpus="
            f"{s.executor_gpus}; a task cannot use more GPUs than its executor has"
        ]
    if s.task_cpus > s.executor_cores:
        return [f"spark.task_cpus={s.task_cpus} is above executor_cores={s.executor_cores}"]
    gpu_slots = gpu_slots_per_executor(s.executor_gpus, s.task_gpu_amount)
    cpu_slots = s.executor_cores // s.task_cpus
    if gpu_slots == cpu_slots:
        return []
    fix = f"set executor_cores={gpu_slots * s.task_cpus}"
    if s.executor_cores % gpu_slots == 0:
        fix += f" or task_cpus={s.executor_cores // gpu_slots}"
    idle = "cores" if cpu_slots > gpu_slots else "GPU shares"
    return [
        f"spark.executor_cores={s.executor_cores} gives {cpu_slots} task slots per executor"
        f" (executor_cores / task_cpus = {s.executor_cores} / {s.task_cpus}) but the GPUs give"
        f" {gpu_slots} (executor_gpus / task_gpu_amount = {s.executor_gpus} /"
        f" {_num(s.task_gpu_amount)}); Spark would leave {idle} idle: {fix}"
    ]


# ----------------------------------------------------------------------------- loading


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster spec file; raise :class:`SpecError` with one clear line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            f"{path}: no such file", remedy="create one with `gpuspark init cluster.toml`"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read: {exc}") from None
    return parse_spec(text, source=str(path))


def parse_spec(text: str, source: str = "<string>") -> ClusterSpec:
    """Validate spec TOML ``text``; ``source`` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(_toml_message(exc, text, source)) from None
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        problems = [p for err in _ordered(exc.errors()) for p in _describe(err)]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SpecError(f"{source}: {problems[0]}{more}") from exc


def _toml_message(exc: Exception, text: str, source: str) -> str:
    lineno = getattr(exc, "lineno", None)
    colno = getattr(exc, "colno", None)
    msg = getattr(exc, "msg", str(exc))
    if lineno is None:  # Python < 3.14 only has "... (at line L, column C)" in the text
        found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        if found:
            lineno, colno = int(found.group(1)), int(found.group(2))
            msg = str(exc)[: found.start()].strip()
        elif "(at end of document)" in str(exc):
            lineno = text.count("\n") + 1
            msg = str(exc).replace("(at end of document)", "").strip()
    where = source if lineno is None else f"{source}:{lineno}"
    where += f":{colno}" if lineno is not None and colno is not None else ""
    return f"{where}: invalid TOML: {msg}"


def _ordered(errors: list[Any]) -> list[Any]:
    """Unknown keys first; drop "missing" for a field an unknown key is a misspelling of."""
    import difflib

    unknown = [tuple(e["loc"]) for e in errors if e["type"] == "extra_forbidden"]
    meant: set[tuple[Any, ...]] = set()
    for loc in unknown:
        close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc[:-1]), n=1, cutoff=0.6)
        meant.update((loc[:-1], name) for name in close)
    kept = [
        e
        for e in errors
        if not (e["type"] == "missing" and (tuple(e["loc"][:-1]), e["loc"][-1]) in meant)
    ]
    return sorted(kept, key=lambda e: e["type"] != "extra_forbidden")


def _describe(err: Any) -> list[str]:
    """One ``path=value problem`` line (or several for cross-field rules) per pydantic error."""
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, _RuleViolations):
        return cause.problems
    if kind == "extra_forbidden":
        return [_unknown_key(loc)]
    if kind == "missing":
        return [f"{path} is missing (required)"]
    if kind == "list_type" and isinstance(err["input"], dict):
        return [f"{path} must be an array of tables: write [[{path}]] above each entry"]
    msg = err["msg"].removeprefix("Value error, ")
    msg = re.sub(r"^Input should be\b", "must be", msg)
    msg = re.sub(
        r"^List should have at least (\d+) items?.*", r"must list at least \1 item(s)", msg
    )
    msg = re.sub(
        r"^String should match pattern .*",
        "must start with a letter and use only letters, digits, '_', '-' and '.'",
        msg,
    )
    msg = msg[:1].lower() + msg[1:]
    return [f"{path}={_show(err['input'])}: {msg}"]


def _unknown_key(loc: tuple[Any, ...]) -> str:
    allowed = _fields_at(loc[:-1])
    hint = did_you_mean(str(loc[-1]), allowed) if allowed else ""
    where = f"in [{_path(loc[:-1])}]" if loc[:-1] else "at the top level"
    if not hint and allowed:
        hint = f"; allowed: {', '.join(sorted(allowed))}"
    return f"{_path(loc)} is not a known key {where}{hint}"


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model found at ``loc`` (descending through lists)."""
    model: Any = ClusterSpec
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return []
        model = _model_of(info.annotation)
        if model is None:
            return []
    return list(model.model_fields)


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in str(part) or " " in str(part):
            out += f'."{part}"' if out else f'"{part}"'
        else:
            out += f".{part}" if out else str(part)
    return out


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _num(value)
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"spark": {"ui": {"port": 4041}}}`` -> ``{"spark.ui.port": "4041"}`` (TOML dotted keys)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        elif isinstance(value, bool):
            flat[name] = "true" if value else "false"
        elif isinstance(value, int | float):
            flat[name] = _num(value) if isinstance(value, float) else str(value)
        else:
            flat[name] = value
    return flat


# ----------------------------------------------------------------------------- summary


def summary(spec: ClusterSpec) -> dict[str, Any]:
    """Headline figures of a spec (what ``gpuspark validate`` prints)."""
    return {
        "name": spec.name,
        "hosts": spec.total_hosts,
        "gpus": spec.total_gpus,
        "node_groups": [
            {
                "name": g.name,
                "hosts": len(g.hosts),
                "gpus_per_node": g.gpus_per_node,
                "gpu_model": g.gpu_model,
                "gpus": g.gpus,
            }
            for g in spec.nodes
        ],
        "master": spec.spark.master,
        "task_slots_per_executor": gpu_slots_per_executor(
            spec.spark.executor_gpus, spec.spark.task_gpu_amount
        ),
        "teams": [
            {
                "name": t.name,
                "guaranteed_gpus": t.guaranteed_gpus,
                "max_gpus": t.max_gpus,
                "priority": t.priority,
                "members": len(t.members),
            }
            for t in spec.teams
        ],
        "guaranteed_gpus": sum(t.guaranteed_gpus for t in spec.teams),
    }


# ----------------------------------------------------------------------------- example


def example_spec() -> str:
    """A commented example spec: the seed's cluster of two DGX A100 servers and three teams."""
    return _EXAMPLE


def write_example(path: str | Path, *, force: bool = False) -> Path:
    """Write :func:`example_spec` to ``path`` atomically; refuse to overwrite unless ``force``."""
    import os
    import tempfile

    path = Path(path)
    if path.exists() and not force:
        raise SpecError(f"{path} already exists", remedy="pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_EXAMPLE)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


_EXAMPLE = """\
# gpuspark cluster spec. Check it with `gpuspark validate cluster.toml`;
# render Spark's configuration with `gpuspark render spark cluster.toml -o conf/`.
name = "dgx-a100"

# One [[nodes]] table per group of identical servers.
[[nodes]]
name = "dgx"
hosts = ["dgx01", "dgx02"]
gpus_per_node = 8
gpu_model = "A100-SXM4-80GB"
gpu_memory_gb = 80
nvlink_gbytes_per_s = 600    # NVLink, gigaBYTES per second per GPU (NVIDIA's figure)
cpu_cores = 128              # 2 x AMD EPYC 7763, 64 cores each
ram_gb = 2048
nvme_tb = 30                 # local NVMe scratch (data cache, shuffle)

[networks.compute]           # gradients and shuffle
kind = "infiniband"          # infiniband | ethernet
gbps = 100                   # gigaBITS per second per node (HDR100)
latency_us = 1.0

[networks.storage]
kind = "ethernet"
gbps = 25

[storage]
root = "hdfs://namenode:8020/gpuspark"   # or a local path, s3a://bucket/prefix, ...

[spark]
master = "spark://dgx01:7077"  # local-cluster (embedded) | spark://host:port | yarn | k8s://...
executor_gpus = 1              # spark.executor.resource.gpu.amount
task_gpu_amount = 0.25         # spark.task.resource.gpu.amount: 4 data tasks share a GPU
executor_cores = 16            # 16 cores / task_cpus 4 = 4 task slots = 4 GPU shares
task_cpus = 4
executor_memory = "200g"
dynamic_allocation = true      # training jobs turn it off (barrier stages need that)
discovery_script = "/opt/gpuspark/getGpusResources.sh"

[spark.conf]                   # any other Spark property, applied last
"spark.executor.memoryOverhead" = "24g"
"spark.sql.shuffle.partitions" = "512"

# Teams share the GPUs: a guaranteed share, a ceiling when others are idle, a priority.
[[teams]]
name = "radiology"
guaranteed_gpus = 8
max_gpus = 16
priority = 2
members = ["alice", "bob"]

[[teams]]
name = "vision"
guaranteed_gpus = 4
max_gpus = 12
priority = 1
members = ["carol", "dan"]

[[teams]]
name = "research"
guaranteed_gpus = 4
max_gpus = 8
priority = 0
members = ["erin"]

[monitoring]                   # alert thresholds
gpu_memory_pct = 95
gpu_temp_c = 85
gpu_util_low_pct = 10
idle_allocated_minutes = 30
data_wait_pct = 25
nvme_free_pct = 10
executor_lost_per_hour = 3
"""
