"""Sharded data parallel (FSDP2 / HSDP) and per-rank memory accounting.

:func:`prepare_sharded` is what :func:`gpuspark.train.prepare` runs for ``strategy="fsdp"``
or ``"hsdp"``. It applies PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) to every
*block* of the model, then to the root, so each rank holds ``1 / shard size`` of the
parameters, gradients and optimizer state, and gathers one block's full weights at a time.

Blocks (the wrap policy): ``wrap=(ModuleClass, ...)`` shards every module of those classes;
by default every module whose class name ends in ``Layer`` or ``Block`` (transformer layers,
ResNet blocks), and when the model has none, each direct child that holds parameters.

- ``fsdp``: one 1-D device mesh over all ranks (every rank holds a shard).
- ``hsdp``: a 2-D mesh ``(replicate, shard)``: parameters are sharded over the ``shard_size``
  ranks of a node (default: the launcher's ``LOCAL_WORLD_SIZE``, processes per node) and
  replicated across nodes, so the all-gathers stay on the fast links inside a node and only
  the gradient all-reduce crosses nodes.

Precision: with ``amp="bf16"`` on CUDA the parameters are gathered and computed in bf16 and
gradients are reduced in fp32; on CPU (gloo) everything stays fp32. ``reduce_dtype`` sets the
gradient reduction dtype (the one communication option FSDP has); DDP's compression hooks
(``fp16``, ``bf16``, ``powersgd``) do not apply and are refused.

Communication is metered as DDP's is (:class:`ShardedCommMeter`): every all-gather,
reduce-scatter and (HSDP) all-reduce FSDP2 issues on the mesh's groups is counted with the
bytes of its full-size buffer. Exposed time: on CPU the time the collectives blocked the
training thread (gloo runs them synchronously); on CUDA the time from the last collective's
launch to the end of backward, as for DDP.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuspark.errors import DDPError, did_you_mean
from gpuspark.train.ddp import AMP_DTYPES, CommMeter, init_distributed, meter_groups

if TYPE_CHECKING:
    import torch

__all__ = [
    "REDUCE_DTYPES",
    "STRATEGIES",
    "ShardedCommMeter",
    "ShardedInfo",
    "block_modules",
    "build_mesh",
    "check_strategy",
    "is_sharded",
    "memory_accounting",
    "no_sync",
    "prepare_sharded",
]

STRATEGIES = ("ddp", "fsdp", "hsdp")
REDUCE_DTYPES = ("fp32", "bf16", "fp16")
_BLOCK_SUFFIXES = ("Layer", "Block")


@dataclass
class ShardedInfo:
    """What the loop and checkpoints need to know about a sharded model."""

    meter: CommMeter
    """Counts the all-gathers, reduce-scatters and all-reduces on the mesh's groups."""
    amp: str | None
    device: Any
    hook_state: Any
    strategy: str
    mesh: Any
    blocks: int
    """Number of modules sharded on their own (the root not counted)."""


class ShardedCommMeter(CommMeter):
    """A :class:`CommMeter` fed by FSDP2's collectives instead of a DDP hook.

    FSDP has no compression, so raw and sent bytes are the same. Collectives blocked the
    training thread (CPU): their summed time is the exposed communication. Launched on a side
    stream (CUDA): the time from the last launch to the end of backward, measured with events
    as for DDP.
    """

    _blocked_s: float = 0.0

    def on_collective(self, nbytes: int, blocked_s: float) -> None:
        """A collective over ``nbytes`` ran on a metered group and held the caller
        ``blocked_s`` seconds."""
        with self._lock:
            self._cur.bytes_raw += nbytes
            self._cur.bytes_sent += nbytes
            self._cur.allreduce_calls += 1
            self._blocked_s += blocked_s
            self._last_launch = time.perf_counter()
        if self.device_type == "cuda":
            self.on_launch(0)

    def begin_step(self) -> None:
        """Start counting a new step (call before forward: the all-gathers run there)."""
        super().begin_step()
        with self._lock:
            self._blocked_s = 0.0

    def end_step(self) -> Any:
        """Close the step: its bytes and its exposed communication time."""
        blocked = self._blocked_s
        step = super().end_step()
        if self.device_type != "cuda":
            step.exposed_s = blocked
        return step


