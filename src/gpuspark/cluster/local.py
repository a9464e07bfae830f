"""The embedded Spark standalone cluster: a real master and N workers as child processes.

Each worker advertises GPU addresses through its own discovery script, so every GPU belongs
to exactly one worker. With NVIDIA GPUs present (``nvidia-smi -L``) the real indices are split
between the workers; without them the workers advertise *simulated* slots so Spark's GPU
scheduling path (``spark.*.resource.gpu.*``, fractional task amounts, barrier stages) still
runs. Every status says which.

State (pids, ports, log files) lives in a state directory, default ``~/.gpuspark/cluster``,
overridable with ``GPUSPARK_STATE_DIR`` or the ``state_dir`` argument. ``down`` stops exactly
the process groups that ``up`` started.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from gpuspark._util import envvars
from gpuspark._util.net import free_port, http_get_json
from gpuspark._util.procs import pid_alive, spawn_group, terminate_groups
from gpuspark._util.signals import terminate_raises
from gpuspark.cluster import connect_server, netns
from gpuspark.cluster.announce import announce_master, withdraw_master
from gpuspark.cluster.conf import metrics_properties, write_rendered
from gpuspark.cluster.machine import check_machine
from gpuspark.cluster.security import ensure_secret, read_secret
from gpuspark.cluster.session import session
from gpuspark.cluster.shape import (
    EmbeddedShape,
    check_hosts,
    check_hosts_workers,
    embedded_shape,
    parse_memory_mb,
    worker_address,
)
from gpuspark.cluster.state import (
    ClusterState,
    ClusterStatus,
    WorkerState,
    WorkerStatus,
    read_state,
    write_state,
)
from gpuspark.cluster.workers import (
    assign_gpus,
    daemon_security,
    detect_gpus,
    remove_dirs,
    spark_home,
    worker_properties,
)
from gpuspark.errors import ClusterError, GpusparkError
from gpuspark.spec import default_spec, resolve_spec

__all__ = [
    "ClusterState",
    "ClusterStatus",
    "LocalCluster",
    "WorkerState",
    "WorkerStatus",
    "default_state_dir",
    "detect_gpus",
    "spark_home",
]

STATE_FILE = "cluster.json"
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1"
"""JVM options of the embedded master and workers (unless ``SPARK_DAEMON_JAVA_OPTS`` is set):
they only coordinate, so the quick C1 compiler alone, one compiler thread and the serial
collector start them sooner and leave the cores to executors and ranks (on 2 busy cores,
``cluster up`` took a median 13 s with them vs 25 s without, 3 alternating runs each).
Executors and drivers keep the JVM's defaults: they do the work."""


def default_state_dir() -> Path:
    """``$GPUSPARK_STATE_DIR`` or ``~/.gpuspark/cluster``."""
    env = envvars.STATE_DIR.get()
    return Path(env).expanduser() if env else Path.home() / ".gpuspark" / "cluster"


