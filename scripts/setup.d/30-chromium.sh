#!/usr/bin/env bash
# tier: test
# Headless Chromium for the report test (tests/compare/report/test_report_e2e.py renders the HTML report and
# checks its plots pixel by pixel). Idempotent: does nothing when chromium is already there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# update only when the package is unknown (a fresh image may have empty lists)
apt-cache show chromium >/dev/null 2>&1 || $SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
