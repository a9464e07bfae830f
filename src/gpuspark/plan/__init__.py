"""Performance planning: predict step time, communication share, scaling and time to train
for a cluster spec, calibrated on the real cluster.

==================  ===========================================================================
``gpus``            GPU table: dense peak FLOP/s per dtype, sourced
``workloads``       model catalogue (ResNet-50, BERT-large) and the recipes' networks
``formulas``        ring / hierarchical all-reduce, DDP buckets and overlap, compression bytes
``checks``          the values and combinations the planner accepts
``probe_checks``    the calibration's options
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
from gpuspark.plan.checks import (
    PLAN_RANGES,
    check_cluster,
    check_request,
    check_sweep,
    check_values,
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
from gpuspark.plan.probe_checks import check_calibrate
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
    "PLAN_RANGES",
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
    "check_calibrate",
    "check_cluster",
    "check_request",
    "check_sweep",
    "check_values",
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
