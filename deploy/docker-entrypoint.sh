#!/bin/sh
# Docker and Compose secrets arrive as files under /run/secrets, but the broker reads its settings
# from the environment only. A secret file named after a setting (e.g. BROKER_CALLBACK_SECRET)
# becomes that variable, unless the variable is already set, which then wins. Other secrets follow
# the *_FILE convention: NAME_FILE=/run/secrets/x makes NAME the file's content (PGPASSWORD for
# libpq, FLOWER_PASSWORD), unless NAME is set; BROKER_* names ending in _FILE are settings (paths)
# and are left alone. The prometheus-client
# multiprocess folder (PROMETHEUS_MULTIPROC_DIR, one per container) is emptied, so a restarted
# container starts its counters from zero instead of summing a dead process's files. Then the
# command runs as PID 1, so it receives SIGTERM directly and can drain.
set -eu

if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
  mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
  find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -delete
fi

secrets_dir=${SECRETS_DIR:-/run/secrets}
for file in "$secrets_dir"/BROKER_*; do
  [ -f "$file" ] || continue
  name=${file##*/}
  case $name in
    *[!A-Z0-9_]*) echo "docker-entrypoint: ignoring secret file with an odd name: $name" >&2; continue ;;
  esac
  if ! printenv "$name" >/dev/null; then
    value=$(cat "$file")
    export "$name=$value"
  fi
done

for pair in $(env | grep -E '^[A-Z][A-Z0-9_]*_FILE=' | cut -d= -f1); do
  case $pair in BROKER_*) continue ;; esac
  name=${pair%_FILE}
  file=$(printenv "$pair")
  if ! printenv "$name" >/dev/null; then
    [ -r "$file" ] || { echo "docker-entrypoint: $pair names no readable file: $file" >&2; exit 1; }
    value=$(cat "$file")
    export "$name=$value"
  fi
  unset "$pair"
done

exec "$@"
