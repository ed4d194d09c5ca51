#!/usr/bin/env bash
# Set up everything this project needs on a fresh Debian machine (idempotent).
#   ./setup.sh            system packages (if root) + .venv with requirements.txt
# System packages: espeak-ng (offline baseline + synthetic training speech), sox,
# chromium + chromium-driver (browser test of the app), fonts-indic (Indic text renders),
# ffmpeg (gradio audio conversion), libsndfile1.
set -euo pipefail
cd "$(dirname "$0")"
APT_PACKAGES="espeak-ng sox chromium chromium-driver fonts-indic ffmpeg libsndfile1"
missing=""
for p in $APT_PACKAGES; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "setup.sh: missing system packages:$missing (run as root or: sudo apt-get install$missing)" >&2
  fi
fi
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
echo "setup.sh: ready (.venv)"
