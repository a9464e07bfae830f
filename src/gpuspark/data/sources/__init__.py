"""Raw inputs to training rows: DICOM series to volumes, image folders, listing large trees.

Plain Python over one input at a time, so that a Spark task and a single-process loop call
the same code. Bad inputs raise :class:`QuarantineError` with a short reason; the caller
writes a quarantine row, nothing is dropped silently.

The public face of the source side; the modules behind it, one job each:

- :mod:`~gpuspark.data.sources.base`: the :class:`Source` protocol a new input type
  implements (list inputs, read a header, group into samples, read a sample);
- :mod:`~gpuspark.data.sources.records`: what every reader shares - quarantine errors,
  patient-id hashing, stable splits, label tables, reading an input by URI;
- :mod:`~gpuspark.data.sources.dicom_header`: DICOM headers, slice geometry and ordering;
- :mod:`~gpuspark.data.sources.dicom`: series to volumes - HU, resampling, windows,
  :func:`prep_series`, :class:`DicomSource`;
- :mod:`~gpuspark.data.sources.images`: image folders, :func:`prep_image`, :class:`ImageSource`;
- :mod:`~gpuspark.data.sources.listing`: listing a source tree inside the Spark tasks.

Import from ``gpuspark.data.sources``; the module layout behind it may change.
"""

from __future__ import annotations

from gpuspark.data.sources.base import Source
from gpuspark.data.sources.dicom import (
    WINDOW_PRESETS,
    DicomOptions,
    DicomSource,
    Window,
    apply_window,
    load_volume,
    parse_window,
    prep_series,
    resample,
)
from gpuspark.data.sources.dicom_header import (
    FileHeader,
    OrderedSeries,
    header_from_dataset,
    order_frames,
    read_dataset,
    read_header,
)
from gpuspark.data.sources.images import (
    IMAGE_EXTENSIONS,
    MODES,
    ImageOptions,
    ImageSource,
    class_of,
    prep_image,
)
from gpuspark.data.sources.listing import Unit, deal, plan_units, walk_unit
from gpuspark.data.sources.records import (
    SPLIT_NAMES,
    LabelsError,
    LabelTable,
    QuarantineError,
    assign_split,
    hash_patient,
    local_path,
    parse_split,
    read_bytes,
    read_labels,
)

__all__ = [
    "IMAGE_EXTENSIONS",
    "MODES",
    "SPLIT_NAMES",
    "WINDOW_PRESETS",
    "DicomOptions",
    "DicomSource",
    "FileHeader",
    "ImageOptions",
    "ImageSource",
    "LabelTable",
    "LabelsError",
    "OrderedSeries",
    "QuarantineError",
    "Source",
    "Unit",
    "Window",
    "apply_window",
    "assign_split",
    "class_of",
    "deal",
    "hash_patient",
    "header_from_dataset",
    "load_volume",
    "local_path",
    "order_frames",
    "parse_split",
    "parse_window",
    "plan_units",
    "prep_image",
    "prep_series",
    "read_bytes",
    "read_dataset",
    "read_header",
    "read_labels",
    "resample",
    "walk_unit",
]
