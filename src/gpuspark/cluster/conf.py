"""Spark configuration rendered from a cluster spec.

:func:`spark_conf` gives the properties an application needs (GPU scheduling, executor shape,
dynamic allocation, Prometheus, event log). :func:`render_spark` turns a spec into the files a
cluster's ``$SPARK_CONF_DIR`` holds: ``spark-defaults.conf``, ``metrics.properties`` and the GPU
discovery script. Output is deterministic (sorted keys, no timestamps) and printable before
anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from gpuspark import storage
from gpuspark._util.spark_compat import PINNED_CONF
from gpuspark.cluster.security import security_conf
from gpuspark.errors import GpusparkError
from gpuspark.schedulers import backend_for
from gpuspark.spec import ClusterSpec

__all__ = [
    "DISCOVERY_SCRIPT",
    "METRICS_NAMESPACE",
    "RENDER_MARKER",
    "discovery_script",
    "driver_metrics_conf",
    "metrics_properties",
    "not_owned",
    "render_spark",
    "spark_conf",
    "spark_defaults",
    "write_owned",
    "write_rendered",
    "write_rendered_tree",
]

DISCOVERY_SCRIPT = "getGpusResources.sh"
"""File name of the rendered GPU discovery script."""

METRICS_NAMESPACE = "gpuspark"
"""``spark.metrics.namespace``. Spark's default is the application id, which puts the app id
in every driver metric name (``metrics_app_20261201..._driver_...``): such series cannot be
aggregated across runs. The same value is :data:`gpuspark.monitor.names.SPARK_NAMESPACE`."""

_SERVLET = "org.apache.spark.metrics.sink.PrometheusServlet"


def _amount(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def spark_conf(spec: ClusterSpec, *, discovery_script_path: str | None = None) -> dict[str, str]:
    """Spark properties an application on this cluster needs, ``[spark.conf]`` applied last.

    ``discovery_script_path`` defaults to the spec's ``spark.discovery_script``.
    """
    s = spec.spark
    conf = {
        "spark.executor.resource.gpu.amount": str(s.executor_gpus),
        "spark.executor.resource.gpu.discoveryScript": discovery_script_path or s.discovery_script,
        "spark.task.resource.gpu.amount": _amount(s.task_gpu_amount),
        "spark.executor.cores": str(s.executor_cores),
        "spark.task.cpus": str(s.task_cpus),
        "spark.executor.memory": s.executor_memory,
        "spark.dynamicAllocation.enabled": _bool(s.dynamic_allocation),
        "spark.ui.prometheus.enabled": "true",
        "spark.metrics.namespace": METRICS_NAMESPACE,
        "spark.eventLog.enabled": _bool(s.event_log),
    }
    if s.dynamic_allocation:
        # Without an external shuffle service, executors holding shuffle data must be tracked
        # before they are released (SPARK-27963).
        conf["spark.dynamicAllocation.shuffleTracking.enabled"] = "true"
        conf["spark.dynamicAllocation.minExecutors"] = "0"
        conf["spark.dynamicAllocation.maxExecutors"] = str(spec.total_gpus // s.executor_gpus)
    if s.event_log:
        conf["spark.eventLog.dir"] = spec.event_log_dir
    conf = backend_for(s.master).spec_conf(conf)
    conf.update(s.conf)
    return dict(sorted(conf.items()))


def _worker_conf(spec: ClusterSpec, script: str) -> tuple[dict[str, str], list[str]]:
    """Worker-side GPU settings for Spark standalone; notes when groups differ."""
    if not backend_for(spec.spark.master).has_workers:
        return {}, []
    conf = {"spark.worker.resource.gpu.discoveryScript": script}
    counts = {g.name: g.gpus_per_node for g in spec.nodes}
    if len(set(counts.values())) == 1:
        conf["spark.worker.resource.gpu.amount"] = str(spec.nodes[0].gpus_per_node)
        return conf, []
    per_group = ", ".join(f"{name}={n}" for name, n in counts.items())
    note = (
        "spark.worker.resource.gpu.amount differs per node group"
        f" ({per_group}): set it in each worker's spark-defaults.conf"
    )
    return conf, [note]


def _header(spec: ClusterSpec, what: str, comment: str = "#") -> str:
    return (
        f"{comment} {what} for cluster '{spec.name}', rendered by gpuspark from its spec.\n"
        f"{comment} Edit the spec and render again rather than editing this file.\n"
    )


def spark_defaults(
    spec: ClusterSpec, *, discovery_script_path: str | None = None, secret: str | None = None
) -> str:
    """Content of ``spark-defaults.conf`` (application and standalone worker settings; with
    the spec's ``[security]`` on, its properties, the shared secret shown redacted unless
    ``secret`` is given: then the file must stay private to the Spark user)."""

    script = discovery_script_path or spec.spark.discovery_script
    conf = spark_conf(spec, discovery_script_path=script)
    worker, notes = _worker_conf(spec, script)
    conf.update(worker)
    conf.update(security_conf(spec, secret))
    if not backend_for(spec.spark.master).is_embedded(spec.spark.master):
        conf["spark.master"] = spec.spark.master
    lines = [_header(spec, "Spark defaults")]
    if spec.security.enabled:
        lines.append(
            f"# Holds spark.authenticate.secret (from {spec.security.secret_file}): keep this "
            "file mode 600, owned by the user the Spark daemons run as.\n"
        )
    lines += [f"# {note}\n" for note in notes]
    lines += [f"{key} {value}\n" for key, value in sorted(conf.items())]
    return "".join(lines)


def _metrics_props() -> dict[str, str]:
    return {
        "*.sink.prometheusServlet.class": _SERVLET,
        "*.sink.prometheusServlet.path": "/metrics/prometheus",
        "master.sink.prometheusServlet.path": "/metrics/master/prometheus",
        "applications.sink.prometheusServlet.path": "/metrics/applications/prometheus",
        "*.source.jvm.class": "org.apache.spark.metrics.source.JvmSource",
    }


def driver_metrics_conf() -> dict[str, str]:
    """``metrics.properties`` as ``spark.metrics.conf.*`` application properties: the driver
    serves ``/metrics/prometheus`` on its UI port even where no ``metrics.properties`` is
    deployed (the embedded cluster, a laptop, a notebook). Settings whose defaults differ
    between Spark 3.5 and 4.x are pinned (``spark_compat.PINNED_CONF``)."""
    return {f"spark.metrics.conf.{k}": v for k, v in _metrics_props().items()} | PINNED_CONF


def metrics_properties(spec: ClusterSpec) -> str:
    """Content of ``metrics.properties``: Spark's PrometheusServlet sink on every instance."""
    props = _metrics_props()
    body = "".join(f"{key}={value}\n" for key, value in sorted(props.items()))
    return _header(spec, "Spark metrics (Prometheus)") + body


