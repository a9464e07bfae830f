"""``gpuspark quota status | why APP``: team GPU usage vs quota, and why an application waits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuspark.cli._checks import check_output_file
from gpuspark.cli._common import JsonOpt, SpecOpt, new_app, print_json, print_table

quota_app = new_app(help="Team GPU quotas: usage now, and why an application waits.")

QMasterOpt = Annotated[
    str | None,
    typer.Option(
        "--master",
        help="Which scheduler: yarn, k8s://https://host:port (Kueue), spark://host:port or "
        "local-cluster (standalone) [default: the spec's master].",
    ),
]
UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="The scheduler's HTTP address (standalone master web UI, YARN ResourceManager, "
        "Kubernetes API) when the master does not tell it.",
    ),
]


def register(app: typer.Typer) -> None:
    """Add the ``quota`` group to ``app``."""
    app.add_typer(quota_app, name="quota")


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}"


@quota_app.command("status")
def status(
    spec: SpecOpt = None,
    master: QMasterOpt = None,
    url: UrlOpt = None,
    json: JsonOpt = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write a PNG bar chart of the teams' GPUs (existing folder)."),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option("--prometheus", help="Prometheus URL: add GPU-hours per team over --window."),
    ] = None,
    window: Annotated[str, typer.Option("--window", help="GPU-hours window (24h, 7d…).")] = "24h",
) -> None:
    """Per team: GPUs guaranteed / max / in use now / pending applications, from the live
    scheduler (standalone master, YARN ResourceManager or Kueue)."""
    from gpuspark.quota.status import plot_usage, quota_status
    from gpuspark.spec import resolve_spec

    if plot is not None:
        check_output_file(plot, "--plot")
    spec_obj = resolve_spec(spec)
    where, rows = quota_status(
        spec_obj, master=master, url=url, prometheus=prometheus, window=window
    )
    if plot is not None:
        plot_usage(rows, plot, title=f"GPUs per team ({where.kind})")
    if json:
        print_json(
            {"scheduler": where.kind, "url": where.url, "teams": [r.as_dict() for r in rows]}
        )
        return
    columns = ["team", "guaranteed", "max", "in use", "running", "pending"]
    if prometheus:
        columns += [f"GPU-h {window}", "guaranteed GPU-h"]
    table = []
    for r in rows:
        line: list[object] = [
            r.team,
            r.guaranteed_gpus,
            r.max_gpus,
            _fmt(r.gpus_in_use),
            r.running_apps,
            r.pending_apps,
        ]
        if prometheus:
            line += [_fmt(r.gpu_hours), _fmt(r.guaranteed_gpu_hours)]
        table.append(line)
    print_table(f"team GPUs ({where.kind} at {where.url})", columns, table)
    if plot is not None:
        typer.echo(f"chart: {plot}")


@quota_app.command("why")
def why(
    app: Annotated[str, typer.Argument(help="Application id or name (Kueue: Workload name).")],
    spec: SpecOpt = None,
    master: QMasterOpt = None,
    url: UrlOpt = None,
    namespace: Annotated[
        str, typer.Option("--namespace", help="Kubernetes namespace of the Workload.")
    ] = "default",
    json: JsonOpt = False,
) -> None:
    """Why APP waits, in plain words with the fix, from the scheduler's own diagnostics."""
    from gpuspark.quota.why import explain
    from gpuspark.spec import resolve_spec

    reason = explain(resolve_spec(spec), app, master=master, url=url, namespace=namespace)
    if json:
        print_json(reason.as_dict())
        return
    typer.echo(f"{reason.app} [{reason.state}] {reason.cause}: {reason.message}")
    typer.echo(f"fix: {reason.remedy}")
    for line in reason.evidence:
        typer.echo(f"  evidence: {line}")
