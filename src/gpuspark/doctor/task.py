"""What one Python process reports about itself: the driver and each executor run
:func:`python_facts`, and ``gpuspark doctor`` compares the answers.

This module imports nothing from gpuspark at its top: its functions are pickled by value, so an
executor that cannot import gpuspark still answers (with ``gpuspark: None``) instead of
failing with ``ModuleNotFoundError`` before it can say which Python it runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["python_facts"]


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpuspark_version() -> str | None:
    try:
        import gpuspark
    except ImportError:
        return None
    return str(gpuspark.__version__)


def _torch_gpus() -> dict[str, Any]:
    """GPUs torch sees here, asked only where ``nvidia-smi`` exists (importing torch is slow)."""
    import shutil

    if shutil.which("nvidia-smi") is None:
        return {"nvidia_smi": False, "torch_cuda": None, "torch_gpus": None}
    try:
        import torch

        return {
            "nvidia_smi": True,
            "torch_cuda": torch.version.cuda,
            "torch_gpus": int(torch.cuda.device_count()),
        }
    except Exception as exc:  # a broken CUDA install is what we are looking for
        return {"nvidia_smi": True, "torch_cuda": None, "torch_gpus": 0, "error": str(exc)[:200]}


def python_facts(_: object = None) -> dict[str, Any]:
    """Host, Python version and executable, gpuspark/torch versions, GPUs torch sees."""
    import socket
    import sys

    facts: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "gpuspark": _gpuspark_version(),
        "torch": _version("torch"),
    }
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        gpus = ctx.resources().get("gpu") if ctx is not None else None
        facts["gpu_addresses"] = list(gpus.addresses) if gpus is not None else []
    except ImportError:
        facts["gpu_addresses"] = []
    facts.update(_torch_gpus())
    return facts
