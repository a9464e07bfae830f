"""``gpuspark init | validate | render spark | monitoring | yarn | kueue | volcano | k8s``: the
cluster spec and what is rendered from it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuspark.cli._checks import check_output_file
from gpuspark.cli._common import (
    JsonOpt,
    SpecFileArg,
    SpecFileOpt,
    check_dir_option,
    new_app,
    print_json,
    print_table,
    spec_path,
)

__all__ = ["register"]

OverwriteOpt = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace files of the same names in --out that render did not write (or that "
        "were edited since its last render).",
    ),
]

render_app = new_app(help="Render configuration files from a cluster spec.")


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
    file = file.expanduser()  # a quoted '~/x.toml' names the home folder, as the shell's ~
    if file.is_dir():
        raise SpecError(
            f"{file} is a directory", remedy=f"name the file to write, e.g. {file / 'cluster.toml'}"
        )
    check_output_file(file, "init")  # its folder must exist: a typo makes no folders
    write_example(file, force=force)
    typer.echo(f"wrote {file}; check it with: gpuspark validate --spec {shlex.quote(str(file))}")


def validate(
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec: SpecFileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a cluster spec; print its nodes, GPUs and team quotas."""
    from gpuspark.spec import load_spec, summary

    spec_file = spec_path(ctx, spec_file, spec)
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
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec_opt: SpecFileOpt = None,
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
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="Authentication, encryption and UI ACLs as in the spec's [security] "
            "(on even where the spec leaves it off).",
        ),
    ] = False,
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render spark-defaults.conf, metrics.properties and the GPU discovery script."""
    from gpuspark.cluster.conf import render_spark
    from gpuspark.spec import load_spec

    spec = load_spec(spec_path(ctx, spec_file, spec_opt))
    if secure:
        spec = spec.model_copy(
            update={"security": spec.security.model_copy(update={"enabled": True})}
        )
    if out_dir is not None:
        check_dir_option(out_dir, "--out")
        _write_spark(spec, out_dir, discovery_script, json_out, overwrite)
        return
    files = render_spark(spec, discovery_script_path=discovery_script)
    if json_out:
        print_json({"files": files})
        return
    for name, content in files.items():
        sys.stdout.write(f"# ==> {name} <==\n{content}")


def _write_spark(
    spec: Any, out_dir: Path, discovery_script: str | None, json_out: bool, overwrite: bool
) -> None:
    """Write the Spark files of ``spec`` into ``out_dir`` (with the shared secret when the
    spec is secure); say what was written and how to distribute it."""
    from gpuspark.cluster.conf import render_spark, write_owned

    secret, origin = _secret_for(spec)
    files = render_spark(spec, discovery_script_path=discovery_script, secret=secret)
    private = frozenset({"spark-defaults.conf"} if secret else ())
    written = write_owned(files, out_dir, overwrite=overwrite, private=private)
    notes = [origin, _distribute_note(spec)] if origin else []
    if json_out:
        print_json(
            {
                "written": [str(p) for p in written],
                "private": [str(p) for p in written if p.name in private],
                "notes": notes,
            }
        )
        return
    if origin:
        typer.echo(origin)
    for path in written:
        mode = " (mode 600: holds the shared secret)" if path.name in private else ""
        typer.echo(f"wrote {path}{mode}")
    if origin:
        typer.echo(notes[1])


def _secret_for(spec: Any) -> tuple[str | None, str | None]:
    """The shared secret of a secure spec (generated, mode 600, when its file is missing) and
    a line saying where it came from; ``(None, None)`` when the spec is not secure."""
    from gpuspark.cluster.security import ensure_secret

    if not spec.security.enabled:
        return None, None
    secret, created = ensure_secret(spec.security.secret_file)
    verb = "generated" if created else "read"
    return secret, f"{verb} the shared secret in {spec.security.secret_file} (mode 600)"


def _distribute_note(spec: Any) -> str:
    return (
        "distribute: copy spark-defaults.conf (mode 600, owned by the Spark user) into "
        "$SPARK_CONF_DIR on every node and restart the master and workers; give every user "
        f"who submits applications the same secret at {spec.security.secret_file} (mode 600): "
        "gpuspark sessions read it from there. Never put the secret on a command line."
    )


@render_app.command("monitoring")
def render_monitoring_cmd(
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec_opt: SpecFileOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Write the files here [default: print them]."),
    ] = None,
    targets_dir: Annotated[
        Path | None,
        typer.Option(
            "--targets-dir",
            help="file_sd directory as the Prometheus server sees it, written as given"
            " (relative: to prometheus.yml's folder) [default: the spec's [monitoring]"
            " targets_dir, else targets/ beside prometheus.yml].",
        ),
    ] = None,
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render prometheus.yml, alert rules with promtool tests, alertmanager.yml and the runbook."""
    from gpuspark.cluster.conf import write_owned
    from gpuspark.monitor.render import check_commands, render_monitoring
    from gpuspark.spec import load_spec

    spec = load_spec(spec_path(ctx, spec_file, spec_opt))
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
    written = write_owned(files, out_dir, overwrite=overwrite)
    checks = check_commands(out_dir)
    if json_out:
        print_json({"written": [str(p) for p in written], "checks": checks})
        return
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo("check them with:")
    for line in checks:
        typer.echo(f"  {line}")


