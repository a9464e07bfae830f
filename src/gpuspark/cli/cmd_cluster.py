"""``gpuspark cluster up|status|down``: the embedded Spark standalone cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuspark._util import envvars
from gpuspark.cli._common import (
    JsonOpt,
    SpecOpt,
    check_dir_option,
    echo,
    new_app,
    print_json,
    print_table,
)
from gpuspark.errors import ClusterError

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        envvar=envvars.STATE_DIR.name,
        help="Where pids, ports and logs live [default: ~/.gpuspark/cluster].",
    ),
]

cluster_app = new_app(help="Start, inspect and stop the embedded Spark cluster.")


@cluster_app.command("up")
def up(
    spec: SpecOpt = None,
    workers: Annotated[
        int | None, typer.Option(help="Spark workers [default: from the spec, scaled].")
    ] = None,
    cores: Annotated[
        int | None,
        typer.Option(help="Task slots each worker offers [default: the spec's executor shape]."),
    ] = None,
    memory: Annotated[
        str | None, typer.Option(help="Memory each worker offers, e.g. 2g [default: 1g/executor].")
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(help="GPUs per worker [default: real GPUs split evenly, else 2 simulated]."),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for registration.", min=0.1)
    ] = 120.0,
    hosts: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=253,
            help="Distinct worker hosts: worker i binds to 127.0.0.(2 + i mod N), so Spark "
            "sees N machines (locality, speculation, ranks on several hosts) "
            "[default: every worker on 127.0.0.1].",
        ),
    ] = None,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="Spark authentication with a generated shared secret and RPC encryption: "
            "only gpuspark sessions of this machine's user can run applications.",
        ),
    ] = False,
    connect: Annotated[
        bool,
        typer.Option(
            "--connect",
            help="Also start a Spark Connect server on the cluster, bound to 127.0.0.1 (with "
            "--secure, clients authenticate with a token): launch and train then go through "
            "it (sc://); it holds the executors, so data jobs need a cluster without it.",
        ),
    ] = False,
    connect_port: Annotated[
        int | None,
        typer.Option(
            "--connect-port",
            min=1,
            max=65535,
            help="The Connect server's gRPC port (implies --connect) [default: a free port].",
        ),
    ] = None,
    netns: Annotated[
        bool,
        typer.Option(
            "--netns",
            help="Root only: each of the --hosts gets a network namespace of its own, a veth "
            "into a bridge and an address from 198.18.0.0/15; its worker starts there from "
            "the files `render standalone` writes for it. `down` removes them.",
        ),
    ] = False,
    link_rate: Annotated[
        str | None,
        typer.Option(
            "--link-rate",
            metavar="RATE",
            help="With --netns: shape each host's link, both directions, with tc tbf, "
            "e.g. 200mbit or 1gbit [default: unshaped].",
        ),
    ] = None,
    state_dir: StateDirOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Start a master and workers shaped by the spec; wait until all workers are registered."""
    # A running cluster: the same request starts nothing (exit 0), another one is refused with
    # both shapes (cluster/request.py). A shape this machine cannot hold is refused before
    # anything starts (cluster/machine.py).
    import time

    from gpuspark._util.signals import terminate_raises
    from gpuspark.cluster.local import LocalCluster
    from gpuspark.cluster.request import check_request
    from gpuspark.spec import load_spec

    _check_state_dir(state_dir)
    spec_obj = load_spec(spec) if spec is not None else None
    cluster = LocalCluster(
        workers,
        cores,
        memory,
        gpus,
        spec=spec_obj,
        state_dir=state_dir,
        timeout=timeout,
        secure=secure,
        hosts=hosts,
        connect=connect,
        connect_port=connect_port,
        netns=netns,
        link_rate=link_rate,
    )
    running = LocalCluster.running(state_dir)
    if running is not None:
        spec_path = str(spec) if spec is not None else None
        check_request(cluster, running, spec_path=spec_path, state_dir=_given_dir(state_dir))
        if cluster.connect and not running.status().connect_alive:
            _add_connect(running, connect_port, json_out)
            return
        _already_running(running.status().as_dict(), json_out)
        return
    t0 = time.monotonic()
    with terminate_raises():  # a stopped start removes what it made (namespaces too)
        cluster.start()
    status = cluster.status().as_dict()
    status["startup_seconds"] = round(time.monotonic() - t0, 2)
    _show(status, json_out, note=f"started in {status['startup_seconds']} s")
    from gpuspark.cluster.jvm import build_in_background

    build_in_background()  # once per installation: later drivers start faster (cluster.jvm)


def _add_connect(running: Any, port: int | None, json_out: bool) -> None:
    """``up --connect`` on a cluster running without a Connect server: start one on it."""
    import time

    t0 = time.monotonic()
    running.start_connect(port)
    seconds = round(time.monotonic() - t0, 2)
    _show(running.status().as_dict(), json_out, note=f"Spark Connect server started in {seconds} s")


