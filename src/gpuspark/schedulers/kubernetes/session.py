"""What a session on ``k8s://`` takes from the spec (client mode: the driver is this process,
its executors are pods).

The spec's ``[kubernetes]`` table gives the same settings ``render k8s`` writes into
``spark-defaults.conf`` (:func:`~.render.spark_defaults`): the image, the shared namespace (a
team's job goes to the team's namespace, :meth:`KubernetesBackend.team_conf`), the driver's
service account, the pod templates, the GPU vendor and the discovery script inside the image.
The driver reads the pod templates as it starts, so they are written on this machine, under
``$GPUSPARK_QUOTA_DIR`` (as Volcano's PodGroup templates are), each only when its content
changed, and named by their path here. Client mode adds fixed driver and block manager ports
(:data:`CLIENT_PORTS`) so that a driver inside the cluster can be reached through a headless
Service. ``[spark.conf]`` overrides all of it.

Refused before Spark starts (:func:`check_image`, :func:`check_templates`): a session without
an image, and a conf naming a pod template that is not there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuspark import storage
from gpuspark._util import envvars
from gpuspark.errors import ClusterError
from gpuspark.schedulers.kubernetes.render import pod_template_files, spark_defaults

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "CLIENT_PORTS",
    "IMAGE",
    "TEMPLATE_KEYS",
    "check_image",
    "check_templates",
    "session_conf",
    "state_root",
    "templates_dir",
    "write_if_changed",
]

IMAGE = "spark.kubernetes.container.image"
IMAGE_PYTHON = "/opt/gpuspark/venv/bin/python"
"""The Python of the gpuspark image (``Containerfile``: ``PYSPARK_PYTHON``), which executor
pods run: the driver's own interpreter path does not exist in the image."""
CLIENT_PORTS = {"spark.driver.port": "7078", "spark.blockManager.port": "7079"}
"""Where the executors reach the driver (client mode): fixed, as Spark's own driver pods use
them in cluster mode, so that a Service can name them (docs/kubernetes.md)."""
TEMPLATE_KEYS = (
    "spark.kubernetes.driver.podTemplateFile",
    "spark.kubernetes.executor.podTemplateFile",
    "spark.kubernetes.scheduler.volcano.podGroupTemplateFile",
)
"""Files the driver reads as it starts."""
_RENDER = "gpuspark render k8s SPEC -o DIR"


def state_root() -> Path:
    """Where sessions write the files their driver reads: ``$GPUSPARK_QUOTA_DIR``, else
    ``~/.gpuspark/quota``."""
    return Path(envvars.QUOTA_DIR.get() or str(Path.home() / ".gpuspark" / "quota"))


def templates_dir(spec: ClusterSpec) -> Path:
    """The folder of the spec's pod templates for sessions on this machine."""
    return state_root() / "kubernetes" / spec.name


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, unless it already holds exactly that (a running
    driver may be reading it)."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    storage.atomic_write_text(path, text)


def _image_given(spec: ClusterSpec) -> bool:
    """Whether the spec names an image: a ``[kubernetes]`` table (its ``image`` or the
    default of a table written for Kubernetes) or ``[spark.conf]``."""
    return "kubernetes" in spec.model_fields_set or IMAGE in spec.spark.conf


def session_conf(spec: ClusterSpec, conf: dict[str, str]) -> dict[str, str]:
    """``conf`` (the spec's application settings) with what a session on ``k8s://`` needs
    from the spec (see the module's description); no image when the spec names none
    (:func:`check_image` refuses the session then, unless the caller's conf gives one)."""
    folder = templates_dir(spec)
    for name, text in pod_template_files(spec).items():
        write_if_changed(folder / name, text)
    k8s = spark_defaults(spec, CLIENT_PORTS, conf_dir=str(folder))
    k8s.pop("spark.master", None)  # the session's master decides
    if not _image_given(spec):
        k8s.pop(IMAGE, None)
    return {**conf, **k8s}


def check_image(conf: dict[str, str]) -> None:
    """Refuse a session whose executors would have no image."""
    if not conf.get(IMAGE):
        raise ClusterError(
            f"master=k8s://… needs the executors' image ({IMAGE}): the spec has no"
            " [kubernetes] table and its [spark.conf] names none",
            remedy="build and push the image (make image; docs/image.md), then set"
            " [kubernetes] image = 'REGISTRY/gpuspark:TAG' in the spec",
        )


def check_templates(conf: dict[str, str]) -> None:
    """Refuse a conf naming a local template file that does not exist (Spark would fail as
    it starts, deep in its log); remote URLs are Spark's to fetch."""
    for key in TEMPLATE_KEYS:
        path = conf.get(key)
        if not path or storage.is_url(path):
            continue
        if not Path(storage.local_path(path)).is_file():
            raise ClusterError(
                f"{key}={path}: no such file here (the driver reads it as it starts)",
                remedy=f"write the templates with `{_RENDER}` and name DIR/spark/… by its"
                " absolute path, or drop the key from [spark.conf] (gpuspark writes its own)",
            )
