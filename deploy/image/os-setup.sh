#!/usr/bin/env bash
# The operating-system part of the image, run in the Containerfile's first stage on either
# base: installs what packages.txt lists and the base lacks (none on the Debian base made by
# debian-base.sh, so the CPU build needs no network), points /opt/java at Java 17, and adds
# Spark's image user: spark, uid and gid 185.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
me="os-setup.sh"
missing=()
for pkg in $(grep -v '^#' "$here/packages.txt"); do
  dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$' ||
    missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "$me: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rm -rf /var/lib/apt/lists/*
fi

jvm=/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)
[ -x "$jvm/bin/java" ] || { echo "$me: no Java 17 at $jvm" >&2; exit 1; }
ln -sfn --relative "$jvm" /opt/java

if ! getent group 185 >/dev/null; then groupadd --system --gid 185 spark; fi
if ! getent passwd 185 >/dev/null; then
  useradd --system --uid 185 --gid 185 --home-dir /home/spark --create-home \
    --shell /bin/bash spark
fi
[ "$(getent passwd 185 | cut -d: -f1)" = spark ] || {
  echo "$me: uid 185 is taken by '$(getent passwd 185 | cut -d: -f1)' in the base image" >&2
  exit 1
}
