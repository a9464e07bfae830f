#!/usr/bin/env bash
# Fills the build context's wheelhouse (build/image/wheels) that the Containerfile installs
# from, so that the image build needs no package index.
#
#   deploy/image/wheelhouse.sh full     requirements.txt: $TORCH (default torch==2.13.0, the
#                                       CPU wheel where pip's configuration offers one), every
#                                       runtime dependency of gpuspark (pyproject.toml) and the
#                                       build backend; constraints.txt pins them; and their
#                                       wheels for $WHEEL_PYTHON (default 3.11, Debian
#                                       bookworm's python3), made with $PYTHON (default
#                                       .venv/bin/python), which must be that version
#   deploy/image/wheelhouse.sh minimal  the same files without torch and without wheels: for
#                                       a base that brings its own torch and Python (NVIDIA's
#                                       image); the build then reaches the package index
#
# The wheels are fetched again only when an input changes (stamp file). gpuspark itself is
# not in the wheelhouse: the Containerfile builds it from the checkout's source.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
mode=${1:-full}
out=$root/build/image/wheels
py=${PYTHON:-$root/.venv/bin/python}
torch=${TORCH:-torch==2.13.0}
wheel_python=${WHEEL_PYTHON:-3.11}
me="wheelhouse.sh"
case "$mode" in full | minimal) ;; *)
  echo "$me: unknown mode '$mode' (expected full or minimal)" >&2
  exit 2
  ;;
esac
[ -x "$py" ] || py=$(command -v python3)

# The runtime requirements as pyproject.toml declares them, one a line (tomllib: Python 3.11):
# the core and the extras the executors' tasks import (DICOM, images, text, plots, the
# Kubernetes client), since gpuspark itself goes in without its dependencies.
deps=$("$py" - "$root/pyproject.toml" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as fh:
    project = tomllib.load(fh)["project"]
extras = project["optional-dependencies"]
reqs = list(project["dependencies"])
for name in ("dicom", "images", "text", "plot", "kubernetes"):
    reqs += extras[name]
print("\n".join(reqs))
PY
)
build_reqs='setuptools>=68
wheel'
if [ "$mode" = full ]; then
  reqs=$(printf '%s\n%s\n%s\n' "$torch" "$deps" "$build_reqs")
else
  reqs=$(printf '%s\n%s\n' "$deps" "$build_reqs")
fi
stamp=$(printf '%s\n%s\n%s %s\n' "$reqs" "$(cat "$root/constraints.txt")" "$wheel_python" "$(uname -m)" |
  sha256sum | cut -c1-16)
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
  echo "$me: $out is up to date ($mode, $stamp)"
  exit 0
fi

rm -rf "$out"
mkdir -p "$out"
printf '%s\n' "$reqs" >"$out/requirements.txt"
cp "$root/constraints.txt" "$out/constraints.txt"
if [ "$mode" = minimal ]; then
  echo "$stamp" >"$out/.stamp"
  echo "$me: requirements and constraints in $out (no wheels: the build uses the index)"
  exit 0
fi
have_python=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$have_python" != "$wheel_python" ]; then
  echo "$me: $py is Python $have_python, the image's is $wheel_python: set PYTHON to a" \
    "python$wheel_python (the wheels must match the image's interpreter)" >&2
  rm -rf "$out"
  exit 1
fi
echo "$me: fetching wheels for Python $wheel_python into $out"
# pyspark is published as a source archive only, so pip cannot fetch for another interpreter
# (--python-version needs --only-binary=:all:): the wheels are built by an interpreter of the
# image's Python version.
# (The filter drops pip's warnings about file:// indexes in a machine's pip configuration that
# lack a project: noise, one a package.)
"$py" -m pip wheel --quiet --wheel-dir "$out" -c "$out/constraints.txt" -r "$out/requirements.txt" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
if ! ls "$out"/torch-*+cpu-*.whl >/dev/null 2>&1; then
  echo "$me: note: the torch wheel is not a +cpu build ($(cd "$out" && ls torch-*.whl)); give pip" \
    "the CPU wheels (e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu) for a" \
    "smaller image" >&2
fi
echo "$stamp" >"$out/.stamp"
echo "$me: $(find "$out" -name '*.whl' | wc -l) wheels, $(du -sh "$out" | cut -f1)"
