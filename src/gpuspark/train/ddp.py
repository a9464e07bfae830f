"""DDP wrapping with gradient compression, exact byte accounting and step-time breakdown.

:func:`prepare` wraps a model in :class:`torch.nn.parallel.DistributedDataParallel` on the right
device and registers one of PyTorch's built-in communication hooks:

- ``None``: ``default_hooks.allreduce_hook`` (the same divide-then-sum all-reduce DDP does
  without a hook, registered explicitly so that it can be measured);
- ``"fp16"`` / ``"bf16"``: ``default_hooks.fp16_compress_hook`` / ``bf16_compress_hook``
  (DDP accepts the latter only with NCCL; on gloo, which can all-reduce bfloat16, the same
  cast is done by :func:`bf16_cast_hook`);
- ``"powersgd"``: ``powerSGD_hook.powerSGD_hook`` with error feedback and warm start.

Every hook is wrapped by a :class:`CommMeter`: bytes of the gradient bucket handed to the hook
("raw") and bytes of every tensor the hook hands to ``torch.distributed.all_reduce`` ("sent")
are counted per step. Counting only looks at tensor sizes, so numerics are unchanged. To count
the all-reduces a hook issues from its future callbacks (PowerSGD's P and Q all-reduces run
there), DDP communicates on a dedicated process group and a thin wrapper around
``torch.distributed.all_reduce`` counts calls on that group only
(:mod:`gpuspark.train.collectives`, which counts FSDP's all-gathers and reduce-scatters too).

Communication not hidden behind backward computation is measured from the hook futures: on
CPU the latest completion time minus the time the last bucket was handed over (the end of
gradient computation); on CUDA with events recorded at the same two points.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuspark._util import envvars
from gpuspark._util.net import free_port
from gpuspark.errors import DDPError, did_you_mean
from gpuspark.train.collectives import meter_groups

if TYPE_CHECKING:
    import torch

__all__ = [
    "AMP_DTYPES",
    "COMPRESSIONS",
    "CommMeter",
    "DDPError",
    "StepComm",
    "autocast",
    "bf16_cast_hook",
    "comm_meter",
    "comm_state_dict",
    "init_distributed",
    "load_comm_state_dict",
    "prepare",
]

COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
AMP_DTYPES = ("bf16", "fp16")


@dataclass
class StepComm:
    """Communication figures of one optimizer step (one DDP backward with hooks)."""

    bytes_raw: int = 0
    """Bytes of the gradient buckets handed to the communication hook (before compression)."""
    bytes_sent: int = 0
    """Bytes of the tensors handed to ``all_reduce`` (after compression)."""
    allreduce_calls: int = 0
    exposed_s: float = 0.0
    """Communication time not hidden behind backward computation."""


@dataclass
class CommMeter:
    """Counts gradient bytes and hook timing for one DDP model; thread-safe.

    Hook futures complete on the backend's threads, so counters are guarded by a lock.
    """

    compression: str
    device_type: str = "cpu"
    steps: list[StepComm] = field(default_factory=list)
    _cur: StepComm = field(default_factory=StepComm)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_launch: float = 0.0
    _last_done: float = 0.0
    _launch_event: Any = None
    keep_history: int = 100_000

    # -- called from the hook wrapper and the all_reduce counter -----------------------------
    def on_launch(self, nbytes: int) -> None:
        """A gradient bucket of ``nbytes`` was handed to the hook."""
        with self._lock:
            self._cur.bytes_raw += nbytes
            self._last_launch = time.perf_counter()
        if self.device_type == "cuda":
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._launch_event = ev

    def on_collective(self, nbytes: int, blocked_s: float) -> None:
        """A tensor of ``nbytes`` was handed to a collective on the DDP group (the hook's
        all-reduces are asynchronous: ``blocked_s`` is not used)."""
        with self._lock:
            self._cur.bytes_sent += nbytes
            self._cur.allreduce_calls += 1

    def on_done(self) -> None:
        """A hook future completed."""
        with self._lock:
            self._last_done = max(self._last_done, time.perf_counter())

    # -- called by the training loop ---------------------------------------------------------
    def begin_step(self) -> None:
        """Start counting a new step (call before forward)."""
        with self._lock:
            self._cur = StepComm()
            self._last_launch = 0.0
            self._last_done = 0.0
            self._launch_event = None

    def end_step(self) -> StepComm:
        """Close the current step (call after ``backward()`` returned) and return its figures.

        A step with no hook call (a ``no_sync`` micro-batch) is not recorded.
        """
        if self.device_type == "cuda" and self._launch_event is not None:
            import torch

            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            exposed = self._launch_event.elapsed_time(end) / 1000.0
        else:
            exposed = max(0.0, self._last_done - self._last_launch) if self._last_launch else 0.0
        with self._lock:
            cur = self._cur
            cur.exposed_s = exposed
            if cur.bytes_raw or cur.bytes_sent:
                self.steps.append(cur)
                del self.steps[: -self.keep_history]
            self._cur = StepComm()
        return cur

    def totals(self, since: int = 0) -> dict[str, float]:
        """Sums over recorded steps ``since`` onwards: bytes raw/sent, ratio, exposed seconds."""
        steps = self.steps[since:]
        raw = sum(s.bytes_raw for s in steps)
        sent = sum(s.bytes_sent for s in steps)
        return {
            "steps": len(steps),
            "bytes_raw": raw,
            "bytes_sent": sent,
            "sent_over_raw": (sent / raw) if raw else 0.0,
            "exposed_comm_s": sum(s.exposed_s for s in steps),
        }


def _metered(hook: Any, meter: CommMeter) -> Any:
    """Wrap a DDP comm hook so bucket bytes and completion times reach ``meter``."""

    def wrapped(state: Any, bucket: Any) -> Any:
        buf = bucket.buffer()
        meter.on_launch(buf.numel() * buf.element_size())
        fut = hook(state, bucket)

        def done(f: Any) -> Any:
            meter.on_done()
            return f.value()

        return fut.then(done)

    import torch
    import torch.distributed as dist

    wrapped.__name__ = getattr(hook, "__name__", "hook")
    # DDP checks these annotations as objects (strings under postponed evaluation fail).
    wrapped.__annotations__ = {
        "bucket": dist.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }
    return wrapped


def bf16_cast_hook(process_group: Any, bucket: Any) -> Any:
    """bf16 gradient compression for backends DDP refuses ``bf16_compress_hook`` on (gloo).

    DDP only accepts PyTorch's ``bf16_compress_hook`` with NCCL >= 2.10, although gloo can
    all-reduce bfloat16. This does the same thing: cast the bucket to bf16 and divide by the
    world size, all-reduce, cast back into the bucket in place.
    """
    import torch
    import torch.distributed as dist

    group: Any = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(group.size())

    def decompress(fut: Any) -> Any:
        buffer.copy_(fut.value()[0])
        return buffer

    return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)


# -- process group ---------------------------------------------------------------------------


def init_distributed(backend: str = "auto", timeout_s: float | None = None) -> str:
    """Initialise the default process group from ``RANK``/``WORLD_SIZE``/``MASTER_*`` if needed.

    ``backend="auto"`` takes ``GPUSPARK_BACKEND`` (set by the launcher), else NCCL when CUDA is
    available, else gloo. Returns the backend.
    A single process without those variables gets a world of size 1 on a free local port.
    """
    import datetime

    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return str(dist.get_backend())
    if backend == "auto":
        backend = os.environ.get(envvars.BACKEND.name) or (
            "nccl" if torch.cuda.is_available() else "gloo"
        )
    if "RANK" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    kwargs: dict[str, Any] = {}
    if timeout_s is not None:
        kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend, **kwargs)
    return backend


def _device() -> torch.device:
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl" and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _check(compression: str | None, amp: str | None, powersgd_rank: int, start: int) -> str:
    comp = "none" if compression is None else compression.lower()
    if comp not in COMPRESSIONS:
        raise DDPError(
            f"compression {compression!r} is unknown{did_you_mean(comp, COMPRESSIONS)}",
            remedy="use one of: " + ", ".join(COMPRESSIONS),
        )
    if amp is not None and amp not in AMP_DTYPES:
        raise DDPError(
            f"amp {amp!r} is unknown{did_you_mean(str(amp), AMP_DTYPES)}",
            remedy="use 'bf16', 'fp16' or None",
        )
    if comp == "powersgd" and powersgd_rank < 1:
        raise DDPError(f"powersgd_rank must be >= 1, got {powersgd_rank}")
    if comp == "powersgd" and start < 2:
        raise DDPError(
            f"powersgd_start_iter must be >= 2, got {start}",
            remedy="PowerSGD with error feedback and warm start needs 2 plain all-reduce steps",
        )
    return comp


def _probe_bf16(group: Any) -> None:
    """Fail clearly if the backend cannot all-reduce bfloat16 (old gloo builds cannot)."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(1, dtype=torch.bfloat16, device=_device())
    try:
        dist.all_reduce(t, group=group)
    except RuntimeError as exc:
        raise DDPError(
            f"compression 'bf16' is not supported by the {dist.get_backend()} backend: {exc}",
            remedy="use --compression fp16 (compression='fp16') on gloo, or the NCCL backend "
            "on GPUs",
        ) from exc


