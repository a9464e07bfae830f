"""``gpuspark cluster up|status|down``: the embedded Spark standalone cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuspark.cli._common import JsonOpt, echo, print_json, print_table

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        envvar="GPUSPARK_STATE_DIR",
        help="Where pids, ports and logs live [default: ~/.gpuspark/cluster].",
    ),
]

cluster_app = typer.Typer(help="Start, inspect and stop the embedded Spark cluster.")


@cluster_app.command("up")
def up(
    workers: Annotated[int, typer.Option(help="Number of Spark workers.")] = 2,
    cores: Annotated[int, typer.Option(help="Cores each worker offers.")] = 2,
    memory: Annotated[str, typer.Option(help="Memory each worker offers (e.g. 2g).")] = "2g",
    gpus: Annotated[
        int | None,
        typer.Option(help="GPUs per worker [default: real GPUs split evenly, else 2 simulated]."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for registration.")] = 120.0,
    state_dir: StateDirOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Start a master and workers; wait until all workers are registered."""
    import time

    from gpuspark.cluster.local import LocalCluster

    running = LocalCluster.running(state_dir)
    if running is not None:
        _show(running.status(), json_out, note="already running; nothing started")
        return
    t0 = time.monotonic()
    cluster = LocalCluster(workers, cores, memory, gpus, state_dir=state_dir, timeout=timeout)
    cluster.start()
    status = cluster.status()
    status["startup_seconds"] = round(time.monotonic() - t0, 2)
    _show(status, json_out, note=f"started in {status['startup_seconds']} s")


@cluster_app.command("status")
def status(state_dir: StateDirOpt = None, json_out: JsonOpt = False) -> None:
    """Show master, workers (alive or dead) and GPU addresses (real or simulated)."""
    from gpuspark.cluster.local import LocalCluster

    info = LocalCluster(state_dir=state_dir).status()
    _show(info, json_out)
    if info.get("running") and info["alive_workers"] < len(info["workers"]):
        raise typer.Exit(1)


@cluster_app.command("down")
def down(state_dir: StateDirOpt = None, json_out: JsonOpt = False) -> None:
    """Stop exactly the processes that `up` started."""
    from gpuspark.cluster.local import LocalCluster

    stopped = LocalCluster(state_dir=state_dir).stop()
    if json_out:
        print_json({"stopped_pids": stopped})
    else:
        echo(f"stopped {len(stopped)} processes" if stopped else "no embedded cluster running")


def _show(info: dict[str, Any], json_out: bool, note: str | None = None) -> None:
    if json_out:
        print_json(info)
        return
    if not info.get("running"):
        echo(f"no embedded cluster running (state dir {info['state_dir']})")
        return
    kind = "simulated (no NVIDIA GPU found)" if info["gpus_simulated"] else "real"
    echo(f"master {info['master_url']}  web UI {info['web_ui']}  GPUs: {kind}")
    rows = [
        (w["index"], w["pid"], w["state"], w["cores"], w["memory"], _gpus(w))
        for w in info["workers"]
    ]
    title = f"{info['alive_workers']} of {len(info['workers'])} workers alive"
    print_table(title, ["worker", "pid", "state", "cores", "memory", "gpu addresses"], rows)
    if note:
        echo(note)


def _gpus(worker: dict[str, Any]) -> str:
    addresses = ",".join(worker["gpus"]) or "-"
    return f"{addresses} (simulated)" if worker["gpus_simulated"] and worker["gpus"] else addresses


def register(app: typer.Typer) -> None:
    """Attach ``gpuspark cluster``."""
    app.add_typer(cluster_app, name="cluster")
