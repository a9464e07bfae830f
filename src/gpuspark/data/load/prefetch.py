"""What both loaders share: option checks, the target device, moving the tensors of a batch,
and one background thread that runs an iterator ahead of its consumer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from gpuspark.errors import LoaderError

__all__ = ["check_options", "loader_device", "map_tensors", "mover", "thread_ahead"]

T = TypeVar("T")


def check_options(batch_size: int, num_workers: int, prefetch: int) -> None:
    """``ValueError`` for a batch size below 1, negative workers or no prefetch."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got: {batch_size}")
    if num_workers < 0 or prefetch < 1:
        raise ValueError(f"need num_workers >= 0 and prefetch >= 1, got: {num_workers}, {prefetch}")


def loader_device(device: Any) -> Any:
    """``device`` as a ``torch.device`` (None stays None); CUDA asked for but absent raises
    :class:`~gpuspark.errors.LoaderError`."""
    if device is None:
        return None
    import torch

    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LoaderError(
            f"device {device} requested but CUDA is not available",
            remedy="pass device=None (CPU tensors) or run on a GPU machine",
        )
    return device


def mover(device: Any) -> Callable[[Any], Any]:
    """``tensor -> tensor.to(device)``, non-blocking to a CUDA device (from pinned memory)."""
    non_blocking = device.type == "cuda"
    return lambda t: t.to(device, non_blocking=non_blocking)


def map_tensors(batch: Any, fn: Callable[[Any], Any]) -> Any:
    """``batch`` with ``fn`` applied to every torch tensor in it (dicts, tuples, lists)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: map_tensors(v, fn) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_tensors(v, fn) for v in batch)
    return batch


def thread_ahead(
    source: Iterator[T],
    depth: int,
    prepare: Callable[[T], T] | None = None,
    name: str = "gpuspark-prefetch",
) -> Iterator[T]:
    """Run ``source`` in a background thread, ``depth`` items ahead of the consumer.

    ``prepare`` runs on each item in that thread (e.g. pinning host memory). An exception in
    ``source`` is raised in the consumer; closing the consumer stops the thread and closes
    ``source``.
    """
    items: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in source:
                if not put(item if prepare is None else prepare(item)):
                    return
            put(done)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=10)