class LocalCluster:
    """A real Spark standalone cluster on this machine, usable as a context manager: the
    cluster it starts is stopped however the block ends, SIGTERM and SIGHUP included.

    >>> with LocalCluster(workers=2, cores=2, gpus=2) as cluster:   # doctest: +SKIP
    ...     spark = cluster.session()
    """

    def __init__(
        self,
        workers: int | None = None,
        cores: int | None = None,
        memory: str | None = None,
        gpus: int | None = None,
        *,
        spec: Any = None,
        state_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        timeout: float = 120.0,
        secure: bool = False,
        hosts: int | None = None,
        connect: bool = False,
        connect_port: int | None = None,
        netns: bool = False,
        link_rate: str | None = None,
    ) -> None:
        for name, value, least in (("workers", workers, 1), ("cores", cores, 1), ("gpus", gpus, 0)):
            if value is not None and value < least:
                raise ClusterError(f"{name}={value} must be at least {least}")
        if memory is not None:
            parse_memory_mb(memory)  # a bad size is refused before anything is written
        self.hosts = check_hosts(hosts, host)
        """Distinct loopback addresses for the workers (``None``: all on ``host``)."""
        self.spec = spec
        """The spec whose shape the cluster rehearses (``None``: the built-in spec)."""
        self.overrides: dict[str, Any] = {
            "workers": workers,
            "cores": cores,
            "memory": memory,
            "gpus": gpus,
        }
        self.host = host
        self.timeout = timeout
        self.secure = secure
        """Spark authentication (a shared secret, generated) and RPC encryption on."""
        self.connect, self.connect_port = connect or connect_port is not None, connect_port
        """A Spark Connect server after the workers (on ``connect_port``, default a free one)."""
        self.netns, self.link_rate = netns or link_rate is not None, link_rate
        """Each host in a network namespace of its own (:mod:`.netns`), links shaped to a rate."""
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.state: ClusterState | None = None
        self._owns = False
        self._made_dirs: list[Path] = []
        """Worker folders the current start made (removed again if it fails)."""

    def plan_shape(self, real_gpus: list[str] | None = None) -> EmbeddedShape:
        """Workers and executors this cluster starts with, derived from its spec (no side
        effects besides ``nvidia-smi -L`` when ``real_gpus`` is not given). With ``hosts``
        and no ``workers``, at least one worker per host; fewer workers than hosts are
        refused."""
        spec = resolve_spec(self.spec)
        real = detect_gpus() if real_gpus is None else real_gpus
        shape = embedded_shape(spec, real_gpus=len(real), **self.overrides)
        few = shape.workers < (self.hosts or 0) or self.netns  # --netns: one worker per host
        if self.hosts and self.overrides["workers"] is None and few:
            # --hosts N without --workers: one worker per host at least
            overrides = {**self.overrides, "workers": self.hosts}
            shape = embedded_shape(spec, real_gpus=len(real), **overrides)
        check_hosts_workers(self.hosts, shape.workers)
        return shape

    @property
    def shape(self) -> EmbeddedShape | None:
        """The shape of the running cluster (``None`` before it starts)."""
        if self.state is None or not self.state.shape:
            return None
        return EmbeddedShape.from_dict(self.state.shape)

    # -- discovery of a running cluster ---------------------------------------------------

    @classmethod
    def running(cls, state_dir: str | os.PathLike[str] | None = None) -> LocalCluster | None:
        """The cluster recorded in ``state_dir`` if its master is alive, else ``None``."""
        handle = cls(state_dir=state_dir)
        state = handle._read_state()
        if state is None or not pid_alive(state.master_pid):
            return None
        handle.state = state
        return handle

    @property
    def master_url(self) -> str:
        """``spark://host:port`` of the running master."""
        if self.state is None:
            raise ClusterError("the embedded cluster is not running", remedy="gpuspark cluster up")
        return self.state.master_url

    @property
    def web_ui(self) -> str | None:
        """``http://host:port`` of the running master's web UI (``None``: not running)."""
        if self.state is None:
            return None
        return f"http://{self.state.host}:{self.state.webui_port}"

    @property
    def gpus_simulated(self) -> bool:
        """True when the workers advertise simulated GPU slots (no NVIDIA GPU found)."""
        return bool(self.state and self.state.gpus_simulated)

    # -- start ------------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Start master and workers and wait until every worker is registered.

        Raises :class:`ClusterError` if a cluster recorded in the same state directory is
        still running (use :meth:`running` to reuse it), and, before anything starts, when
        this machine cannot hold the shape (:func:`~gpuspark.cluster.machine.check_machine`).
        A start that fails half way stops what it started and removes the worker folders it
        made (the logs stay).
        """
        existing = LocalCluster.running(self.state_dir)
        if existing is not None:
            raise ClusterError(
                f"an embedded cluster is already running at {existing.master_url} "
                f"(state in {self.state_dir})",
                remedy="reuse it, or stop it with `gpuspark cluster down`",
            )
        if self.connect:
            connect_server.check_available()
        real = detect_gpus()
        shape = self.plan_shape(real)
        net = netns.plan_network(self.hosts, shape.workers, self.link_rate) if self.netns else None
        check_machine(shape)
        gpu_sets, simulated = assign_gpus(shape, real)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)
        self._write_metrics_conf()
        secret = self._write_security_conf()
        self._made_dirs = []
        try:
            self.host = netns.bring_up(net) if net is not None else self.host
            self.state = self._start_master(simulated)
            self.state.shape, self.state.netns = shape.as_dict(), net
            self.state.hosts = self.hosts or 0
            if secret is not None:
                self.state.secure, self.state.secret_file = True, str(self._secret_path())
            self._write_state()
            if net is not None:
                args = (resolve_spec(self.spec), net, self.state.master_url, shape, gpu_sets)
                self._made_dirs.append(netns.render_hosts(*args, self.state_dir))
            for i, addresses in enumerate(gpu_sets):
                self.state.workers.append(self._start_worker(i, addresses))
                self._write_state()
            self._wait_registered()
            if self.connect:
                self.start_connect(self.connect_port)
        except BaseException:
            try:
                self.stop()
            finally:
                remove_dirs(self._made_dirs)
                netns.tear_down(net)
            raise
        self._owns = True

        announce_master(self._target_name(), self.host, self.state.webui_port, self._spec_obj())
        return self

    def _target_name(self) -> str:
        state = self.state or self._read_state()
        return f"embedded-{state.master_port if state else 0}"

    def _spec_obj(self) -> Any:
        """The spec as an object for monitoring paths; ``None`` if it cannot be read now."""
        try:
            return resolve_spec(self.spec)
        except GpusparkError:
            return None

    def _write_metrics_conf(self) -> Path:
        """``$SPARK_CONF_DIR/metrics.properties`` for master and workers: the same
        PrometheusServlet paths as a rendered production conf (``/metrics/master/prometheus``)."""
        conf_dir = self.state_dir / "conf"
        conf_dir.mkdir(exist_ok=True)
        spec = self._spec_obj() or default_spec()
        (conf_dir / "metrics.properties").write_text(metrics_properties(spec), encoding="utf-8")
        return conf_dir

    def _secret_path(self) -> Path:
        return self.state_dir / "spark-secret"

    def _write_security_conf(self) -> str | None:
        """With ``secure``: the shared secret (generated once per state directory, mode 600)
        and ``$SPARK_CONF_DIR/spark-defaults.conf`` (mode 600) that the master reads; the
        workers get the same lines in their properties files. ``None`` when not secure."""
        conf_dir = self.state_dir / "conf"
        if not self.secure:
            (conf_dir / "spark-defaults.conf").unlink(missing_ok=True)
            return None
        secret, _created = ensure_secret(self._secret_path())
        write_rendered(
            {"spark-defaults.conf": daemon_security(secret)},
            conf_dir,
            private=frozenset({"spark-defaults.conf"}),
        )
        return secret

    def worker_host(self, index: int) -> str:
        """The address worker ``index`` binds to (see :func:`shape.worker_address`)."""
        return worker_address(index, self.hosts, self.host)

    def _env(self, local_ip: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        home = spark_home()
        env.update(
            SPARK_HOME=str(home),
            SPARK_LOG_DIR=str(self.state_dir / "logs"),
            SPARK_CONF_DIR=str(self.state_dir / "conf"),
            SPARK_LOCAL_IP=local_ip or self.host,
            SPARK_DAEMON_MEMORY=env.get("SPARK_DAEMON_MEMORY", "512m"),
            SPARK_DAEMON_JAVA_OPTS=env.get("SPARK_DAEMON_JAVA_OPTS", _DAEMON_JAVA_OPTS),
            PYSPARK_PYTHON=sys.executable,
        )
        return env

    def _spawn(self, args: list[str], log: Path, local_ip: str | None = None) -> int:
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        return spawn_group(cmd, log, env=self._env(local_ip), cwd=self.state_dir)

    def _start_master(self, simulated: bool) -> ClusterState:
        port, webui = free_port(self.host), free_port(self.host)
        log = self.state_dir / "logs" / "master.log"
        args = [_MASTER_CLASS, "--host", self.host, "--port", str(port)]
        pid = self._spawn([*args, "--webui-port", str(webui)], log)
        return ClusterState(
            master_url=f"spark://{self.host}:{port}",
            host=self.host,
            master_pid=pid,
            master_port=port,
            webui_port=webui,
            gpus_simulated=simulated,
            master_log=str(log),
            started_at=time.time(),
        )

    def _start_worker(self, index: int, addresses: list[str]) -> WorkerState:
        assert self.state is not None
        if self.state.netns is not None:
            return self._start_netns_worker(index)
        host = self.worker_host(index)
        port, webui = free_port(host), free_port(host)
        work = self.state_dir / f"worker-{index}"
        if not work.exists():
            work.mkdir()
            self._made_dirs.append(work)

        text = worker_properties(work, addresses)
        if self.state.secure:
            text += daemon_security(read_secret(self.state.secret_file))
        write_rendered({"worker.conf": text}, work, private=frozenset({"worker.conf"}))
        props = work / "worker.conf"
        log = self.state_dir / "logs" / f"worker-{index}.log"
        args = [_WORKER_CLASS, self.state.master_url, "--host", host, "--port", str(port)]
        shape = EmbeddedShape.from_dict(self.state.shape)
        cores, memory = shape.cores_per_worker, shape.memory_per_worker
        args += ["--webui-port", str(webui), "--cores", str(cores)]
        args += ["--memory", memory, "--work-dir", str(work), "--properties-file", str(props)]
        pid = self._spawn(args, log, local_ip=host)
        return WorkerState(index, pid, port, webui, cores, memory, addresses, str(log), host)

    def _start_netns_worker(self, index: int) -> WorkerState:
        """Worker ``index`` in its namespace from its host's rendered files (:mod:`.netns`)."""
        assert self.state is not None and self.state.netns is not None
        props = worker_properties(self.state_dir, [])
        props += f"spark.metrics.conf={self.state_dir / 'conf' / 'metrics.properties'}\n"
        if self.state.secure:
            props += daemon_security(read_secret(self.state.secret_file))
        env, net = self._env(), self.state.netns
        return netns.start_worker(self.state_dir, net, index, self.state.master_url, env, props)

    def _wait_registered(self) -> None:
        assert self.state is not None
        deadline = time.monotonic() + self.timeout
        want = len(self.state.workers)
        while time.monotonic() < deadline:
            self._check_processes()
            info = self.master_json(timeout=2.0)
            if info is not None and _alive_workers(info) >= want:
                return
            time.sleep(0.5)
        raise ClusterError(
            f"only {_alive_workers(self.master_json() or {})} of {want} Spark workers registered "
            f"with {self.state.master_url} within {self.timeout:.0f}s",
            remedy=f"see the logs in {self.state_dir / 'logs'}",
        )

    def _check_processes(self) -> None:
        assert self.state is not None
        if not pid_alive(self.state.master_pid):
            raise ClusterError(
                "the Spark master exited during start-up", remedy=f"see {self.state.master_log}"
            )
        for w in self.state.workers:
            if not pid_alive(w.pid):
                raise ClusterError(
                    f"Spark worker {w.index} exited during start-up", remedy=f"see {w.log}"
                )

    def start_connect(self, port: int | None = None, **conf: str) -> str:
        """Start this running cluster's Spark Connect server (:mod:`.connect_server`; ``conf``
        over its settings), wait until it accepts clients and return its ``sc://`` URL."""
        assert self.state is not None
        self.state.connect = server = connect_server.spawn(self, port, conf, self._env(self.host))
        self._write_state()  # before the wait: `down` stops it whatever happens next
        connect_server.wait_ready(server, self.timeout)
        return server.url

    # -- status -----------------------------------------------------------------------------

    def master_json(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """The master's JSON status page (``/json/``), or ``None`` if it does not answer."""
        if self.state is None:
            return None
        url = f"{self.web_ui}/json/"
        try:
            return dict(http_get_json(url, timeout=timeout))
        except (OSError, ValueError):
            return None

    def status(self) -> ClusterStatus:
        """Master, workers (alive or dead, cores, memory, GPU addresses) and shape."""
        if self.state is None:
            self.state = self._read_state()
        if self.state is None:
            return ClusterStatus(running=False, state_dir=str(self.state_dir))
        info = self.master_json() or {}
        registered = {(w.get("host"), int(w.get("port", 0))): w for w in info.get("workers", [])}
        workers = [self._worker_status(w, registered) for w in self.state.workers]
        return ClusterStatus.of(self.state, str(self.state_dir), info, workers)

    def _worker_status(
        self, w: WorkerState, registered: dict[tuple[Any, int], dict[str, Any]]
    ) -> WorkerStatus:
        host = w.host or (self.state.host if self.state else "")
        reg = registered.get((host, w.port), {})
        alive = pid_alive(w.pid)
        return WorkerStatus(
            host=host,
            index=w.index,
            pid=w.pid,
            alive=alive,
            state=reg.get("state", "NOT REGISTERED") if alive else "DEAD",
            cores=w.cores,
            cores_used=int(reg.get("coresused", 0)),
            memory=w.memory,
            gpus=w.gpus,
            gpus_simulated=bool(self.state and self.state.gpus_simulated),
            log=w.log,
            **netns.worker_fields(self.state.netns if self.state else None, w.index),
        )

    # -- stop -------------------------------------------------------------------------------

    def stop(self, timeout: float = 15.0) -> list[int]:
        """Stop the process groups this cluster started; return the pids that were stopped."""
        state = self.state or self._read_state()
        if state is None:
            return []
        pids = state.pids()
        terminate_groups(pids, timeout)
        netns.remove(state.netns)

        withdraw_master(f"embedded-{state.master_port}", self._spec_obj())
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)
        self.state = None
        return pids

    # -- sessions ---------------------------------------------------------------------------

    def session(self, kind: str = "data", **conf: Any) -> Any:
        """A ``SparkSession`` on this cluster shaped by its spec (see
        :func:`gpuspark.cluster.session`); ``kind`` is ``"data"`` or ``"training"``."""
        conf = {**netns.driver_conf(self.state.netns if self.state else None), **conf}
        return session(master=self.master_url, kind=kind, spec=self.spec, cluster=self, **conf)

    def __enter__(self) -> LocalCluster:
        with ExitStack() as stack:  # SIGTERM, SIGHUP end the block as Ctrl-C does: stop() runs
            stack.enter_context(terminate_raises())
            self.start()
            self._signals = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._signals:  # the old handlers once stopped
            if self._owns:
                self.stop()

    # -- state file -------------------------------------------------------------------------

    def _read_state(self) -> ClusterState | None:
        return read_state(self.state_dir / STATE_FILE)

    def _write_state(self) -> None:
        assert self.state is not None
        write_state(self.state_dir / STATE_FILE, self.state)


def _alive_workers(info: dict[str, Any]) -> int:
    return sum(1 for w in info.get("workers", []) if w.get("state") == "ALIVE")
