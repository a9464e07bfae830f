"""The training ranks' Prometheus exporter: one ``/metrics`` per rank process.

:func:`serve` starts it (once per process; later calls return the running one) on its own
:class:`prometheus_client.CollectorRegistry`. The training loop hands it each optimizer step
through :meth:`RankMetrics.step`, which only adds numbers to plain attributes (a couple of
microseconds, no lock, no label lookup); the Prometheus series are built from those numbers
when someone scrapes. Every name comes from :mod:`gpuspark.monitor.names`; the labels are
``run_id``, ``rank``, ``host``, ``team`` and nothing that grows with steps or samples.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gpuspark.monitor import names as n
from gpuspark.monitor.rank_settings import RankSettings, rank_settings, write_endpoint

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["STEP_BUCKETS", "RankMetrics", "current", "serve"]

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the step-duration histogram; ``+Inf`` is added."""

_PORT_TRIES = 64
"""Ports tried after the preferred one when it is busy (two runs on one node)."""

_LOADER_KEYS = (
    ("samples", n.LOADER_RECORDS),
    ("skipped_corrupt", n.LOADER_CORRUPT),
    ("cache_hits", n.LOADER_CACHE_HITS),
    ("cache_misses", n.LOADER_CACHE_MISSES),
    ("cache_bytes_fetched", n.LOADER_CACHE_BYTES),
)
"""``loader.stats()`` key -> counter it feeds."""

_HELP = {
    n.SAMPLES: "Samples this rank has trained on.",
    n.STEPS: "Optimizer steps this rank has finished.",
    n.STEP_SECONDS: "Wall-clock seconds per optimizer step, data wait included.",
    n.STEP_PHASE: "Seconds of optimizer steps spent per phase.",
    n.GRAD_SENT: "Gradient bytes put on the wire (after compression).",
    n.GRAD_UNCOMPRESSED: "Gradient bytes the same all-reduces would send uncompressed.",
    n.LOSS: "Loss of the last optimizer step on this rank.",
    n.LEARNING_RATE: "Learning rate of the first parameter group.",
    n.EPOCH: "Epoch being trained (0-based).",
    n.LAST_STEP: "Unix time the last optimizer step finished.",
    n.WORLD_SIZE: "Ranks in the run.",
    n.RUN_INFO: "Describes the run: recipe, backend, device (always 1).",
    n.LOADER_RECORDS: "Records the shard loader decoded.",
    n.LOADER_CORRUPT: "Corrupt records the loader skipped.",
    n.LOADER_CACHE_HITS: "Shard files served from the node-local cache.",
    n.LOADER_CACHE_MISSES: "Shard files fetched into the node-local cache.",
    n.LOADER_CACHE_BYTES: "Bytes fetched into the node-local cache.",
    n.CUDA_ALLOCATED: "torch.cuda.memory_allocated() of this rank's device.",
    n.CUDA_RESERVED: "torch.cuda.memory_reserved() of this rank's device.",
}


class _Values:
    """The numbers behind the series; written by the training thread, read at scrape time."""

    def __init__(self) -> None:
        self.samples = 0
        self.steps = 0
        self.buckets = [0] * (len(STEP_BUCKETS) + 1)
        self.step_sum = 0.0
        self.phases = [0.0] * len(n.PHASES)
        self.sent = 0
        self.raw = 0
        self.loss: float | None = None
        self.lr: float | None = None
        self.epoch: int | None = None
        self.last_step: float | None = None
        self.world_size: int | None = None
        self.info: tuple[str, str, str] | None = None
        self.loader: dict[str, float] | None = None
        self.loader_seen: dict[str, float] = {}
        self.cuda: tuple[int, int] | None = None


