"""What runs in the Spark tasks: the model cached per Python worker, the task's device, and the
``mapInArrow`` function that scores bounded batches of rows.

Spark reuses its Python workers across tasks (``spark.python.worker.reuse``, on by default),
so a module-level cache keyed by the checkpoint's path and modification time holds the network
for every task and batch the worker runs: the checkpoint's bytes (a broadcast) are read and the
network built once per worker. Each task reports its worker, whether it loaded the model, its
batches and rows through an accumulator (:class:`WorkerStatsParam`), which is how the job
counts the loads per worker, and where its time went (:class:`TaskClock`).
"""

from __future__ import annotations

import copy
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuspark.infer.features import CODES_COL, NUMBERS_COL, REASON_COL
from gpuspark.infer.model import build_network

__all__ = [
    "ListParam",
    "ScoreTask",
    "TaskClock",
    "WorkerStatsParam",
    "cached_network",
    "load_count",
    "report_task",
    "score_function",
    "task_device",
    "task_setup",
]

_CACHE: dict[tuple[str, int], dict[str, Any]] = {}
"""``(checkpoint path, mtime_ns)`` -> ``{device: network}``; the newest checkpoints only."""
_KEEP = 2
_LOADS = [0]


def load_count() -> int:
    """Networks this process built from checkpoint bytes (for tests and the job's stats)."""
    return _LOADS[0]


def cached_network(
    key: tuple[str, int],
    read: Callable[[], bytes],
    device: Any,
    build: Callable[[bytes, str], Any] = build_network,
) -> tuple[Any, bool]:
    """The network of checkpoint ``key`` on ``device`` and whether it was loaded now:
    ``read()`` and ``build(bytes, path)`` (default: a ``tabular`` network) are called on the
    first use in this process only; another device gets a copy of the loaded network, not
    another load."""
    nets = _CACHE.get(key)
    loaded = nets is None
    if nets is None:
        while len(_CACHE) >= _KEEP:
            _CACHE.pop(next(iter(_CACHE)))
        net = build(read(), key[0])
        _LOADS[0] += 1
        nets = _CACHE[key] = {"cpu": net}
    where = str(device)
    if where not in nets:
        nets[where] = copy.deepcopy(nets["cpu"]).to(device)
    return nets[where], loaded


def task_device(ctx: Any) -> Any:
    """This task's device: the first GPU Spark gave it when CUDA is there, else the CPU
    (simulated GPU slots have addresses but no CUDA)."""
    import torch

    gpu = ctx.resources().get("gpu") if ctx is not None else None
    if gpu is None or not gpu.addresses or not torch.cuda.is_available():
        return torch.device("cpu")
    address = gpu.addresses[0]
    return torch.device(f"cuda:{int(address)}" if address.isdigit() else "cuda")


class TaskClock:
    """Seconds one scoring task spends in each of :attr:`PHASES` (laps of one clock):

    - ``setup``: the task's device and the (cached) network;
    - ``input_wait``: waiting for the next input batch: Spark's scan and encoding, the Arrow
      batch's way into Python (and dropping the rows with a reason);
    - ``to_tensor``: the model's input matrix from the Arrow columns;
    - ``model``: the network and the softmax;
    - ``to_arrow``: the output batch (kept columns, probabilities, prediction);
    - ``output_wait``: handing it back to Spark (the Arrow batch's way out, the write).

    :attr:`seconds` holds the wall time, :attr:`cpu_seconds` this Python process's CPU time
    in the same phases: a phase whose wall time exceeds its CPU time waited (for Spark, or
    for a core that other processes held).
    """

    PHASES = ("setup", "input_wait", "to_tensor", "model", "to_arrow", "output_wait")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self.cpu_seconds = dict.fromkeys(self.PHASES, 0.0)
        self._last = time.perf_counter()
        self._last_cpu = time.process_time()

    def lap(self, phase: str) -> None:
        """Add the wall and CPU time since the last lap to ``phase``."""
        now, cpu = time.perf_counter(), time.process_time()
        self.seconds[phase] += now - self._last
        self.cpu_seconds[phase] += cpu - self._last_cpu
        self._last, self._last_cpu = now, cpu

    def report(self) -> dict[str, float]:
        """Both as one mapping: ``<phase>`` (wall) and ``<phase>_cpu``."""
        return {**self.seconds, **{f"{k}_cpu": v for k, v in self.cpu_seconds.items()}}


