"""``gpuspark monitor up|down|status`` and ``gpuspark top``: Prometheus on this machine, and
the training runs live in the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuspark.cli._common import JsonOpt, SpecOpt, echo, new_app, print_json, print_table

monitor_app = new_app(help="Start, inspect and stop Prometheus for the embedded cluster.")

PortOpt = Annotated[int, typer.Option(help="Prometheus port on 127.0.0.1 (taken: a free one).")]


@monitor_app.command("up")
def up(
    spec: SpecOpt = None,
    port: PortOpt = 9090,
    node_exporter: Annotated[
        bool, typer.Option(help="Also start node_exporter (host, disk, InfiniBand) if installed.")
    ] = True,
    json_out: JsonOpt = False,
) -> None:
    """Start Prometheus (and node_exporter) on loopback, scraping Spark and training runs."""
    from gpuspark.monitor.local import running
    from gpuspark.monitor.local import up as start

    found = running()
    if found is not None:
        _show(found.as_dict(), json_out, note="already running; nothing started")
        return
    state = start(spec, port=port, node_exporter=node_exporter)
    _show(state.as_dict(), json_out, note="started; stop with `gpuspark monitor down`")


@monitor_app.command("status")
def status(json_out: JsonOpt = False) -> None:
    """Show what `monitor up` started and, per scrape job, how many targets are up."""
    from gpuspark.monitor.local import status as current

    info = current()
    _show(info, json_out)
    if info.get("jobs"):
        rows = [(job, v["up"], v["total"]) for job, v in sorted(info["jobs"].items())]
        if not json_out:
            print_table("scrape targets", ["job", "up", "total"], rows)


@monitor_app.command("down")
def down(json_out: JsonOpt = False) -> None:
    """Stop exactly the processes `monitor up` started."""
    from gpuspark.monitor.local import down as stop

    stopped = stop()
    if json_out:
        print_json({"stopped_pids": stopped})
    else:
        echo(f"stopped {len(stopped)} processes" if stopped else "monitoring was not running")


def _show(info: dict[str, Any], json_out: bool, note: str | None = None) -> None:
    if json_out:
        print_json(info)
        return
    if not info.get("running", True):
        echo(f"monitoring is not running (directory {info['monitor_dir']})")
        return
    prom = info["prometheus"]
    echo(f"Prometheus  {prom['url']}  (pid {prom['pid']}, log {prom['log']})")
    node = info.get("node_exporter")
    echo(f"node_exporter  {node['url']}/metrics" if node else "node_exporter  not installed")
    echo(f"config {info['config_dir']}  targets {info['targets_dir']}")
    if note:
        echo(note)


def top(
    prometheus: Annotated[
        str | None,
        typer.Option(
            help="Prometheus URL [default: the one `monitor up` started; none: ranks directly]."
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one table and exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.", min=0.2)] = 2.0,
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Training runs live: samples/s, step-time breakdown, loss, bytes saved, data wait, GPUs."""
    from gpuspark.cluster.monitor_dirs import targets_dir
    from gpuspark.monitor.local import running
    from gpuspark.monitor.top import as_json, collect, render
    from gpuspark.spec import resolve_spec

    if prometheus is None:
        state = running()
        prometheus = state.prometheus.url if state is not None else None
    directory = targets_dir(resolve_spec(spec))
    if once or json_out:
        source, rows = collect(prometheus, directory, min(interval, 1.0))
        if json_out:
            print_json(as_json(rows, source))
        else:
            from rich.console import Console

            Console().print(render(rows, source))
        return
    _live(prometheus, directory, interval)


def _live(prometheus: str | None, directory: Path, interval: float) -> None:
    import time

    from rich.live import Live

    from gpuspark.monitor.top import collect, render

    try:
        with Live(auto_refresh=False) as live:
            while True:
                source, rows = collect(prometheus, directory, min(interval, 1.0))
                live.update(render(rows, source), refresh=True)
                time.sleep(max(0.0, interval - 1.0) if prometheus is None else interval)
    except KeyboardInterrupt:  # Ctrl-C is how a live view ends: not an error
        return


def register(app: typer.Typer) -> None:
    """Add the ``monitor`` group and ``top`` to ``app``."""
    app.add_typer(monitor_app, name="monitor")
    app.command("top")(top)
