"""Performance planning: predict step time, communication share, scaling and time to train
for a cluster spec, calibrated on the real cluster.

==================  ===========================================================================
``gpus``            GPU table: dense peak FLOP/s per dtype, sourced
``workloads``       model catalogue (ResNet-50, BERT-large) and the recipes' networks
``formulas``        ring / hierarchical all-reduce, DDP buckets and overlap, compression bytes
``model``           :func:`predict` / :func:`sweep` -> :class:`Plan`
``calibration``     calibration results as data (JSON)
``calibrate``       the probes, run through :func:`gpuspark.launch.run`
``render``          text table and the scaling plot
==================  ===========================================================================
"""

from __future__ import annotations

from gpuspark.errors import PlanError
from gpuspark.plan.calibrate import DEFAULT_SIZES, CalibrateOptions, calibrate, decode_probe
from gpuspark.plan.calibration import (
    AllreduceRow,
    AllreduceSweep,
    Calibration,
    ComputeProbe,
    load_calibration,
    save_calibration,
)
from gpuspark.plan.gpus import DTYPES, GPUS, GpuModel, find_gpu
from gpuspark.plan.model import (
    COMPRESSIONS,
    DEFAULTS,
    Plan,
    PlanRequest,
    bus_bandwidths,
    parse_compression,
    predict,
    sweep,
)
from gpuspark.plan.workloads import (
    Reference,
    Workload,
    custom_workload,
    find_workload,
    recipe_workload,
    workload_names,
)

__all__ = [
    "COMPRESSIONS",
    "DEFAULTS",
    "DEFAULT_SIZES",
    "DTYPES",
    "GPUS",
    "AllreduceRow",
    "AllreduceSweep",
    "CalibrateOptions",
    "Calibration",
    "ComputeProbe",
    "GpuModel",
    "Plan",
    "PlanError",
    "PlanRequest",
    "Reference",
    "Workload",
    "bus_bandwidths",
    "calibrate",
    "custom_workload",
    "decode_probe",
    "find_gpu",
    "find_workload",
    "load_calibration",
    "parse_compression",
    "predict",
    "recipe_workload",
    "save_calibration",
    "sweep",
    "workload_names",
]
