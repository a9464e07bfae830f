"""The flagship demo and the synthetic data it runs on.

==================  ===========================================================================
``config``          :class:`DemoConfig`: the demo's sizes
``pipeline``        :func:`run_demo`: cluster -> synthetic DICOM -> shards -> DDP -> report
``report``          ``report.json`` figures and the ``report.png`` plot (:func:`plot_history`)
``synth_ct``        :func:`synth_ct`: a CT cohort as real DICOM series, with its ground truth
``synth_images``    :func:`synth_images`: an image-folder data set
``synth_risk``      :func:`synth_risk`: a credit-risk table (Parquet, written by Spark)
``pydoc_text``      :func:`pydoc_text`: a real English corpus offline (CPython's help topics)
``staging``         generated directories appear complete or not at all
==================  ===========================================================================

Import from ``gpuspark.demo``; the module layout behind it may change. Importing it is cheap:
Spark, torch, pydicom and matplotlib are imported by the functions that use them.
"""

from __future__ import annotations

from gpuspark.demo.config import DemoConfig
from gpuspark.demo.pipeline import run_demo
from gpuspark.demo.pydoc_text import PydocTextResult, pydoc_text
from gpuspark.demo.report import build_report, plot_history, write_report
from gpuspark.demo.synth_ct import (
    CohortSummary,
    SeriesParams,
    cohort_params,
    load_cohort,
    render_phantom,
    synth_ct,
)
from gpuspark.demo.synth_images import ImageSetSummary, synth_images
from gpuspark.demo.synth_risk import RISK_CATEGORIES, SynthRiskResult, synth_risk
from gpuspark.errors import DatasetExistsError

__all__ = [
    "RISK_CATEGORIES",
    "CohortSummary",
    "DatasetExistsError",
    "DemoConfig",
    "ImageSetSummary",
    "PydocTextResult",
    "SeriesParams",
    "SynthRiskResult",
    "build_report",
    "cohort_params",
    "load_cohort",
    "plot_history",
    "pydoc_text",
    "render_phantom",
    "run_demo",
    "synth_ct",
    "synth_images",
    "synth_risk",
    "write_report",
]
