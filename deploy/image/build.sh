#!/usr/bin/env bash
# Builds the gpuspark image from the Containerfile (`make image` runs this).
#
#   IMAGE       the tag to build           (default localhost/gpuspark:cpu)
#   BASE_IMAGE  the base (build argument)  (default localhost/gpuspark-base:bookworm, made
#               here by debian-base.sh; any other, e.g. nvcr.io/nvidia/pytorch:<tag>, is
#               pulled by podman and must bring its own Python)
#   TORCH, PYTHON  passed to wheelhouse.sh
#
# Prints the build time and the image size, and writes them to build/image/build.json.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
local_base=localhost/gpuspark-base:bookworm
image=${IMAGE:-localhost/gpuspark:cpu}
base=${BASE_IMAGE:-$local_base}
me="build.sh"

command -v podman >/dev/null || {
  echo "$me: podman not found: run 'make setup' as root (installs podman, buildah, debootstrap)" >&2
  exit 1
}
start=$(date +%s)
if [ "$base" = "$local_base" ]; then
  "$here/debian-base.sh" "$base"
  "$here/wheelhouse.sh" full
else
  "$here/wheelhouse.sh" minimal
fi
old=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
# --isolation=chroot: RUN steps need no OCI runtime (none can set rlimits in some sandboxes).
podman build --isolation=chroot --build-arg "BASE_IMAGE=$base" \
  -f "$root/Containerfile" -t "$image" "$root"
seconds=$(($(date +%s) - start))
# The image this build replaced, if nothing else uses it (its layers are build cache no more).
new=$(podman image inspect --format '{{.Id}}' "$image")
if [ -n "$old" ] && [ "$old" != "$new" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
size=$(podman image inspect --format '{{.Size}}' "$image")
printf '{"image": "%s", "base": "%s", "seconds": %d, "size_bytes": %d}\n' \
  "$image" "$base" "$seconds" "$size" >"$root/build/image/build.json"
echo "$me: built $image on $base in ${seconds} s; image size $((size / 1000000)) MB" \
  "(podman image inspect --format '{{.Size}}' $image)"
