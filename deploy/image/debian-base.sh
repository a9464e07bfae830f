#!/usr/bin/env bash
# Makes the CPU base image locally: Debian bookworm (minbase + packages.txt) by debootstrap,
# imported with podman. No image registry is needed, only a Debian mirror.
#
#   deploy/image/debian-base.sh [TAG]      (default localhost/gpuspark-base:bookworm)
#
# Skips the work when TAG exists and was made from the same suite and package list (label
# gpuspark.base.hash); the image it replaces is removed when nothing else uses it. Downloaded .debs are kept in build/image/debs for the next run; the
# root file system is made in build/image/rootfs and removed after the import.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tag=${1:-localhost/gpuspark-base:bookworm}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$root/build/image
rootfs=$work/rootfs
me="debian-base.sh"

for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || {
    echo "$me: $tool not found: run 'make setup' as root (installs podman, buildah, debootstrap)" >&2
    exit 1
  }
done
[ "$(id -u)" = 0 ] || { echo "$me: debootstrap needs root (run as root)" >&2; exit 1; }

packages=$(grep -v '^#' "$here/packages.txt" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
hash=$(printf '%s minbase %s\n' "$suite" "$packages" | sha256sum | cut -c1-16)
have=$(podman image inspect --format '{{index .Labels "gpuspark.base.hash"}}' "$tag" 2>/dev/null || true)
if [ "$have" = "$hash" ]; then
  echo "$me: $tag is up to date ($hash)"
  exit 0
fi

# Never delete through a mount point (debootstrap mounts /proc inside the root while it works).
check_unmounted() {
  if grep -q " $rootfs/" /proc/mounts; then
    echo "$me: file systems are mounted under $rootfs (a stopped debootstrap?): unmount them" >&2
    exit 1
  fi
}

echo "$me: debootstrap $suite (minbase + $packages) from $mirror"
mkdir -p "$work/debs"
check_unmounted
rm -rf "$rootfs"
debootstrap --variant=minbase --include="$packages" --cache-dir="$work/debs" \
  "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  echo "$me: debootstrap failed; the last lines of $work/debootstrap.log:" >&2
  tail -n 20 "$work/debootstrap.log" >&2
  exit 1
}
check_unmounted
# An image carries no package lists or caches; os-setup.sh runs 'apt-get update' if it must.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
old=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
echo "$me: importing as $tag"
tar -C "$rootfs" --numeric-owner -cf - . | podman import --quiet \
  --change "LABEL gpuspark.base.hash=$hash" \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV LANG=C.UTF-8" \
  --change 'CMD ["/bin/bash"]' \
  - "$tag" >/dev/null
rm -rf "$rootfs"
if [ -n "$old" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
echo "$me: made $tag ($hash)"