class WorkerStatsParam:
    """Merges ``{worker: {"loads", "tasks", "batches", "rows", "device", "seconds"}}``
    reports (an accumulator param: Spark calls ``zero`` and ``addInPlace``); ``seconds``
    (phase -> seconds, :class:`TaskClock`) is summed over the worker's tasks."""

    def zero(self, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {}

    def addInPlace(
        self, value1: dict[str, dict[str, Any]], value2: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        for worker, stats in value2.items():
            mine = value1.setdefault(worker, {"loads": 0, "tasks": 0, "batches": 0, "rows": 0})
            for k in ("loads", "tasks", "batches", "rows"):
                mine[k] += int(stats.get(k, 0))
            mine["device"] = stats.get("device", mine.get("device"))
            seconds = mine.setdefault("seconds", {})
            for phase, value in (stats.get("seconds") or {}).items():
                seconds[phase] = seconds.get(phase, 0.0) + float(value)
        return value1


class ListParam:
    """Concatenates the lists the tasks add (an accumulator param), e.g. quarantine rows."""

    def zero(self, value: list[Any]) -> list[Any]:
        return []

    def addInPlace(self, value1: list[Any], value2: list[Any]) -> list[Any]:
        value1.extend(value2)
        return value1


@dataclass(frozen=True)
class ScoreTask:
    """What every task needs to score (pickled into the tasks: plain values)."""

    key: tuple[str, int]
    """The checkpoint's path and mtime_ns: the cache key."""
    keep: tuple[str, ...]
    probs: tuple[str, ...]
    """The names of the probability columns, one per class."""
    label_values: tuple[Any, ...]
    """The class of each output, as ``prediction`` holds it."""
    prediction_type: str
    """``bool``, ``int64``, ``float64`` or ``string``: the pyarrow type of ``prediction``."""
    batch_size: int
    numeric: int
    categorical: int


def score_function(
    task: ScoreTask, model_bytes: Any, counters: dict[str, Any], stats_acc: Any
) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: the rows with a reason (:data:`REASON_COL`) left out and
    counted (``counters["quarantined"]``; the quarantine job writes them), the others cut
    into batches of at most ``task.batch_size`` rows, each scored and yielded with the kept
    columns."""

    def score(batches: Iterable[Any]) -> Iterator[Any]:
        clock = TaskClock()
        device = task_setup()
        net, loaded = cached_network(task.key, lambda: model_bytes.value, device)
        scorer = _Scorer(task, net, device, clock)
        clock.lap("setup")
        n_batches = n_rows = 0
        for batch in _scorable(batches, counters["quarantined"]):
            clock.lap("input_wait")
            for start in range(0, batch.num_rows, task.batch_size):
                part = batch.slice(start, task.batch_size)
                yield scorer.score(part)
                clock.lap("output_wait")
                n_batches, n_rows = n_batches + 1, n_rows + part.num_rows
                counters["rows"].add(part.num_rows)
        clock.lap("input_wait")  # the end of the input
        report_task(stats_acc, loaded, n_batches, n_rows, device, clock.report())

    return score


def _scorable(batches: Iterable[Any], quarantined: Any) -> Iterator[Any]:
    """The batches without their rows that have a reason (counted)."""
    import pyarrow.compute as pc

    for batch in batches:
        reason = batch.column(REASON_COL)
        if reason.null_count < batch.num_rows:
            quarantined.add(batch.num_rows - reason.null_count)
            batch = batch.filter(pc.is_null(reason))
        if batch.num_rows:
            yield batch


def task_setup() -> Any:
    """In a task: its device (:func:`task_device`) and as many torch threads as its CPUs."""
    import torch
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is not None:
        torch.set_num_threads(max(1, int(ctx.cpus())))
    return task_device(ctx)


def report_task(
    stats_acc: Any,
    loaded: bool,
    batches: int,
    rows: int,
    device: Any,
    seconds: dict[str, float] | None = None,
) -> None:
    """Add this task's worker, load, batches, rows, device and ``seconds`` per phase
    (:class:`TaskClock`) to the job's statistics."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    stats = {"loads": int(loaded), "tasks": 1, "batches": batches, "rows": rows}
    stats_acc.add({worker: {**stats, "device": str(device), "seconds": dict(seconds or {})}})


class _Scorer:
    """One task's scoring of its batches: the network on its device, one input matrix
    reused by every batch (no allocation per batch), the classes as an Arrow array."""

    def __init__(self, task: ScoreTask, net: Any, device: Any, clock: TaskClock) -> None:
        import numpy as np
        import pyarrow as pa

        self.task, self.net, self.device, self.clock = task, net, device, clock
        width = task.numeric + task.categorical
        self.matrix = np.empty((task.batch_size, width), dtype=np.float32)
        self.values = pa.array(task.label_values, type=pa.type_for_alias(task.prediction_type))
        self.names = [*task.keep, *task.probs, "prediction"]

    def inputs(self, batch: Any) -> Any:
        """The model's input of ``batch`` (``[rows, numbers + codes]`` float32), a view of
        :attr:`matrix`: the numbers, then the codes converted in place."""
        import numpy as np

        n, k = batch.num_rows, self.task.numeric
        if n > len(self.matrix):
            self.matrix = np.empty((n, self.matrix.shape[1]), dtype=np.float32)
        x = self.matrix[:n]
        if k:
            x[:, :k] = _values(batch.column(NUMBERS_COL)).reshape(n, k)
        if self.task.categorical:
            x[:, k:] = _values(batch.column(CODES_COL)).reshape(n, self.task.categorical)
        return x

    def score(self, batch: Any) -> Any:
        """One batch: the kept columns, ``prob_<class>`` per class and ``prediction``."""
        import numpy as np
        import pyarrow as pa
        import torch

        clock = self.clock
        inputs = torch.from_numpy(self.inputs(batch)).to(self.device)
        clock.lap("to_tensor")
        with torch.inference_mode():
            probs = self.net(inputs).float().softmax(1).cpu().numpy()
        clock.lap("model")
        best = probs.argmax(1) if batch.num_rows else np.zeros(0, dtype=np.int64)
        by_class = probs.T.astype(np.float64)  # one contiguous row per class
        columns = [batch.column(c) for c in self.task.keep]
        columns += [pa.array(by_class[k]) for k in range(len(by_class))]
        columns.append(self.values.take(pa.array(best, type=pa.int64())))
        out = pa.RecordBatch.from_arrays(columns, names=self.names)
        clock.lap("to_arrow")
        return out


def _values(values: Any) -> Any:
    """The values of a fixed-width list column as one flat array (``flatten`` honours a
    slice; no copy for numbers without nulls)."""
    return values.flatten().to_numpy(zero_copy_only=False)
