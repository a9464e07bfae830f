"""The CPU image builds (deploy/image/build.sh, what `make image` runs) and holds what it
promises: the entrypoint, tini, Java 17, Spark's jars under SPARK_HOME, gpuspark with pyspark
and the CPU torch, the GPU discovery script at the spec's default path, the user spark (185).

`podman run` cannot work in this sandbox (crun cannot set rlimits), so the image is checked by
`podman image mount` and its programs run under chroot of the mounted root (with /proc, in a
private mount namespace), as uid 185, with the image's own environment. Needs root, podman and
debootstrap (`make setup` installs them as root); a first build takes several minutes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

import gpuspark
from gpuspark.cluster.conf import discovery_script
from gpuspark.spec import default_spec
from gpuspark.spec.models import DEFAULT_DISCOVERY_SCRIPT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(os.getuid() != 0, reason="builds and mounts images as root"),
    pytest.mark.skipif(
        not (shutil.which("podman") and shutil.which("debootstrap") and shutil.which("unshare")),
        reason="needs podman and debootstrap: run `make setup` as root",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"
IMAGE = "localhost/gpuspark:cpu"


class Image:
    """A built image, mounted read-only: its files and its programs under chroot."""

    def __init__(self, name: str, root: Path, config: dict[str, object]) -> None:
        self.name = name
        self.root = root
        self.config = config

    def path(self, inside: str) -> Path:
        """A path of the image, symbolic links resolved inside the image's root."""
        current = self.root
        for part in Path(inside).relative_to("/").parts:
            current = current / part
            for _ in range(40):
                if not current.is_symlink():
                    break
                target = os.readlink(current)
                base = self.root if target.startswith("/") else current.parent
                current = base / target.lstrip("/")
        return current

    def run(self, *argv: str, user: str = "185:185") -> subprocess.CompletedProcess[str]:
        """``argv`` under chroot of the image as ``user``, with the image's environment."""
        env = [str(e) for e in self.config.get("Env") or []]
        script = 'mount -t proc proc "$1/proc" && shift && exec chroot "$@"'
        return subprocess.run(
            [
                *("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"),
                str(self.root),
                f"--userspec={user}",
                str(self.root),
                *("/usr/bin/env", "-i", "HOME=/home/spark", *env),
                *("sh", "-c", 'cd "$0" && exec "$@"', str(self.config.get("WorkingDir") or "/")),
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    log = ROOT / "build" / "image" / "test-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "IMAGE": IMAGE, "PYTHON": str(ROOT / ".venv" / "bin" / "python")}
    with log.open("w") as out:
        built = subprocess.run(
            [str(ROOT / "deploy" / "image" / "build.sh")],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=3000,
            check=False,
        )
    tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
    assert built.returncode == 0, f"build failed (full log: {log}):\n{tail}"
    print(tail.splitlines()[-1])  # build.sh: built ... in N s; image size M MB
    config = json.loads(
        subprocess.run(
            ["podman", "image", "inspect", "--format", "{{json .Config}}", IMAGE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    mount = subprocess.run(
        ["podman", "image", "mount", IMAGE], capture_output=True, text=True, check=True
    )
    try:
        yield Image(IMAGE, Path(mount.stdout.strip()), config)
    finally:
        subprocess.run(["podman", "image", "unmount", IMAGE], capture_output=True, check=False)


def test_build_time_and_size_are_recorded(image: Image) -> None:
    record = json.loads((ROOT / "build" / "image" / "build.json").read_text())
    assert record["image"] == IMAGE
    assert record["seconds"] > 0
    assert 500e6 < record["size_bytes"] < 6e9, record


def test_files(image: Image) -> None:
    entrypoint = image.path("/opt/entrypoint.sh")
    assert entrypoint.read_text() == (ROOT / "deploy" / "image" / "entrypoint.sh").read_text()
    assert os.access(entrypoint, os.X_OK)
    assert os.access(image.path("/usr/bin/tini"), os.X_OK)
    script = image.path(DEFAULT_DISCOVERY_SCRIPT)
    assert script.read_text() == discovery_script(default_spec())
    assert script.stat().st_mode & 0o777 == 0o755
    jars = image.path("/opt/spark/jars")
    assert len(list(jars.glob("spark-core_*.jar"))) == 1
    (k8s_jar,) = jars.glob("spark-kubernetes_*.jar")
    names = zipfile.ZipFile(k8s_jar).namelist()
    backend = "org/apache/spark/scheduler/cluster/k8s/KubernetesExecutorBackend.class"
    assert backend in names  # what the entrypoint's executor branch starts
    assert os.access(image.path("/opt/spark/bin/spark-submit"), os.X_OK)
    assert image.path("/opt/spark/work-dir").stat().st_uid == 185


def test_user_and_config(image: Image) -> None:
    passwd = image.path("/etc/passwd").read_text().splitlines()
    assert any(line.startswith("spark:x:185:185:") for line in passwd)
    assert image.config["User"] == "185"
    assert image.config["Entrypoint"] == ["/opt/entrypoint.sh"]
    env = dict(str(e).split("=", 1) for e in image.config["Env"])  # type: ignore[attr-defined]
    assert env["PYSPARK_PYTHON"] == "/opt/gpuspark/venv/bin/python"
    assert env["SPARK_HOME"] == "/opt/spark"


def test_gpuspark_version(image: Image) -> None:
    result = image.run("gpuspark", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gpuspark {gpuspark.__version__}"


def test_java_17(image: Image) -> None:
    result = image.run("java", "-version")
    assert result.returncode == 0, result.stderr
    assert re.search(r'version "17\.', result.stderr), result.stderr


def test_python_imports_the_pinned_stack(image: Image) -> None:
    code = (
        "import sys, gpuspark, pyspark, torch; "
        "print(sys.executable, sys.version_info[:2], pyspark.__version__, torch.__version__)"
    )
    result = image.run("python", "-c", code)
    assert result.returncode == 0, result.stderr
    torch_pin = re.search(r"^TORCH_CPU := torch==(\S+)$", MAKEFILE.read_text(), re.M)
    assert torch_pin, "TORCH_CPU in the Makefile"
    assert result.stdout.split() == [
        "/opt/gpuspark/venv/bin/python",
        "(3,",
        "11)",
        version("pyspark"),  # the pin of constraints.txt, as in .venv
        f"{torch_pin[1]}+cpu",
    ]


def test_spark_submit_runs(image: Image) -> None:
    # No name service in a chroot: Spark is told its host, as a pod's IP would tell it.
    result = image.run(
        "env", "SPARK_LOCAL_HOSTNAME=localhost", "SPARK_LOCAL_IP=127.0.0.1",
        "spark-submit", "--version",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"version {version('pyspark')}" in result.stderr


def test_entrypoint_passes_a_command_through_tini(image: Image) -> None:
    result = image.run("/opt/entrypoint.sh", "gpuspark", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gpuspark {gpuspark.__version__}"


def test_entrypoint_for_a_uid_without_passwd_entry(image: Image) -> None:
    """OpenShift-style arbitrary uid in group root: the entrypoint adds a passwd entry where
    /etc/passwd is writable (group root may write it) and says so where it is not (this
    mount is read-only); the command runs either way."""
    passwd = image.path("/etc/passwd").stat()
    assert passwd.st_gid == 0 and passwd.st_mode & 0o020  # group root may write it
    result = image.run("/opt/entrypoint.sh", "id", "-u", user="12345:0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "12345"
    assert "uid 12345 has no passwd entry and /etc/passwd is read-only" in result.stderr
