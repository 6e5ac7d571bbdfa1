#!/usr/bin/env bash
# The headless browser the page-of-the-plan tests drive (tests/live/test_plan_page_browser.py,
# tests/e2e/test_plan_page.py): Chromium from the distribution's own packages, never a browser build a test
# tool would download. Idempotent and quiet: a no-op when it is installed. Without root or apt-get it says so
# and exits 0: those tests then skip and say why.
set -euo pipefail

BROWSER=${GANGSOLVE_CHROMIUM:-/usr/bin/chromium}

log() { printf '[install-browser] %s\n' "$*" >&2; }

if [[ -x ${BROWSER} ]]; then
  exit 0
fi
if [[ $(id -u) != 0 ]] || ! command -v apt-get > /dev/null; then
  log "${BROWSER} is missing and cannot be installed here (needs root and apt-get): the browser tests skip"
  exit 0
fi
log "installing chromium from the distribution's packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq > /dev/null
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core > /dev/null
[[ -x ${BROWSER} ]] || { log "error: chromium installed but ${BROWSER} is missing"; exit 1; }
