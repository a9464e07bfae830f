"""``gpuspark init | validate | render spark | render monitoring``: the cluster spec and what is
rendered from it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuspark.cli._common import JsonOpt, check_dir_option, print_json, print_table

__all__ = ["register"]

render_app = typer.Typer(help="Render configuration files from a cluster spec.")

SpecArg = Annotated[Path, typer.Argument(help="Cluster spec file (TOML).", show_default=False)]


def init(
    file: Annotated[
        Path | None,
        typer.Argument(
            help="Where to write the example spec [default: print it].", show_default=False
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented example cluster spec (two DGX A100 servers, three teams)."""
    from gpuspark.errors import SpecError
    from gpuspark.spec import write_example

    if file is None:
        from gpuspark.spec import example_spec

        sys.stdout.write(example_spec())
        return
    if file.is_dir():
        raise SpecError(
            f"{file} is a directory", remedy=f"name the file to write, e.g. {file / 'cluster.toml'}"
        )
    check_dir_option(file.parent, f"the folder of {file}:")
    write_example(file, force=force)
    typer.echo(f"wrote {file}; check it with: gpuspark validate {file}")


def validate(spec_file: SpecArg, json_out: JsonOpt = False) -> None:
    """Check a cluster spec; print its nodes, GPUs and team quotas."""
    from gpuspark.spec import load_spec, summary

    info = summary(load_spec(spec_file))
    if json_out:
        print_json({"file": str(spec_file), "valid": True, **info})
        return
    print_table(
        f"cluster '{info['name']}'",
        ["node group", "hosts", "GPUs/node", "GPU model", "GPUs"],
        [
            [g["name"], g["hosts"], g["gpus_per_node"], g["gpu_model"], g["gpus"]]
            for g in info["node_groups"]
        ],
    )
    if info["teams"]:
        print_table(
            "teams",
            ["team", "guaranteed GPUs", "max GPUs", "priority", "members"],
            [
                [t["name"], t["guaranteed_gpus"], t["max_gpus"], t["priority"], t["members"]]
                for t in info["teams"]
            ],
        )
    typer.echo(
        f"{spec_file} is valid: {info['hosts']} nodes, {info['gpus']} GPUs, "
        f"{len(info['teams'])} teams ({info['guaranteed_gpus']} of {info['gpus']} GPUs "
        f"guaranteed), master {info['master']}"
    )


@render_app.command("spark")
def render_spark_cmd(
    spec_file: SpecArg,
    out_dir: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Write the files here [default: print them]."),
    ] = None,
    discovery_script: Annotated[
        str | None,
        typer.Option(
            "--discovery-script",
            help="Path of getGpusResources.sh on the nodes [default: the spec's].",
        ),
    ] = None,
) -> None:
    """Render spark-defaults.conf, metrics.properties and the GPU discovery script."""
    from gpuspark.cluster.conf import render_spark, write_rendered
    from gpuspark.spec import load_spec

    spec = load_spec(spec_file)
    if out_dir is not None:
        check_dir_option(out_dir, "--out")
    files = render_spark(spec, discovery_script_path=discovery_script)
    if out_dir is None:
        for name, content in files.items():
            sys.stdout.write(f"# ==> {name} <==\n{content}")
        return
    for path in write_rendered(files, out_dir):
        typer.echo(f"wrote {path}")


@render_app.command("monitoring")
def render_monitoring_cmd(
    spec_file: SpecArg,
    out_dir: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Write the files here [default: print them]."),
    ] = None,
    targets_dir: Annotated[
        Path | None,
        typer.Option(
            "--targets-dir",
            help="file_sd directory as the Prometheus server sees it "
            "[default: the spec's [monitoring] targets_dir, else ~/.gpuspark/monitor/targets].",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Render prometheus.yml, alert rules with promtool tests, alertmanager.yml and the runbook."""
    from gpuspark.monitor.render import check_commands, render_monitoring, write_monitoring
    from gpuspark.spec import load_spec

    spec = load_spec(spec_file)
    if out_dir is not None:
        check_dir_option(out_dir, "--out")
    files = render_monitoring(spec, targets_dir=targets_dir)
    if out_dir is None:
        if json_out:
            print_json({"files": files})
            return
        for name, content in files.items():
            sys.stdout.write(f"# ==> {name} <==\n{content}")
        return
    written = write_monitoring(files, out_dir)
    checks = check_commands(out_dir)
    if json_out:
        print_json({"written": [str(p) for p in written], "checks": checks})
        return
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo("check them with:")
    for line in checks:
        typer.echo(f"  {line}")


def register(app: typer.Typer) -> None:
    """Add ``init``, ``validate`` and the ``render`` group to ``app``."""
    app.command("init")(init)
    app.command("validate")(validate)
    app.add_typer(render_app, name="render")
