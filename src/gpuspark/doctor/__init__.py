"""``gpuspark doctor``: live checks of a node and a cluster before jobs fail, and the diagnosis
of a failed job's logs from a catalogue of known messages (each with its cause and fix)."""

from __future__ import annotations

from gpuspark.doctor.catalogue import catalogue_markdown, load_catalogue
from gpuspark.doctor.live import run_checks
from gpuspark.doctor.logs import Diagnosis, Finding, diagnose, diagnose_text
from gpuspark.doctor.parsers import (
    parse_ibstat,
    parse_nvidia_smi,
    parse_nvidia_smi_q,
    parse_query_csv,
)
from gpuspark.doctor.report import Check, Report, Status

__all__ = [
    "Check",
    "Diagnosis",
    "Finding",
    "Report",
    "Status",
    "catalogue_markdown",
    "diagnose",
    "diagnose_text",
    "load_catalogue",
    "parse_ibstat",
    "parse_nvidia_smi",
    "parse_nvidia_smi_q",
    "parse_query_csv",
    "run_checks",
]
