#!/usr/bin/env bash
# The wheels a bare CUDA image needs to run benchmarks/gpu_suite.sh, downloaded here for Python 3.12.
#
#   benchmarks/gpu_wheels.sh                 # into .whl/ (git-ignored), about 36 MB
#   benchmarks/gpu_wheels.sh --out DIR
#
# Then, on the GPU machine (no package index there), from the repository root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site PYTHON=python3 benchmarks/gpu_suite.sh --quants "none int8"
#
# The list is what such an image lacked on 2026-12-04 (torch 2.11.0+cu130 with CUDA, numpy, scipy, httpx,
# h11, anyio, regex, prometheus-client and tqdm were there): the project's pins that the suite imports,
# transformers and its hub at our pins, torchao for int8/int4, and their own needs. Versions are this
# checkout's .venv's, so the GPU runs what the tests ran. resemble-perth (34 MB, library voices' watermark)
# and bitsandbytes (nf4) are left out; vLLM's CUDA wheel is too large to carry in one call.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=".whl"
case "${1:-}" in
  --out) OUT="$2" ;;
  -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
  "") ;;
  *) echo "gpu_wheels.sh: unknown option $1 (use --out DIR)" >&2; exit 2 ;;
esac
PYTHON="${PYTHON:-.venv/bin/python}"
PACKAGES=(babel defusedxml fastapi starlette uvicorn websockets pydantic pydantic-core annotated-types
          typing-inspection python-multipart soundfile cffi pycparser soxr indic-numtowords transformers
          huggingface-hub httpx2 httpcore2 truststore tokenizers)
# torchao is pinned by pyproject's cuda extra and is not installed in the CPU .venv
PINNED=("torchao==$(sed -n 's/.*"torchao==\([0-9.]*\)".*/\1/p' pyproject.toml)")
for name in "${PACKAGES[@]}"; do
  PINNED+=("$name==$("$PYTHON" -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' "$name")")
done
mkdir -p "$OUT"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$OUT" "${PINNED[@]}"
echo "gpu_wheels.sh: ${#PINNED[@]} wheels in $OUT ($(du -sh "$OUT" | cut -f1)); carry $OUT to the GPU machine"