OutOpt = Annotated[
    Path | None, typer.Option("-o", "--out", help="Write the files here [default: print them].")
]
NamespacePrefixOpt = Annotated[
    str,
    typer.Option(
        "--namespace-prefix", help="Team namespaces are PREFIX + team name [default: none]."
    ),
]


def _render_quota(
    spec_file: Path,
    scheduler: str,
    out_dir: Path | None,
    json_out: bool,
    overwrite: bool = False,
    **opts: Any,
) -> None:
    """Render the team quotas for ``scheduler``; print or write the files, then the notes."""
    from gpuspark.quota.render import quota_notes, render_quota
    from gpuspark.spec import load_spec

    spec = load_spec(spec_file)
    if out_dir is not None:
        check_dir_option(out_dir, "--out")
    files = render_quota(spec, scheduler, **opts)
    notes = quota_notes(spec, scheduler, **opts)
    _emit(files, notes, out_dir, json_out, overwrite)


def _emit(
    files: dict[str, str],
    notes: list[str],
    out_dir: Path | None,
    json_out: bool,
    overwrite: bool = False,
) -> None:
    """Print the rendered files (or write them into ``out_dir``), then the notes."""
    from gpuspark.cluster.conf import write_owned

    if out_dir is None:
        if json_out:
            print_json({"files": files, "notes": notes})
            return
        for name, content in files.items():
            sys.stdout.write(f"# ==> {name} <==\n{content}")
        return
    written = write_owned(files, out_dir, overwrite=overwrite)
    if json_out:
        print_json({"written": [str(p) for p in written], "notes": notes})
        return
    for path in written:
        typer.echo(f"wrote {path}")
    for note in notes:
        typer.echo(f"note: {note}")


