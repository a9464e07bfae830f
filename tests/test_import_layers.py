"""The layers of ``docs/architecture.md`` hold: ``lint-imports`` (import-linter, the contract in
``pyproject.toml``) passes on the source, and fails on a copy where the cluster package imports
the monitor package, naming that import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    cmd = [str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_layers_hold() -> None:
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "1 kept, 0 broken" in out.stdout


def test_a_wrong_import_breaks_them(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    fit = tmp_path / "src" / "gpuspark" / "cluster" / "fit.py"
    fit.write_text(fit.read_text() + "\nfrom gpuspark.monitor import names  # wrong\n")
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert "gpuspark.cluster is not allowed to import gpuspark.monitor" in out.stdout
    assert "gpuspark.cluster.fit -> gpuspark.monitor.names" in out.stdout