# -- prepare ---------------------------------------------------------------------------------


@dataclass
class _Info:
    meter: CommMeter
    amp: str | None
    device: Any
    hook_state: Any


def prepare(
    model: torch.nn.Module,
    *,
    strategy: str = "ddp",
    compression: str | None = None,
    powersgd_rank: int = 2,
    powersgd_start_iter: int = 10,
    amp: str | None = None,
    bucket_cap_mb: float | None = None,
    find_unused_parameters: bool = False,
    **sharded: Any,
) -> Any:
    """Wrap ``model`` in DDP on this rank's device with a measured communication hook.

    ``strategy="fsdp"`` or ``"hsdp"`` shards it instead (FSDP2): see
    :func:`gpuspark.train.fsdp.prepare_sharded` for its options (``reduce_dtype``, ``wrap``,
    ``checkpoint_activations``, ``cpu_offload``, ``shard_size``); those are refused for DDP.

    The default process group is initialised from the environment if it is not yet
    (see :func:`init_distributed`). ``compression`` is ``None``, ``"fp16"``, ``"bf16"`` or
    ``"powersgd"`` (rank ``powersgd_rank``, plain all-reduce for the first
    ``powersgd_start_iter`` steps, error feedback and warm start on). ``amp`` records the
    autocast dtype used by :func:`autocast`. ``bucket_cap_mb=None`` keeps DDP's default
    buckets (1 MiB first, so its all-reduce overlaps the rest of backward, then 25 MiB); a
    number caps every bucket, the first too. The byte/time meter is :func:`comm_meter(model)`;
    :func:`gpuspark.train.loop.fit` closes its steps, a hand-written loop calls
    ``meter.begin_step()`` before forward and ``meter.end_step()`` after ``backward()``.
    """
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    if strategy != "ddp" or sharded:
        from gpuspark.train import fsdp

        if strategy == "ddp":
            raise DDPError(
                f"option(s) {', '.join(sorted(sharded))} apply to strategy 'fsdp'/'hsdp' only",
                remedy="pass strategy='fsdp' or 'hsdp', or drop them",
            )
        return fsdp.prepare_sharded(
            model, strategy=strategy, compression=compression, amp=amp, **sharded
        )
    comp = _check(compression, amp, powersgd_rank, powersgd_start_iter)
    init_distributed()
    device = _device()
    model = model.to(device)
    group = dist.new_group(ranks=list(range(dist.get_world_size())))
    if comp == "bf16":
        _probe_bf16(group)
    if comp == "powersgd" and dist.get_backend() == "gloo":
        # PowerSGD issues its P and Q all-reduces from future callbacks, which gloo runs on
        # its own threads: with several buckets the ranks can issue them in different orders
        # ("Received data size doesn't match expected size"). One bucket keeps the order.
        model_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        bucket_cap_mb = max(bucket_cap_mb or 25, model_mb + 1)
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=group,
        bucket_cap_mb=bucket_cap_mb,
        find_unused_parameters=find_unused_parameters,
    )
    meter = CommMeter(compression=comp, device_type=device.type)
    state: Any = group
    hook: Any
    if comp == "none":
        hook = default_hooks.allreduce_hook
    elif comp == "fp16":
        hook = default_hooks.fp16_compress_hook
    elif comp == "bf16":
        hook = default_hooks.bf16_compress_hook if device.type == "cuda" else bf16_cast_hook
    else:
        state = powerSGD_hook.PowerSGDState(
            process_group=group,
            matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=powersgd_start_iter,
            use_error_feedback=True,
            warm_start=True,
            random_seed=0,
        )
        hook = powerSGD_hook.powerSGD_hook
    meter_groups(meter, [group])
    ddp.register_comm_hook(state, _metered(hook, meter))
    ddp.gpuspark_info = _Info(meter=meter, amp=amp, device=device, hook_state=state)  # type: ignore[assignment]
    return ddp


