"""Which calibration options :func:`gpuspark.plan.calibrate` accepts, checked before any rank
starts: a recipe the planner can probe, an input its network takes, ranks, threads and (local
runs) a probe this machine holds. Refusals are one :class:`~gpuspark.errors.PlanError` naming the
option, the value and what is allowed, as in :mod:`gpuspark.plan.checks`.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from gpuspark.errors import PlanError
from gpuspark.plan.checks import (
    COMPRESSIONS,
    MAX_COUNT,
    MAX_GPUS,
    PLAN_RANGES,
    Range,
    check_choice,
)
from gpuspark.plan.workloads import RECIPE_WORKLOADS

if TYPE_CHECKING:
    from gpuspark.plan.calibrate import CalibrateOptions

__all__ = ["DOWNSAMPLING", "check_calibrate"]

DOWNSAMPLING = 16
"""How much the probed networks (ResNets of MONAI's layout) shrink each side of the input
before the last stage, besides the stem's stride: max pool 2, then layers 2 to 4 stride 2
each, each halving with rounding up, so a side of ``n`` ends at
``ceil(n / (16 x stem stride))``. Training-mode batch norm there needs more than one value per
channel: ``batch x`` those sides ``> 1`` (measured: ``1x16x16x16`` at batch 1 fails in the last
batch norm, ``1x17x16x16`` runs)."""
STEM_CHANNELS = 64
"""Channels of the ResNets' first convolution at ``widen_factor`` 1: ``int(64 x width)``
must be at least 1, so ``--width`` is at least 1/64."""
MAX_WIDTH = 8.0
"""Widest ``--width`` probed: the 3-D resnet18 holds about 2 billion parameters at 8."""
MAX_THREADS = 1024
"""Most ``--threads`` per rank."""
ACTIVATION_COPIES = 3
"""The first convolution's output is kept three times for backward (convolution, batch norm
and ReLU outputs): the least memory a probe step needs, per rank (measured peaks were 5 to 34
times that first output)."""


def check_calibrate(opts: CalibrateOptions, *, local: bool) -> None:
    """Refuse calibration options without meaning before any rank starts: a recipe the
    planner cannot probe, an input shape the network cannot take, too few or too many ranks
    or threads, or (``local``) a probe this machine's cores or memory cannot hold."""
    Range("-n/--num-processes", 2, MAX_GPUS, whole=True).check(opts.ranks)
    Range("--threads", 1, MAX_THREADS, whole=True).check(opts.threads)
    for option, value in (("--batch", opts.batch), ("iters", opts.iters), ("steps", opts.steps)):
        Range(option, 1, MAX_COUNT, whole=True).check(value)
    for size in opts.sizes:
        Range("sizes", 1, MAX_COUNT, whole=True).check(size)
    PLAN_RANGES["powersgd_rank"].check(opts.powersgd_rank)
    for name in opts.compressions:
        check_choice("compressions", name, COMPRESSIONS)
    if opts.recipe is not None:
        _check_recipe(opts)
        _check_input(opts)
    if local:
        _check_machine(opts)


def _check_recipe(opts: CalibrateOptions) -> None:
    from gpuspark.train.recipes import RESNET_DEPTHS, get_recipe

    check_choice("--recipe", opts.recipe, RECIPE_WORKLOADS, "cannot be probed")
    assert opts.recipe is not None
    allowed = get_recipe(opts.recipe).shape_options
    for name in opts.options:
        if name not in allowed:
            raise PlanError(
                f"--{name.replace('_', '-')} does not apply to {opts.recipe}",
                remedy=f"{opts.recipe} takes: " + ", ".join(allowed),
            )
    depth = opts.options.get("depth")
    if depth is not None and depth not in RESNET_DEPTHS:
        raise PlanError(
            f"--depth {depth!r} is not a ResNet depth",
            remedy="use one of: " + ", ".join(map(str, RESNET_DEPTHS)),
        )
    Range("--width", 1 / STEM_CHANNELS, MAX_WIDTH).check(opts.options.get("width", 1.0))
    check_choice("stem_stride", opts.options.get("stem_stride"), (1, 2))
    check_choice("pool", opts.options.get("pool"), ("avg", "max"))


def _check_input(opts: CalibrateOptions) -> None:
    from gpuspark.train.recipes import get_recipe

    assert opts.recipe is not None
    default = get_recipe(opts.recipe).sample_shape
    shape = tuple(opts.input_shape or default)
    text = ",".join(map(str, shape))
    form = ("C,H,W" if len(default) == 3 else "C,D,H,W") + f" like {','.join(map(str, default))}"
    if len(shape) != len(default):
        raise PlanError(
            f"--input {text}: {opts.recipe} takes {len(default)} sizes, got {len(shape)}",
            remedy=f"give {form}",
        )
    if not all(_whole_positive(n) for n in shape):
        raise PlanError(f"--input {text}: every size must be a whole number >= 1")
    if shape[0] != default[0]:
        raise PlanError(
            f"--input {text}: {opts.recipe} takes {default[0]} channel(s), got {shape[0]}",
            remedy=f"give {form}",
        )
    _check_downsampling(opts, shape, text)


def _whole_positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _stem_stride(opts: CalibrateOptions) -> int:
    return int(opts.options.get("stem_stride", 1))


def _check_downsampling(opts: CalibrateOptions, shape: tuple[int, ...], text: str) -> None:
    factor = DOWNSAMPLING * _stem_stride(opts)
    last = [math.ceil(n / factor) for n in shape[1:]]
    if opts.batch * math.prod(last) < 2:
        raise PlanError(
            f"--input {text} with --batch {opts.batch}: {opts.recipe} shrinks each side "
            f"{factor}x, to {'x'.join(map(str, last))}, and training-mode batch norm needs more "
            "than one value per channel",
            remedy=f"use --batch 2 or more, or a side of at least {factor + 1}",
        )


def _check_machine(opts: CalibrateOptions) -> None:
    """Local ranks share this machine: no more ranks or threads than cores, and the least
    memory the compute probes need within its memory."""
    cores = os.cpu_count() or 1
    Range("-n/--num-processes", 2, max(2, cores), whole=True).check(
        opts.ranks,
        remedy=f"this machine has {cores} cores; run on the Spark cluster (without --local) "
        "for more ranks",
    )
    Range("--threads", 1, cores, whole=True).check(
        opts.threads, remedy=f"this machine has {cores} cores"
    )
    if opts.recipe is None:
        return
    need = opts.ranks * _probe_bytes(opts)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > total:
        raise PlanError(
            f"--input, --batch, --width and -n need at least {need / 2**30:,.1f} GiB for the "
            f"compute probes; this machine has {total / 2**30:,.1f} GiB",
            remedy="probe a smaller --input, --batch or --width, or fewer ranks",
        )


def _probe_bytes(opts: CalibrateOptions) -> int:
    """The least memory one rank's compute probe needs: its first convolution's float32
    output, :data:`ACTIVATION_COPIES` times."""
    from gpuspark.train.recipes import get_recipe

    assert opts.recipe is not None
    shape = tuple(opts.input_shape or get_recipe(opts.recipe).sample_shape)
    channels = int(STEM_CHANNELS * float(opts.options.get("width", 1.0)))
    stride = _stem_stride(opts)
    sides = math.prod(math.ceil(n / stride) for n in shape[1:])
    return ACTIVATION_COPIES * 4 * opts.batch * channels * sides
