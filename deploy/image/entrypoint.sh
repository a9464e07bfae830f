#!/usr/bin/env bash
# Entrypoint of the gpuspark image (/opt/entrypoint.sh): the contract Spark's Kubernetes
# backend expects of an image, as in Spark's own
# resource-managers/kubernetes/docker/src/main/dockerfiles/spark/entrypoint.sh:
#
#   driver ARGS...   $SPARK_HOME/bin/spark-submit --conf spark.driver.bindAddress=
#                    $SPARK_DRIVER_BIND_ADDRESS --deploy-mode client ARGS... (the driver pod;
#                    ARGS are what Spark passes: --properties-file, --class, the app and its args)
#   executor         the KubernetesExecutorBackend JVM, from SPARK_EXECUTOR_MEMORY, SPARK_DRIVER_URL,
#                    SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES, SPARK_APPLICATION_ID,
#                    SPARK_EXECUTOR_POD_IP, SPARK_RESOURCE_PROFILE_ID, SPARK_EXECUTOR_POD_NAME;
#                    JVM options SPARK_JAVA_OPT_0, _1, ... in numeric order; class path
#                    SPARK_CONF_DIR (else $SPARK_HOME/conf), HADOOP_CONF_DIR, SPARK_CLASSPATH,
#                    $SPARK_HOME/jars/*, SPARK_EXTRA_CLASSPATH, SPARK_DIST_CLASSPATH
#   anything else    run as given (pass-through)
#
# Every command runs under tini (-s: a subreaper, so orphans of Python workers are reaped).
# With K8S_SPARK_LOG_PATH set, stdout and stderr are also copied to files in that folder.
set -euo pipefail

me="gpuspark entrypoint"

# Java (Hadoop's user lookup) fails for a uid without a passwd entry, as under OpenShift's
# arbitrary uids (group root): add one where the image lets us (/etc/passwd group-writable).
uid=$(id -u)
if ! getent passwd "$uid" >/dev/null 2>&1; then
  if [ -w /etc/passwd ]; then
    echo "$uid:x:$uid:$(id -g):${SPARK_USER_NAME:-anonymous uid}:${SPARK_HOME:-/}:/bin/false" >>/etc/passwd
  else
    echo "$me: uid $uid has no passwd entry and /etc/passwd is read-only: Java may fail" \
      "to find the user name (run as uid 185, or with a writable root file system)" >&2
  fi
fi

# The executor's class path, empty parts left out (an empty entry would mean the work dir).
classpath() {
  local parts=() part joined=""
  if [ -n "${SPARK_CONF_DIR:-}" ]; then
    parts+=("$SPARK_CONF_DIR")
  elif [ -n "${SPARK_HOME:-}" ]; then
    parts+=("$SPARK_HOME/conf")
  fi
  parts+=("${HADOOP_CONF_DIR:-}" "${SPARK_CLASSPATH:-}" "${SPARK_HOME:-}/jars/*")
  parts+=("${SPARK_EXTRA_CLASSPATH:-}" "${SPARK_DIST_CLASSPATH:-}")
  for part in "${parts[@]}"; do
    [ -n "$part" ] && joined="${joined:+$joined:}$part"
  done
  printf '%s' "$joined"
}

require() {
  local name missing=()
  for name in "$@"; do
    [ -n "${!name:-}" ] || missing+=("$name")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "$me: $mode: ${missing[*]} not set; Spark's Kubernetes backend sets them in the pod" \
      "it creates (to run something else, give the command itself)" >&2
    exit 2
  fi
}

if [ -n "${HADOOP_HOME:-}" ] && [ -z "${SPARK_DIST_CLASSPATH:-}" ]; then
  SPARK_DIST_CLASSPATH=$("$HADOOP_HOME/bin/hadoop" classpath)
  export SPARK_DIST_CLASSPATH
fi

mode=${1:-}
case "$mode" in
  driver)
    shift
    require SPARK_HOME SPARK_DRIVER_BIND_ADDRESS
    cmd=(
      "$SPARK_HOME/bin/spark-submit"
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS"
      --deploy-mode client
      "$@"
    )
    ;;
  executor)
    shift
    require SPARK_HOME SPARK_EXECUTOR_MEMORY SPARK_DRIVER_URL SPARK_EXECUTOR_ID \
      SPARK_EXECUTOR_CORES SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP \
      SPARK_RESOURCE_PROFILE_ID SPARK_EXECUTOR_POD_NAME
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4 -n || true)
    cmd=(
      "${JAVA_HOME:+$JAVA_HOME/bin/}java"
      "${java_opts[@]}"
      "-Xms$SPARK_EXECUTOR_MEMORY"
      "-Xmx$SPARK_EXECUTOR_MEMORY"
      -cp "$(classpath)"
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
      --driver-url "$SPARK_DRIVER_URL"
      --executor-id "$SPARK_EXECUTOR_ID"
      --cores "$SPARK_EXECUTOR_CORES"
      --app-id "$SPARK_APPLICATION_ID"
      --hostname "$SPARK_EXECUTOR_POD_IP"
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID"
      --podName "$SPARK_EXECUTOR_POD_NAME"
    )
    ;;
  "")
    echo "$me: no command given (expected driver, executor or a command to run)" >&2
    exit 2
    ;;
  *)
    cmd=("$@")
    ;;
esac

case "$mode" in
  driver | executor) echo "$me: $mode: $(printf '%q ' "${cmd[@]}")" >&2 ;;
esac
if [ -z "${K8S_SPARK_LOG_PATH:-}" ]; then
  exec tini -s -- "${cmd[@]}"
fi
mkdir -p "$K8S_SPARK_LOG_PATH"
exec tini -s -- "${cmd[@]}" \
  > >(tee "$K8S_SPARK_LOG_PATH/stdout") 2> >(tee "$K8S_SPARK_LOG_PATH/stderr" >&2)