_SCRIPT_BODY = r"""
# Prints the GPUs of this node in the form Spark's resource discovery expects:
#   {"name":"gpu","addresses":["0","1",...]}
# Used by spark.worker.resource.gpu.discoveryScript / spark.executor.resource.gpu.discoveryScript.
set -u
me="getGpusResources.sh"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "$me: nvidia-smi not found on PATH: install the NVIDIA driver on this node" >&2
  exit 1
fi
if ! out=$(nvidia-smi --query-gpu=index --format=csv,noheader); then
  echo "$me: nvidia-smi --query-gpu=index failed (see its message above); check the driver" >&2
  exit 1
fi
addresses=""
for index in $(printf '%s\n' "$out" | tr -d ' \r'); do
  case "$index" in
    ''|*[!0-9]*)
      echo "$me: unexpected line from nvidia-smi: '$index' (expected a GPU index)" >&2
      exit 1
      ;;
  esac
  addresses="${addresses:+$addresses,}\"$index\""
done
if [ -z "$addresses" ]; then
  echo "$me: nvidia-smi lists no GPUs on this node" >&2
  exit 1
fi
printf '{"name":"gpu","addresses":[%s]}\n' "$addresses"
"""


def discovery_script(spec: ClusterSpec) -> str:
    """Content of the GPU discovery script (POSIX sh, ``nvidia-smi`` -> Spark's JSON)."""
    return "#!/bin/sh\n" + _header(spec, "GPU discovery script") + _SCRIPT_BODY.lstrip("\n")


