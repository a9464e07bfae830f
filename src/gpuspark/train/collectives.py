"""Counting the collectives a model's communication issues, by process group.

DDP's comm hooks and FSDP2 look ``torch.distributed``'s collectives up on the module at call
time, so one wrapper per function (installed once) sees every call: a call on a group that has
a meter reports the bytes of its full-size buffer and the time it blocked the caller; a call on
any other group passes straight through.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuspark.train.ddp import CommMeter

__all__ = ["meter_groups"]

_METERS: dict[int, CommMeter] = {}
_INSTALL_LOCK = threading.Lock()
_DEPTH = threading.local()

# The collectives counted, and the argument holding the full-size buffer: the all-reduced
# tensor, the all-gather's output and the reduce-scatter's input (what one rank's model state
# amounts to before sharding, so DDP's and FSDP's figures compare).
_COUNTED = {
    "all_reduce": "tensor",
    "all_gather_single": "output_tensor",
    "all_gather_into_tensor": "output_tensor",
    "reduce_scatter_single": "input",
    "reduce_scatter_tensor": "input",
}


def _install_collective_counters() -> None:
    """Wrap ``torch.distributed``'s collectives once so calls on metered groups are counted.

    DDP's hooks and FSDP2 look these functions up on the module at call time, so the wrappers
    see every call; a call on a group without a meter passes straight through.
    """
    import torch.distributed as dist

    with _INSTALL_LOCK:
        for name, buffer_arg in _COUNTED.items():
            original = getattr(dist, name, None)
            if original is None or getattr(original, "_gpuspark_counter", False):
                continue
            setattr(dist, name, _counting(original, buffer_arg))


def _counting(original: Any, buffer_arg: str) -> Any:
    """``original`` wrapped: the bytes of ``buffer_arg`` and the time the call blocked reach
    the meter of the call's group. Nested calls (one collective built on another) count once."""
    import inspect

    signature = inspect.signature(original)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs).arguments
        meter = _METERS.get(id(bound.get("group")))
        if meter is None or getattr(_DEPTH, "inside", False):
            return original(*args, **kwargs)
        tensor = bound[buffer_arg]
        _DEPTH.inside = True
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _DEPTH.inside = False
            blocked = 0.0 if bound.get("async_op") else time.perf_counter() - t0
            meter.on_collective(tensor.numel() * tensor.element_size(), blocked)

    call._gpuspark_counter = True  # type: ignore[attr-defined]
    call.__wrapped__ = original  # type: ignore[attr-defined]
    call.__doc__ = original.__doc__
    call.__name__ = original.__name__
    return call


def meter_groups(meter: CommMeter, groups: list[Any]) -> None:
    """Count the collectives issued on ``groups`` into ``meter``."""
    _install_collective_counters()
    for group in groups:
        _METERS[id(group)] = meter
