"""The Containerfile serves both variants: the CPU and the GPU image differ only by the
``BASE_IMAGE`` build argument. These read the files; the build itself is tests/deploy/test_image.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gpuspark.spec.models import DEFAULT_DISCOVERY_SCRIPT

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
IMAGE_DIR = ROOT / "deploy" / "image"
LOCAL_BASE = "localhost/gpuspark-base:bookworm"


def _instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction; comments dropped, continuations joined."""
    joined = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            found.append((keyword.upper(), " ".join(args.split())))
    return found


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, args in _instructions():
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, args))
    return stages


def test_the_base_image_is_the_only_build_argument() -> None:
    instructions = _instructions()
    args = [a for k, a in instructions if k == "ARG"]
    assert args == [f"BASE_IMAGE={LOCAL_BASE}"]
    assert instructions[0] == ("ARG", f"BASE_IMAGE={LOCAL_BASE}")  # before any FROM


def test_no_other_line_depends_on_the_variant() -> None:
    """Only the first FROM reads BASE_IMAGE; the others name stages, so substituting another
    base changes that one line and nothing else."""
    instructions = _instructions()
    using = [(k, a) for k, a in instructions if "BASE_IMAGE" in a and k != "ARG"]
    assert using == [("FROM", "${BASE_IMAGE} AS runtime")]
    froms = [a for k, a in instructions if k == "FROM"]
    assert froms == ["${BASE_IMAGE} AS runtime", "runtime AS deps", "deps AS wheel", "runtime"]
    text = CONTAINERFILE.read_text()
    for variant_word in ("nvidia", "cuda", "nvcr", "bookworm", "debian"):
        for line in text.splitlines():
            if variant_word in line.lower():
                assert line.startswith("#") or line.startswith("ARG BASE_IMAGE="), line


def test_defaults_agree() -> None:
    """The Containerfile's default base is the one `make image` and build.sh make locally."""
    makefile = (ROOT / "Makefile").read_text()
    assert f"BASE_IMAGE ?= {LOCAL_BASE}\n" in makefile
    assert f"local_base={LOCAL_BASE}\n" in (IMAGE_DIR / "build.sh").read_text()
    assert "debian-base.sh" in (IMAGE_DIR / "build.sh").read_text()


def test_the_image_stage_runs_as_spark_through_the_entrypoint() -> None:
    final = _stages()[-1]
    assert ("USER", "185") in final
    assert ("ENTRYPOINT", '["/opt/entrypoint.sh"]') in final
    assert ("COPY", "deploy/image/entrypoint.sh /opt/entrypoint.sh") in final
    env = " ".join(a for k, a in final if k == "ENV")
    assert "PYSPARK_PYTHON=/opt/gpuspark/venv/bin/python" in env
    assert "SPARK_HOME=/opt/spark" in env


def test_copied_paths_are_in_the_build_context() -> None:
    """Each COPY source exists (or is made by build.sh) and .containerignore lets it in."""
    allowed = [
        line[1:].rstrip("/")
        for line in (ROOT / ".containerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    for keyword, args in _instructions():
        if keyword != "COPY" or args.startswith("--from="):
            continue
        for source in args.split()[:-1]:
            assert any(source == a or source.startswith(a + "/") for a in allowed), source
            if not source.startswith("build/"):
                assert (ROOT / source).exists(), source


def test_the_discovery_script_path_is_the_specs_default() -> None:
    """The image installs getGpusResources.sh where a spec points by default."""
    assert DEFAULT_DISCOVERY_SCRIPT == "/opt/gpuspark/getGpusResources.sh"
    assert "DEFAULT_DISCOVERY_SCRIPT" in (IMAGE_DIR / "install-python.sh").read_text()


@pytest.mark.parametrize("script", sorted(p.name for p in IMAGE_DIR.glob("*.sh")))
def test_scripts_parse(script: str) -> None:
    path = IMAGE_DIR / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)
