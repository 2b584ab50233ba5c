#!/usr/bin/env bash
# Builds llm-compare/trtllm-double:test (a TEST DOUBLE, not TensorRT-LLM) when its inputs changed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
IMAGE=llm-compare/trtllm-double:test
BASE=llm-compare/vllm-cpu:0.32.0
log() { printf '[trtllm-double] %s\n' "$*" >&2; }
docker info >/dev/null 2>&1 || { log "the Docker daemon is not reachable (run scripts/setup.d/20-docker.sh)"; exit 2; }
base_id="$(docker image inspect -f '{{.Id}}' "$BASE" 2>/dev/null || true)"
[ -n "$base_id" ] || { log "$BASE is missing: build it with containers/images/build.sh vllm-cpu"; exit 2; }
want="$( { cat "$HERE/Dockerfile" "$HERE/trtllm_double.py"; echo "$base_id"; } | sha256sum | cut -c1-16)"
have="$(docker image inspect -f '{{ index .Config.Labels "llm-compare.inputs" }}' "$IMAGE" 2>/dev/null || true)"
if [ "$have" = "$want" ]; then log "$IMAGE up to date"; exit 0; fi
log "building $IMAGE"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$HERE/Dockerfile" "$HERE/trtllm_double.py" "$ctx/"
DOCKER_BUILDKIT=0 docker build -q --label "llm-compare.inputs=$want" -t "$IMAGE" "$ctx" >/dev/null
log "built $IMAGE"
