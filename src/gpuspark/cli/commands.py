"""The list of command groups. Each ``cmd_*`` module has ``register(app)``."""

from __future__ import annotations

import importlib

import typer

# Order is the order in ``gpuspark --help``.
_MODULES = [
    "gpuspark.cli.cmd_spec",
    "gpuspark.cli.cmd_render_standalone",
    "gpuspark.cli.cmd_cluster",
    "gpuspark.cli.cmd_shards",
    "gpuspark.cli.cmd_datasets",
    "gpuspark.cli.cmd_prep",
    "gpuspark.cli.cmd_launch",
    "gpuspark.cli.cmd_train",
    "gpuspark.cli.cmd_predict",
    "gpuspark.cli.cmd_monitor",
    "gpuspark.cli.cmd_doctor",
    "gpuspark.cli.cmd_quota",
    "gpuspark.cli.cmd_plan",
    "gpuspark.cli.cmd_demo",
]


def register(app: typer.Typer) -> None:
    """Attach all command groups to ``app``."""
    for name in _MODULES:
        importlib.import_module(name).register(app)