def _yarn_version(value: str) -> str:
    from gpuspark.schedulers.yarn.render import parse_yarn_version

    try:
        parse_yarn_version(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--yarn-version") from None
    return value


@render_app.command("yarn")
def render_yarn_cmd(
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec_opt: SpecFileOpt = None,
    out_dir: OutOpt = None,
    yarn_version: Annotated[
        str,
        typer.Option(
            "--yarn-version",
            callback=_yarn_version,
            help="Hadoop version of the ResourceManager; >= 3.4 gets absolute"
            " [memory=...,vcores=...,yarn.io/gpu=N] capacities.",
        ),
    ] = "3.3",
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render capacity-scheduler.xml (a queue per team), resource-types.xml, the yarn-site GPU
    snippet and each team's spark.yarn.queue."""
    path = spec_path(ctx, spec_file, spec_opt)
    _render_quota(path, "yarn", out_dir, json_out, overwrite, yarn_version=yarn_version)


def _kueue_api(value: str) -> str:
    from gpuspark.schedulers.kubernetes.kueue import KUEUE_APIS

    if value not in KUEUE_APIS:
        raise typer.BadParameter(
            f"{value!r} is not one of {', '.join(KUEUE_APIS)}", param_hint="--kueue-api"
        )
    return value


@render_app.command("kueue")
def render_kueue_cmd(
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec_opt: SpecFileOpt = None,
    out_dir: OutOpt = None,
    kueue_api: Annotated[
        str,
        typer.Option(
            "--kueue-api",
            callback=_kueue_api,
            help="kueue.x-k8s.io version: v1beta1 (spec.cohort) or v1beta2 (spec.cohortName).",
        ),
    ] = "v1beta2",
    namespace_prefix: NamespacePrefixOpt = "",
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render Kueue ResourceFlavors, a ClusterQueue and LocalQueue per team, and each team's
    Spark settings."""
    path = spec_path(ctx, spec_file, spec_opt)
    _render_quota(
        path,
        "kueue",
        out_dir,
        json_out,
        overwrite,
        api=kueue_api,
        namespace_prefix=namespace_prefix,
    )


@render_app.command("volcano")
def render_volcano_cmd(
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec_opt: SpecFileOpt = None,
    out_dir: OutOpt = None,
    namespace_prefix: NamespacePrefixOpt = "",
    min_executors: Annotated[
        int,
        typer.Option(
            "--min-executors",
            min=1,
            help="Executors the PodGroup's minResources reserve with the driver.",
        ),
    ] = 1,
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render a Volcano Queue per team, the PodGroup templates and each team's Spark settings."""
    _render_quota(
        spec_path(ctx, spec_file, spec_opt),
        "volcano",
        out_dir,
        json_out,
        overwrite,
        namespace_prefix=namespace_prefix,
        min_executors=min_executors,
    )


@render_app.command("k8s")
def render_k8s_cmd(
    ctx: typer.Context,
    spec_file: SpecFileArg = None,
    spec_opt: SpecFileOpt = None,
    out_dir: OutOpt = None,
    kueue_api: Annotated[
        str,
        typer.Option(
            "--kueue-api",
            callback=_kueue_api,
            help="kueue.x-k8s.io version of the Kueue objects and Configuration.",
        ),
    ] = "v1beta2",
    namespace_prefix: NamespacePrefixOpt = "",
    conf_dir: Annotated[
        str | None,
        typer.Option(
            "--conf-dir",
            help="Where the rendered spark/ folder will be when spark-submit runs"
            " [default: its files name each other relatively].",
        ),
    ] = None,
    overwrite: OverwriteOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render Spark on Kubernetes: namespaces, RBAC, queues, monitoring, pod templates,
    spark-defaults.conf, per-team job settings and SparkApplications."""
    from gpuspark.quota.render import K8S_RENDERER, quota_notes, render_k8s
    from gpuspark.spec import load_spec

    spec = load_spec(spec_path(ctx, spec_file, spec_opt))
    if out_dir is not None:
        check_dir_option(out_dir, "--out")
    opts: dict[str, Any] = {"api": kueue_api, "namespace_prefix": namespace_prefix}
    files = render_k8s(spec, conf_dir=conf_dir, **opts)
    notes = quota_notes(spec, K8S_RENDERER, conf_dir=conf_dir, **opts)
    _emit(files, notes, out_dir, json_out, overwrite)


def register(app: typer.Typer) -> None:
    """Add ``init``, ``validate`` and the ``render`` group to ``app``."""
    app.command("init")(init)
    app.command("validate")(validate)
    app.add_typer(render_app, name="render")