def _info(model: Any) -> _Info:
    info = getattr(model, "gpuspark_info", None)
    if info is None:
        raise DDPError(
            f"model {type(model).__name__} was not wrapped by gpuspark.train.prepare",
            remedy="call model = gpuspark.train.prepare(model, ...) first",
        )
    return info


def comm_meter(model: Any) -> CommMeter:
    """The :class:`CommMeter` of a model returned by :func:`prepare`."""
    return _info(model).meter


def autocast(model: Any) -> Any:
    """An autocast context for the ``amp`` given to :func:`prepare` (a no-op context if none)."""
    import contextlib

    import torch

    info = getattr(model, "gpuspark_info", None)
    if info is None or info.amp is None:
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if info.amp == "bf16" else torch.float16
    return torch.autocast(device_type=info.device.type, dtype=dtype)


def comm_state_dict(model: Any) -> dict[str, Any]:
    """This rank's hook state worth checkpointing (PowerSGD error feedback, P/Q, iter, RNG)."""
    state = _info(model).hook_state
    if not hasattr(state, "error_dict"):
        return {}
    # PowerSGDState.__getstate__ logs a warning on every call; read the same slots directly.
    return {k: getattr(state, k) for k in type(state).__slots__ if k != "process_group"}


def load_comm_state_dict(model: Any, sd: dict[str, Any]) -> None:
    """Restore what :func:`comm_state_dict` returned (no-op for stateless hooks)."""
    if not sd:
        return
    state = _info(model).hook_state
    device = _info(model).device
    for key, value in sd.items():
        if key in ("error_dict", "p_memory_dict", "q_memory_dict"):
            value = {k: v.to(device) for k, v in value.items()}
        setattr(state, key, value)
