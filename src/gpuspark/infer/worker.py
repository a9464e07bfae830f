"""What runs in the Spark tasks: the model cached per Python worker, the task's device, and the
``mapInArrow`` function that scores bounded batches of rows.

Spark reuses its Python workers across tasks (``spark.python.worker.reuse``, on by default),
so a module-level cache keyed by the checkpoint's path and modification time holds the network
for every task and batch the worker runs: the checkpoint's bytes (a broadcast) are read and the
network built once per worker. Each task reports its worker, whether it loaded the model, its
batches and rows through an accumulator (:class:`WorkerStatsParam`), which is how the job
counts the loads per worker.
"""

from __future__ import annotations

import copy
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuspark.infer.features import CODES_COL, NUMBERS_COL, REASON_COL
from gpuspark.infer.model import build_network

__all__ = [
    "ListParam",
    "ScoreTask",
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


class WorkerStatsParam:
    """Merges ``{worker: {"loads", "tasks", "batches", "rows", "device"}}`` reports (an
    accumulator param: Spark calls ``zero`` and ``addInPlace``)."""

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
        device = task_setup()
        net, loaded = cached_network(task.key, lambda: model_bytes.value, device)
        n_batches = n_rows = 0
        for batch in _scorable(batches, counters["quarantined"]):
            for start in range(0, batch.num_rows, task.batch_size):
                part = batch.slice(start, task.batch_size)
                yield _scored(task, net, device, part)
                n_batches, n_rows = n_batches + 1, n_rows + part.num_rows
                counters["rows"].add(part.num_rows)
        report_task(stats_acc, loaded, n_batches, n_rows, device)

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


def report_task(stats_acc: Any, loaded: bool, batches: int, rows: int, device: Any) -> None:
    """Add this task's worker, load, batches, rows and device to the job's statistics."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    stats = {"loads": int(loaded), "tasks": 1, "batches": batches, "rows": rows}
    stats_acc.add({worker: {**stats, "device": str(device)}})


def _scored(task: ScoreTask, net: Any, device: Any, batch: Any) -> Any:
    """One batch: the kept columns, ``prob_<class>`` per class and ``prediction``."""
    import numpy as np
    import pyarrow as pa
    import torch

    n = batch.num_rows
    parts = []
    if task.numeric:
        parts.append(_matrix(batch.column(NUMBERS_COL), n, task.numeric, np.float32))
    if task.categorical:
        parts.append(_matrix(batch.column(CODES_COL), n, task.categorical, np.int32))
    x = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    with torch.inference_mode():
        logits = net(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device))
        probs = logits.float().softmax(1).cpu().numpy().astype(np.float64)
    best = probs.argmax(1) if n else np.zeros(0, dtype=np.int64)
    columns = [batch.column(c) for c in task.keep]
    columns += [pa.array(np.ascontiguousarray(probs[:, k])) for k in range(probs.shape[1])]
    values = pa.array(task.label_values, type=pa.type_for_alias(task.prediction_type))
    columns.append(values.take(pa.array(best, type=pa.int64())))
    return pa.RecordBatch.from_arrays(columns, names=[*task.keep, *task.probs, "prediction"])


def _matrix(values: Any, n: int, width: int, dtype: Any) -> Any:
    """A fixed-width list column as a ``[n, width]`` array (``flatten`` honours a slice)."""
    import numpy as np

    flat = values.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=dtype).reshape(n, width).astype(np.float32, copy=False)
