"""One background thread that runs an iterator ahead of its consumer (both loaders use it)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["thread_ahead"]

T = TypeVar("T")


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
