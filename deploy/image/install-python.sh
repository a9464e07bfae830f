#!/usr/bin/env bash
# The Python part of the image: a virtual environment /opt/gpuspark/venv over the base's
# python3 (it sees the base's packages), with gpuspark and its pinned dependencies.
#
#   install-python.sh deps WHEELS     (stage deps) the wheelhouse's requirements.txt with
#                                     WHEELS/constraints.txt (deploy/image/wheelhouse.sh)
#   install-python.sh wheel SRC OUT   (stage wheel) gpuspark's wheel from its source into OUT
#   install-python.sh gpuspark DIST   (the image)   gpuspark from the wheel in DIST, checked
#                                     against what its metadata requires; the GPU discovery
#                                     script at the spec's default path
#
# A base that brings its own torch (NVIDIA's image: the CUDA build matched to its CUDA and
# NCCL) keeps it, and pip may reach the package index for the rest. Otherwise (the Debian
# base) everything comes from the wheelhouse, offline, torch included.
set -euo pipefail

me="install-python.sh"
venv=/opt/gpuspark/venv
py=$venv/bin/python
pip=("$py" -m pip --disable-pip-version-check --quiet)

case "${1:-}" in
  deps)
    wheels=$2
    python3 -m venv --system-site-packages "$venv"
    opts=(--no-cache-dir --find-links "$wheels" -c "$wheels/constraints.txt")
    if python3 -c 'import torch' 2>/dev/null; then
      echo "$me: keeping the base image's torch $(python3 -c 'import torch; print(torch.__version__)')"
      grep -v -E '^torch([^a-z0-9_.-]|$)' "$wheels/requirements.txt" >/tmp/requirements.txt
    else
      opts+=(--no-index)
      cp "$wheels/requirements.txt" /tmp/requirements.txt
    fi
    "${pip[@]}" install "${opts[@]}" -r /tmp/requirements.txt
    rm /tmp/requirements.txt
    ;;
  wheel)
    # setuptools and wheel are in the environment (requirements.txt): no index needed.
    "${pip[@]}" wheel --no-deps --no-build-isolation --no-index --wheel-dir "$3" "$2"
    ;;
  gpuspark)
    "${pip[@]}" install --no-cache-dir --no-deps --no-index "$2"/gpuspark-*.whl
    "$py" - <<'PY'
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement

from gpuspark.cluster.conf import DISCOVERY_SCRIPT, discovery_script, write_rendered
from gpuspark.spec import default_spec
from gpuspark.spec.models import DEFAULT_DISCOVERY_SCRIPT

# gpuspark went in without its dependencies (they came from the wheelhouse before): check.
problems = []
for text in requires("gpuspark") or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        have = version(req.name)
    except PackageNotFoundError:
        problems.append(f"{req} (not installed)")
        continue
    if not req.specifier.contains(have, prereleases=True):
        problems.append(f"{req} (found {have})")
if problems:
    raise SystemExit("install-python.sh: gpuspark's requirements not met: " + "; ".join(problems))

# The spec's default discovery_script path, so a rendered spark-defaults.conf needs no option.
target = Path(DEFAULT_DISCOVERY_SCRIPT)
assert target.name == DISCOVERY_SCRIPT, target
write_rendered({DISCOVERY_SCRIPT: discovery_script(default_spec())}, target.parent)
PY
    "$venv/bin/gpuspark" --version
    ;;
  *)
    echo "$me: unknown step '${1:-}' (expected deps, wheel or gpuspark)" >&2
    exit 2
    ;;
esac
