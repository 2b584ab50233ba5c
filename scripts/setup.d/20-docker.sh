#!/usr/bin/env bash
# tier: test
# Docker for the container backends (tgi, vllm-container) and their tests: Debian's docker.io and
# mmdebstrap, a running dockerd (started here when none answers; its log goes to
# /var/log/llm-compare-dockerd.log), then the local images (containers/images/build.sh: a base
# from mmdebstrap | docker import, the vLLM CPU server, the TGI-protocol test double).
# Idempotent and fast when done: every step checks first. Needs root (CI runs as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[docker] %s\n' "$*" >&2; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  # update only when the packages are unknown (a fresh machine may have empty lists)
  { apt-cache show docker.io && apt-cache show mmdebstrap; } >/dev/null 2>&1 || $SUDO apt-get update -q >/dev/null
  log "installing docker.io and mmdebstrap"
  $SUDO apt-get install -y -q --no-install-recommends docker.io mmdebstrap >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/llm-compare-dockerd.log)"
  # setsid: the daemon outlives this script, not tied to its process group
  $SUDO setsid dockerd >/var/log/llm-compare-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up:"; tail -n 20 /var/log/llm-compare-dockerd.log >&2; exit 1; }
fi

bash containers/images/build.sh all

# containers left by runs that died (their owner pid is gone, e.g. a killed session); live ones stay
if [ -x .venv/bin/compare ]; then
  .venv/bin/compare containers prune | tail -n 1 | sed 's/^/[docker] /' >&2 || true
fi
