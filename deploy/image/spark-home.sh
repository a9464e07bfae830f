#!/usr/bin/env bash
# SPARK_HOME of the image, run in the Containerfile's last stage: /opt/spark as in Apache
# Spark's images. Its bin, sbin, jars, python, data, examples and licenses are relative links
# into the pinned pyspark's package folder (relative, so that they also resolve in a mounted
# image); conf/ takes the files Spark mounts; work-dir/ belongs to spark (uid 185).
set -euo pipefail

pyspark=$(/opt/gpuspark/venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
mkdir -p /opt/spark/conf
for name in bin sbin jars python data examples licenses; do
  ln -sfn --relative "$pyspark/$name" "/opt/spark/$name"
done
install -d -o 185 -g 185 /opt/spark/work-dir
# An arbitrary uid (OpenShift: group root) gets its passwd entry from the entrypoint.
chgrp root /etc/passwd && chmod g+w /etc/passwd
