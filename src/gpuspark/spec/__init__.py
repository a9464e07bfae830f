"""The cluster spec: one TOML file describing nodes, networks, storage, Spark, teams, alerts.

The models are plain data (:mod:`~gpuspark.spec.models`); the rules that tie fields together
(:mod:`~gpuspark.spec.rules`) run when a spec is built, so a :class:`ClusterSpec` in hand is
always consistent. Every problem becomes a :class:`~gpuspark.errors.SpecError` with one line of
the form ``cluster.toml: teams[1].max_gpus=4 is below guaranteed_gpus=8``.

Every command that runs a job takes a spec (``--spec FILE`` or ``$GPUSPARK_SPEC``); without
one, :func:`default_spec` (the embedded cluster) is used, so there is one source of Spark
settings.
"""

from __future__ import annotations

from gpuspark.spec.example import default_spec_text, example_spec, write_example
from gpuspark.spec.load import SPEC_ENV, default_spec, load_spec, parse_spec, resolve_spec
from gpuspark.spec.models import (
    ClusterSpec,
    ComputeNetwork,
    Monitoring,
    Networks,
    NodeGroup,
    Security,
    SparkSettings,
    StorageNetwork,
    StorageSettings,
    Team,
)
from gpuspark.spec.rules import gpu_slots_per_executor
from gpuspark.spec.summary import summary
from gpuspark.spec.teams import find_team, team_root

__all__ = [
    "SPEC_ENV",
    "ClusterSpec",
    "ComputeNetwork",
    "Monitoring",
    "Networks",
    "NodeGroup",
    "Security",
    "SparkSettings",
    "StorageNetwork",
    "StorageSettings",
    "Team",
    "default_spec",
    "default_spec_text",
    "example_spec",
    "find_team",
    "gpu_slots_per_executor",
    "load_spec",
    "parse_spec",
    "resolve_spec",
    "summary",
    "team_root",
    "write_example",
]