def is_sharded(model: Any) -> bool:
    """True for a model returned by ``prepare(..., strategy="fsdp" | "hsdp")``."""
    return isinstance(getattr(model, "gpuspark_info", None), ShardedInfo)


def _check(strategy: str, compression: str | None, amp: str | None, reduce_dtype: Any) -> None:
    if strategy not in STRATEGIES:
        raise DDPError(
            f"strategy {strategy!r} is unknown{did_you_mean(strategy, STRATEGIES)}",
            remedy="use one of: " + ", ".join(STRATEGIES),
        )
    comp = "none" if compression is None else str(compression).lower()
    if comp != "none":
        raise DDPError(
            f"compression {compression!r} applies to strategy 'ddp' only, not {strategy!r}",
            remedy="drop --compression (compression); from Python, fsdp/hsdp take "
            "reduce_dtype='bf16' or 'fp16' to halve gradient traffic",
        )
    if amp is not None and amp not in AMP_DTYPES:
        raise DDPError(
            f"amp {amp!r} is unknown{did_you_mean(str(amp), AMP_DTYPES)}",
            remedy="use 'bf16', 'fp16' or None",
        )
    if (
        reduce_dtype is not None
        and not _is_dtype(reduce_dtype)
        and (reduce_dtype not in REDUCE_DTYPES)
    ):
        raise DDPError(
            f"reduce_dtype {reduce_dtype!r} is unknown",
            remedy="use one of: " + ", ".join(REDUCE_DTYPES) + " (or a torch.dtype)",
        )


def check_strategy(strategy: str, compression: str | None = None) -> None:
    """Refuse an unknown strategy, or a DDP compression hook with fsdp/hsdp (one line, with
    the remedy), before any process starts; the same rule :func:`prepare_sharded` applies."""
    if strategy != "ddp":
        _check(strategy, compression, None, None)


def _is_dtype(value: Any) -> bool:
    import torch

    return isinstance(value, torch.dtype)


def _dtype(value: Any) -> Any:
    import torch

    if value is None or _is_dtype(value):
        return value
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[value]