class RankMetrics:
    """This rank's metrics and their HTTP endpoint; made by :func:`serve`."""

    def __init__(self, settings: RankSettings, server: Any, port: int) -> None:
        self.settings = settings
        self.port = port
        """The port actually bound (the preferred one, or the next free one)."""
        self.host = settings.host
        self.announced = False
        """Set by whoever printed :attr:`url` for the user (printed once per process)."""
        self._server = server
        self._pid = os.getpid()
        self._label_values = self._labels(settings)
        self.v = _Values()

    @staticmethod
    def _labels(s: RankSettings) -> list[str]:
        return [s.run_id, str(s.rank), s.hostname, s.team]

    @property
    def url(self) -> str:
        """``http://<host>:<port>/metrics`` (the machine's name when bound to every address)."""
        host = self.settings.hostname if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}/metrics"

    @property
    def run_id(self) -> str:
        """The ``run_id`` label."""
        return self.settings.run_id

    # -- per step (training thread) --------------------------------------------------------
    def step(
        self,
        samples: int,
        seconds: float,
        phases: Mapping[str, float] | None = None,
        sent_bytes: int = 0,
        raw_bytes: int = 0,
        loss: float | None = None,
        lr: float | None = None,
        epoch: int | None = None,
    ) -> None:
        """Account one finished optimizer step of ``samples`` samples and ``seconds`` seconds.

        ``phases`` maps names of :data:`~gpuspark.monitor.names.PHASES` to this step's seconds.
        """
        v = self.v
        v.samples += samples
        v.steps += 1
        v.buckets[bisect.bisect_left(STEP_BUCKETS, seconds)] += 1
        v.step_sum += seconds
        if phases:
            acc = v.phases
            for i, name in enumerate(n.PHASES):
                acc[i] += phases.get(name, 0.0)
        v.sent += sent_bytes
        v.raw += raw_bytes
        if loss is not None:
            v.loss = loss
        if lr is not None:
            v.lr = lr
        if epoch is not None:
            v.epoch = epoch
        v.last_step = time.time()

    def loader(self, stats: Mapping[str, float]) -> None:
        """Take a loader's running totals (``ShardLoader.stats()``); a fresh loader (totals
        that went down) adds from zero, so the counters never go back."""
        v = self.v
        total: dict[str, float] = dict(v.loader) if v.loader is not None else {}
        for key, _ in _LOADER_KEYS:
            now = float(stats.get(key, 0) or 0)
            before = v.loader_seen.get(key, 0.0)
            delta = now - before if now >= before else now
            total[key] = total.get(key, 0.0) + delta
            v.loader_seen[key] = now
        v.loader = total

    def cuda_memory(self, device: Any = None) -> None:
        """Sample ``torch.cuda.memory_allocated/reserved`` (skipped when CUDA is not in use)."""
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        self.v.cuda = (
            int(torch.cuda.memory_allocated(device)),
            int(torch.cuda.memory_reserved(device)),
        )

    def describe(self, *, world_size: int, recipe: str, backend: str, device: str) -> None:
        """Set the run's world size and the ``run_info`` labels."""
        self.v.world_size = int(world_size)
        self.v.info = (recipe, backend, device)

    # -- life cycle ------------------------------------------------------------------------
    def relabel(self, settings: RankSettings) -> None:
        """A new run in the same process: new labels, every value back to zero."""
        self.settings = settings
        self._label_values = self._labels(settings)
        self.v = _Values()
        write_endpoint(settings, self.port, self.host)

    def close(self) -> None:
        """Stop the HTTP server (idempotent); :func:`serve` will start a new one."""
        global _CURRENT
        server, self._server = self._server, None
        if server is not None and self._pid == os.getpid():
            server.shutdown()
            server.server_close()
        with _LOCK:
            if _CURRENT is self:
                _CURRENT = None

    @property
    def running(self) -> bool:
        """Whether this process serves the endpoint."""
        return self._server is not None and self._pid == os.getpid()

    def _drop_in_child(self) -> None:
        """After ``fork``: close the inherited listening socket; the parent keeps serving."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.socket.close()

    # -- scrape (server thread) ------------------------------------------------------------
    def collect(self) -> Iterator[Any]:
        """The metric families, built from the current values (``Collector`` protocol)."""
        from prometheus_client.core import GaugeMetricFamily

        v, labels = self.v, self._label_values
        yield from self._counters(v, labels)
        yield self._histogram(v, labels)
        for name, value in (
            (n.LOSS, v.loss),
            (n.LEARNING_RATE, v.lr),
            (n.EPOCH, v.epoch),
            (n.LAST_STEP, v.last_step),
            (n.WORLD_SIZE, v.world_size),
        ):
            if value is not None:
                yield _gauge(name, labels, value)
        if v.info is not None:
            info = GaugeMetricFamily(
                n.RUN_INFO, _HELP[n.RUN_INFO], labels=[*n.LABELS, "recipe", "backend", "device"]
            )
            info.add_metric([*labels, *v.info], 1.0)
            yield info
        if v.cuda is not None:
            yield _gauge(n.CUDA_ALLOCATED, labels, v.cuda[0])
            yield _gauge(n.CUDA_RESERVED, labels, v.cuda[1])

    @staticmethod
    def _counters(v: _Values, labels: list[str]) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for name, value in (
            (n.SAMPLES, v.samples),
            (n.STEPS, v.steps),
            (n.GRAD_SENT, v.sent),
            (n.GRAD_UNCOMPRESSED, v.raw),
        ):
            yield _counter(name, labels, value)
        phase = CounterMetricFamily(n.STEP_PHASE, _HELP[n.STEP_PHASE], labels=[*n.LABELS, "phase"])
        for name, seconds in zip(n.PHASES, list(v.phases), strict=True):
            phase.add_metric([*labels, name], seconds)
        yield phase
        if v.loader is not None:
            loader = dict(v.loader)
            for key, name in _LOADER_KEYS:
                yield _counter(name, labels, loader.get(key) or 0.0)

    @staticmethod
    def _histogram(v: _Values, labels: list[str]) -> Any:
        from prometheus_client.core import HistogramMetricFamily

        counts, total = list(v.buckets), v.step_sum
        cumulative, running = [], 0
        for bound, count in zip((*STEP_BUCKETS, float("inf")), counts, strict=True):
            running += count
            cumulative.append((_le(bound), float(running)))
        hist = HistogramMetricFamily(n.STEP_SECONDS, _HELP[n.STEP_SECONDS], labels=list(n.LABELS))
        hist.add_metric(labels, cumulative, sum_value=total)
        return hist


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _counter(name: str, labels: list[str], value: float) -> Any:
    from prometheus_client.core import CounterMetricFamily

    fam = CounterMetricFamily(name, _HELP[name], labels=list(n.LABELS))
    fam.add_metric(labels, float(value))
    return fam


def _gauge(name: str, labels: list[str], value: float) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    fam = GaugeMetricFamily(name, _HELP[name], labels=list(n.LABELS))
    fam.add_metric(labels, float(value))
    return fam


# -- serving ---------------------------------------------------------------------------------

_LOCK = threading.Lock()
_CURRENT: RankMetrics | None = None


def _forget_after_fork() -> None:
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT._drop_in_child()
    _CURRENT = None


os.register_at_fork(after_in_child=_forget_after_fork)


def current() -> RankMetrics | None:
    """The exporter this process serves, if any."""
    return _CURRENT


def _bind(settings: RankSettings, registry: Any) -> tuple[Any, int]:
    """Start the HTTP server on the preferred port or the next free one."""
    from prometheus_client import start_http_server

    first = settings.port
    last_error: OSError | None = None
    for port in range(first, min(first + _PORT_TRIES, 65536)):
        try:
            server, _thread = start_http_server(port, addr=settings.host, registry=registry)
        except OSError as exc:
            last_error = exc
            continue
        return server, port
    raise OSError(
        f"no free port for /metrics on {settings.host} in {first}-{first + _PORT_TRIES - 1}: "
        f"{last_error}"
    )


def serve(
    port: int | None = None,
    host: str | None = None,
    *,
    run_id: str | None = None,
    team: str | None = None,
    spec: ClusterSpec | None = None,
) -> RankMetrics | None:
    """Serve this rank's ``/metrics``; return its :class:`RankMetrics` (``None`` when off).

    ``port`` is the base port (the rank binds ``port + LOCAL_RANK``, or the next free port
    when that one is busy); ``0`` turns metrics off. Unset values come from the launcher's
    environment, then the spec's ``[monitoring]``, then 9700 on 127.0.0.1 (see
    :mod:`gpuspark.monitor.rank_settings`). A second call in the same process returns the
    running exporter; a different ``run_id`` (or ``team``) relabels it and zeroes its values.
    Under ``gpuspark launch`` the bound endpoint is reported to the driver, which lists it in
    the run's Prometheus target file.
    """
    global _CURRENT
    settings = rank_settings(port, host, run_id=run_id, team=team, spec=spec)
    if not settings.base_port:
        return None
    with _LOCK:
        running = _CURRENT
        if running is not None and running.running:
            if (running.run_id, running.settings.team) != (settings.run_id, settings.team):
                running.relabel(settings)
            return running
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        holder: list[RankMetrics] = []
        registry.register(_Proxy(holder))
        server, bound = _bind(settings, registry)
        metrics = RankMetrics(settings, server, bound)
        holder.append(metrics)
        _CURRENT = metrics
    write_endpoint(settings, bound, settings.host)
    return metrics


class _Proxy:
    """The registry's one collector: asks the :class:`RankMetrics` it was made for."""

    def __init__(self, holder: list[RankMetrics]) -> None:
        self._holder = holder

    def collect(self) -> Iterator[Any]:
        for metrics in self._holder:
            yield from metrics.collect()