def render_spark(
    spec: ClusterSpec, *, discovery_script_path: str | None = None, secret: str | None = None
) -> dict[str, str]:
    """File name -> content for ``$SPARK_CONF_DIR``: spark-defaults, metrics, discovery script.

    ``discovery_script_path`` is where the script is installed on every node (default: the
    spec's ``spark.discovery_script``); ``secret``: the shared secret written into
    ``spark-defaults.conf`` when ``[security]`` is on (default: shown redacted).
    """
    defaults = spark_defaults(spec, discovery_script_path=discovery_script_path, secret=secret)
    return {
        "spark-defaults.conf": defaults,
        "metrics.properties": metrics_properties(spec),
        DISCOVERY_SCRIPT: discovery_script(spec),
    }


def write_rendered(
    files: dict[str, str], out_dir: str | Path, private: frozenset[str] = frozenset()
) -> list[Path]:
    """Write rendered ``files`` into ``out_dir`` atomically; ``*.sh`` become executable, the
    names in ``private`` readable by their owner only (mode 600 from creation on)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        target = out / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(content)
            os.chmod(tmp, 0o600 if name in private else 0o755 if name.endswith(".sh") else 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(target)
    return written


def write_rendered_tree(
    files: Mapping[str, str],
    out_dir: str | os.PathLike[str],
    private: frozenset[str] = frozenset(),
) -> list[Path]:
    """:func:`write_rendered` of ``files`` whose names are ``/``-separated relative paths:
    each file in its folder under ``out_dir``, atomically."""
    by_folder: dict[str, dict[str, str]] = {}
    for name, content in files.items():
        rel = PurePosixPath(name)
        by_folder.setdefault(str(rel.parent), {})[rel.name] = content
    written: list[Path] = []
    for folder, group in by_folder.items():
        keep = frozenset(
            n for n in group if str(PurePosixPath(folder) / n) in private or n in private
        )
        written += write_rendered(group, Path(out_dir) / folder, private=keep)
    return written


# -- render writes only what it owns ---------------------------------------------------------

RENDER_MARKER = ".gpuspark-render.json"
"""Written by ``gpuspark render -o DIR`` beside its files: the SHA-256 of each file as it was
written. A file of the same name that it does not list, or whose content changed since (a
hand edit), is the user's: kept unless ``--overwrite``."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _recorded(out: Path) -> dict[str, str]:
    """The marker's ``{relative path: sha256}`` (``{}`` when missing or unreadable)."""
    try:
        found = json.loads((out / RENDER_MARKER).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def not_owned(files: Mapping[str, str], out_dir: str | os.PathLike[str]) -> list[str]:
    """The names of ``files`` that already exist in ``out_dir`` as something render did not
    write there: not in its marker, changed since, or not a file. A file whose content is
    already exactly the new one is not counted (nothing would be lost)."""
    out = Path(out_dir)
    recorded = _recorded(out)
    found = []
    for name, content in files.items():
        target = out / name
        if not os.path.lexists(target):
            continue
        if target.is_symlink() or not target.is_file():
            found.append(name)
            continue
        data = target.read_bytes()
        if data != content.encode("utf-8") and recorded.get(name) != _digest(data):
            found.append(name)
    return sorted(found)


def write_owned(
    files: Mapping[str, str],
    out_dir: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    private: frozenset[str] = frozenset(),
    option: str = "--out",
) -> list[Path]:
    """:func:`write_rendered_tree` for ``gpuspark render -o``: refuses, before writing
    anything, to replace a file it did not write (:func:`not_owned`) unless ``overwrite``;
    then records what it wrote in :data:`RENDER_MARKER`. A leading ``~`` is the home folder,
    as a shell would have made it (``-o '~/conf'`` made a folder named ``~``)."""
    out_dir = os.path.expanduser(os.fspath(out_dir))
    theirs = not_owned(files, out_dir)
    if theirs and not overwrite:
        many = len(theirs) > 1
        raise GpusparkError(
            f"{option} {os.fspath(out_dir)} holds {len(theirs)} file{'s' if many else ''} "
            f"that gpuspark render did not write or that {'were' if many else 'was'} changed "
            f"since: {', '.join(theirs)}",
            remedy=f"pass --overwrite to replace {'them' if many else 'it'}, or choose another "
            f"{option} folder",
        )
    written = write_rendered_tree(files, out_dir, private=private)
    recorded = _recorded(Path(out_dir))
    recorded.update({name: _digest(content.encode("utf-8")) for name, content in files.items()})
    text = json.dumps(
        {"writer": "gpuspark render", "files": dict(sorted(recorded.items()))}, indent=2
    )
    storage.atomic_write_text(Path(out_dir) / RENDER_MARKER, text + "\n")
    return written
