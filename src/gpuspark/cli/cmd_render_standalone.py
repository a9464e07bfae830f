"""``gpuspark render standalone``: every host's files and services of a bare-metal Spark
standalone GPU cluster (see docs/bare-metal.md)."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuspark.cli._common import (
    JsonOpt,
    SpecFileArg,
    SpecFileOpt,
    check_dir_option,
    print_json,
    spec_path,
)
from gpuspark.cli.cmd_spec import OverwriteOpt, render_app

if TYPE_CHECKING:
    from gpuspark.schedulers.standalone.render import InstallPaths, Rendered
    from gpuspark.spec import ClusterSpec

__all__ = ["register", "render_standalone_cmd", "standalone_files"]


def standalone_files(
    spec: ClusterSpec, paths: InstallPaths | None = None, allow: Sequence[str] = ()
) -> Rendered:
    """:func:`~gpuspark.schedulers.standalone.render.render_standalone` with what it needs
    from the layers above the schedulers: ``$SPARK_CONF_DIR``'s files, the DCGM fields of the
    rendered alert rules and dashboards, the exporters' ports."""
    from gpuspark.cluster.conf import render_spark
    from gpuspark.monitor import names
    from gpuspark.monitor.dashboards import render_dashboards
    from gpuspark.monitor.rules import alert_rules
    from gpuspark.schedulers.standalone.dcgm import dcgm_field_names
    from gpuspark.schedulers.standalone.render import Inputs, InstallPaths, render_standalone

    paths = paths or InstallPaths()
    monitored = [alert_rules(spec), *render_dashboards(spec).values()]
    inputs = Inputs(
        conf_files=render_spark(spec, discovery_script_path=paths.discovery_script),
        dcgm_fields=frozenset(dcgm_field_names(monitored)),
        dcgm_port=names.DCGM_PORT,
        node_exporter_port=names.NODE_EXPORTER_PORT,
    )
    return render_standalone(spec, inputs, paths, allow)


def _absolute(value: str | None) -> str | None:
    """An absolute path on the hosts (systemd takes no other in ``ExecStart=``)."""
    if value is not None and (not value.startswith("/") or any(c.isspace() for c in value)):
        raise typer.BadParameter(f"{value!r} is not an absolute path without spaces")
    return value


def _user(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", value):
        raise typer.BadParameter(f"{value!r} is not a user name such as spark")
    return value


@render_app.command("standalone")
def render_standalone_cmd(
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec_opt: SpecFileOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Write the files here [default: print them]."),
    ] = None,
    spark_home: Annotated[
        str,
        typer.Option(
            "--spark-home",
            callback=_absolute,
            metavar="DIR",
            help="Where Spark is installed on the hosts.",
        ),
    ] = "/opt/spark",
    conf_dir: Annotated[
        str | None,
        typer.Option(
            "--conf-dir",
            callback=_absolute,
            metavar="DIR",
            help="$SPARK_CONF_DIR on the hosts [default: SPARK_HOME/conf].",
        ),
    ] = None,
    discovery_script: Annotated[
        str | None,
        typer.Option(
            "--discovery-script",
            callback=_absolute,
            metavar="PATH",
            help="Path of getGpusResources.sh on the hosts [default: the spec's].",
        ),
    ] = None,
    user: Annotated[
        str,
        typer.Option(
            "--user", callback=_user, metavar="USER", help="User the Spark daemons run as."
        ),
    ] = "spark",
    dcgm_exporter: Annotated[
        str,
        typer.Option(
            "--dcgm-exporter",
            callback=_absolute,
            metavar="PATH",
            help="dcgm-exporter's binary on the hosts.",
        ),
    ] = "/usr/bin/dcgm-exporter",
    node_exporter: Annotated[
        str,
        typer.Option(
            "--node-exporter",
            callback=_absolute,
            metavar="PATH",
            help="node_exporter's binary on the hosts.",
        ),
    ] = "/usr/bin/prometheus-node-exporter",
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="ADDRESS",
            help="An address or network the firewall also lets in (the Prometheus server, the"
            " admins' network); repeat for several.",
        ),
    ] = None,
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render each host's spark-env.sh, the workers file, spark-defaults.conf, systemd units
    (Spark master, workers, history server, dcgm-exporter, node_exporter), dcgm-exporter's
    counters and the firewall between the hosts (nftables)."""
    from gpuspark.cluster.conf import write_owned
    from gpuspark.schedulers.standalone.render import InstallPaths
    from gpuspark.spec import load_spec

    spec = load_spec(spec_path(ctx, spec_file, spec_opt))
    if out_dir is not None:
        check_dir_option(out_dir, "--out")
    paths = InstallPaths(
        spark_home=spark_home,
        conf_dir=conf_dir,
        discovery_script=discovery_script,
        user=user,
        dcgm_exporter=dcgm_exporter,
        node_exporter=node_exporter,
    )
    rendered = standalone_files(spec, paths, allow or ())
    if out_dir is None:
        if json_out:
            print_json({"files": rendered.files, "hosts": rendered.hosts, "notes": rendered.notes})
            return
        for name, content in rendered.files.items():
            sys.stdout.write(f"# ==> {name} <==\n{content}")
        return
    written = write_owned(rendered.files, out_dir, overwrite=overwrite)
    per_host = {h: [str(out_dir / p) for p in rel] for h, rel in rendered.hosts.items()}
    if json_out:
        print_json(
            {"written": [str(p) for p in written], "hosts": per_host, "notes": rendered.notes}
        )
        return
    for path in written:
        typer.echo(f"wrote {path}")
    for note in rendered.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"install them on the hosts: see docs/bare-metal.md ({len(per_host)} hosts)")


def register(app: typer.Typer) -> None:
    """Nothing to add: importing this module adds ``standalone`` to ``gpuspark render``."""
