#!/bin/sh
# GPU discovery script for cluster 'dgx-a100', rendered by gpuspark from its spec.
# Edit the spec and render again rather than editing this file.
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
