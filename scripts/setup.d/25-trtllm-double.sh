#!/usr/bin/env bash
# tier: test
# TEST DOUBLE image for the TensorRT-LLM pipeline tests (tests/backends/test_trtllm_pipeline.py):
# llm-compare/trtllm-double:test, FROM the local vLLM CPU server image that 20-docker.sh builds.
# NOT TensorRT-LLM (which cannot run here); see containers/images/trtllm-double/trtllm_double.py.
# Idempotent: rebuilt only when its inputs (files + the vllm-cpu image id) changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash containers/images/trtllm-double/build.sh