def build_mesh(strategy: str, device_type: str, shard_size: int | None = None) -> Any:
    """The device mesh of ``strategy`` over the default process group's ranks.

    ``fsdp``: 1-D over all ranks. ``hsdp``: 2-D ``(replicate, shard)`` with ``shard_size``
    ranks per shard group (default ``LOCAL_WORLD_SIZE``, else the world size).
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if strategy == "fsdp":
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    shard = shard_size or int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    if shard < 1 or world % shard:
        raise DDPError(
            f"hsdp shard size {shard} does not divide the world size {world}",
            remedy="give every node the same number of processes, or pass shard_size= a "
            f"divisor of {world}",
        )
    return init_device_mesh(
        device_type, (world // shard, shard), mesh_dim_names=("replicate", "shard")
    )


def block_modules(model: torch.nn.Module, wrap: tuple[type, ...] | None = None) -> list[Any]:
    """The modules :func:`prepare_sharded` shards on their own (see the module docstring)."""
    if wrap:
        found = [m for m in model.modules() if m is not model and isinstance(m, wrap)]
    else:
        found = [
            m
            for m in model.modules()
            if m is not model and type(m).__name__.endswith(_BLOCK_SUFFIXES)
        ]
        if not found:
            found = [c for c in model.children() if any(True for _ in c.parameters())]
    # Nested matches: keep the outermost only (an inner block is sharded with its parent).
    inner = {id(sub) for m in found for sub in m.modules() if sub is not m}
    return [m for m in found if id(m) not in inner]


def _checkpointed(module: Any) -> None:
    """Recompute ``module``'s activations in backward (``torch.utils.checkpoint``, no wrapper,
    so parameter names and state-dict keys are unchanged)."""
    from torch.utils.checkpoint import checkpoint

    forward = module.forward

    @functools.wraps(forward)
    def recompute(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    module.forward = recompute


def prepare_sharded(
    model: torch.nn.Module,
    *,
    strategy: str = "fsdp",
    compression: str | None = None,
    amp: str | None = None,
    reduce_dtype: Any = None,
    wrap: tuple[type, ...] | None = None,
    checkpoint_activations: bool = False,
    cpu_offload: bool = False,
    shard_size: int | None = None,
) -> Any:
    """Shard ``model`` with FSDP2 over this rank's device mesh; returns the same module.

    ``strategy`` is ``"fsdp"`` or ``"hsdp"`` (see the module docstring for the mesh, the wrap
    policy and precision). ``reduce_dtype`` (``"fp32"``, ``"bf16"``, ``"fp16"`` or a dtype)
    is the gradient reduce-scatter dtype; ``compression`` must be ``None``.
    ``checkpoint_activations`` recomputes each block's activations in backward;
    ``cpu_offload`` keeps sharded parameters, gradients and optimizer state in CPU memory
    (FSDP2 ``CPUOffloadPolicy``; the optimizer steps on CPU). Create the optimizer after this.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    _check(strategy, compression, amp, reduce_dtype)
    if strategy == "ddp":
        raise DDPError("prepare_sharded needs strategy 'fsdp' or 'hsdp'", remedy="use prepare")
    init_distributed()
    cuda = dist.get_backend() == "nccl" and torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else None
    device = device or torch.device("cpu")
    if not cpu_offload:
        model = model.to(device)
    mesh = build_mesh(strategy, device.type, shard_size)
    param_dtype = torch.bfloat16 if (cuda and amp == "bf16") else None
    red = _dtype(reduce_dtype) or (torch.float32 if param_dtype is not None else None)
    kwargs: dict[str, Any] = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=red),
    }
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=cuda)
    blocks = block_modules(model, wrap)
    for block in blocks:
        if checkpoint_activations:
            _checkpointed(block)
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    meter = ShardedCommMeter(compression="none", device_type=device.type)
    # A mesh dimension of one rank (HSDP's replicate group on one node) moves nothing. (DDP's
    # hook hands its buckets to all_reduce in a world of one too: counted, as it always was.)
    groups = [mesh.get_group(dim) for dim in range(mesh.ndim)]
    meter_groups(meter, [g for g in groups if g.size() > 1])
    info = ShardedInfo(
        meter=meter,
        amp=amp,
        device=device,
        hook_state=None,
        strategy=strategy,
        mesh=mesh,
        blocks=len(blocks),
    )
    model.gpuspark_info = info  # type: ignore[assignment]
    return model


@contextlib.contextmanager
def no_sync(model: Any) -> Iterator[None]:
    """Accumulate gradients locally: DDP's ``no_sync()``; FSDP2 skips the reduce-scatter."""
    if not is_sharded(model):
        with model.no_sync():
            yield
        return
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _local_bytes(t: Any) -> int:
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.to_local()
    return int(t.numel() * t.element_size())


def memory_accounting(model: Any, optimizer: Any = None) -> dict[str, int]:
    """Bytes this rank holds for model state: its shards (FSDP/HSDP) or full replicas (DDP).

    ``param_bytes``, ``grad_bytes`` (gradients present now: call between backward and
    ``zero_grad``), ``optimizer_bytes`` (tensors in the optimizer state), their sum
    ``model_state_bytes``, and ``cuda_peak_bytes`` when the model is on a GPU.
    """
    import torch

    params = list(model.parameters())
    out = {
        "param_bytes": sum(_local_bytes(p) for p in params),
        "grad_bytes": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer_bytes": 0,
    }
    if optimizer is not None:
        out["optimizer_bytes"] = sum(
            _local_bytes(v)
            for state in optimizer.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0
        )
    out["model_state_bytes"] = out["param_bytes"] + out["grad_bytes"] + out["optimizer_bytes"]
    device = getattr(getattr(model, "gpuspark_info", None), "device", None)
    if getattr(device, "type", "cpu") == "cuda":
        out["cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return out