def _check_state_dir(state_dir: Path | None) -> None:
    """``--state-dir`` (or ``$GPUSPARK_STATE_DIR``) must be a directory or creatable."""
    if state_dir is not None:
        check_dir_option(state_dir, "--state-dir")


def _given_dir(state_dir: Path | None) -> str | None:
    """``--state-dir`` as typed, for a command to repeat (``None``: the default, or the
    environment's, which the next command sees too)."""
    if state_dir is None or str(state_dir) == envvars.STATE_DIR.get():
        return None
    return str(state_dir)


def _already_running(info: dict[str, Any], json_out: bool) -> None:
    dead = [w["index"] for w in info["workers"] if w["state"] != "ALIVE"]
    if not dead:
        _show(info, json_out, note="already running; nothing started")
        return
    if not json_out:  # under --json the error is the one JSON object
        _show(info, json_out)
    raise ClusterError(
        f"the embedded cluster at {info['master_url']} is running with worker(s) "
        f"{', '.join(map(str, dead))} not alive; nothing started",
        remedy="restart it: `gpuspark cluster down && gpuspark cluster up`",
    )


@cluster_app.command("status")
def status(state_dir: StateDirOpt = None, json_out: JsonOpt = False) -> None:
    """Show master, workers (alive or dead) and GPU addresses (real or simulated)."""
    from gpuspark.cluster.local import LocalCluster

    _check_state_dir(state_dir)
    info = LocalCluster(state_dir=state_dir).status().as_dict()
    _show(info, json_out)
    if info.get("running") and info["alive_workers"] < len(info["workers"]):
        raise typer.Exit(1)


@cluster_app.command("down")
def down(state_dir: StateDirOpt = None, json_out: JsonOpt = False) -> None:
    """Stop exactly the processes that `up` started."""
    from gpuspark.cluster.local import LocalCluster

    _check_state_dir(state_dir)
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
        (w["index"], w["host"], w["pid"], w["state"], w["cores"], w["memory"], _gpus(w))
        for w in info["workers"]
    ]
    hosts = len(info.get("hosts") or [])
    title = f"{info['alive_workers']} of {len(info['workers'])} workers alive on {hosts} host(s)"
    columns = ["worker", "host", "pid", "state", "cores", "memory", "gpu addresses"]
    print_table(title, columns, rows)
    _show_netns(info.get("netns"), info["workers"])
    _show_shape(info.get("shape") or {})
    if info.get("secure"):
        echo(
            "security: Spark authentication and RPC encryption on; applications need the "
            f"shared secret in {info['secret_file']} (gpuspark sessions read it)"
        )
    _show_connect(info)
    if note:
        echo(note)


def _show_netns(net: dict[str, Any] | None, workers: list[dict[str, Any]]) -> None:
    """``--netns``: the bridge, and each worker's address, namespace and link rate."""
    if not net:
        return
    echo(
        f"network namespaces (`cluster down` removes them): bridge {net['bridge']} "
        f"{net['gateway']}/{net['prefix']} (master and driver)"
    )
    for w in workers:
        echo(f"  worker {w['index']}: {w['host']} in {w['namespace']}, link {w['link_rate']}")


def _show_connect(info: dict[str, Any]) -> None:
    if not info.get("connect_url"):
        return
    if not info.get("connect_alive"):
        echo(f"Spark Connect server {info['connect_url']}: not running (see {info['connect_log']})")
        return
    auth = (
        ", clients authenticate with a token (gpuspark sessions read it)"
        if info.get("secure")
        else ""
    )
    echo(
        f"Spark Connect server {info['connect_url']} (pid {info['connect_pid']}{auth}): it "
        "holds the executors; launch, train and the data jobs (prep, shard writes) go through "
        "it; predict and doctor's live checks need `cluster up` without --connect"
    )


def _show_shape(shape: dict[str, Any]) -> None:
    if not shape:
        return
    gpu = (
        f"{shape['executor_gpus']} GPU(s), {shape['task_gpu_amount']:g} GPU per data task"
        if shape["executor_gpus"]
        else "no GPUs"
    )
    echo(
        f"spec '{shape['spec_name']}': executors of {shape['executor_cores']} cores, {gpu}, "
        f"{shape['executor_memory']}; {shape['executors_per_worker']} per worker, "
        f"{shape['task_slots']} data task slots"
    )
    for note in shape.get("notes", []):
        echo(f"  scaled to this machine: {note}")


def _gpus(worker: dict[str, Any]) -> str:
    addresses = ",".join(worker["gpus"]) or "-"
    return f"{addresses} (simulated)" if worker["gpus_simulated"] and worker["gpus"] else addresses


def register(app: typer.Typer) -> None:
    """Attach ``gpuspark cluster``."""
    app.add_typer(cluster_app, name="cluster")
