#!/usr/bin/env bash
# Every GPU speed goal of the project in one unattended run (about 15 minutes on one H200 with all four
# weight formats: gpu_speed takes about 4.5 minutes per format, compiling included; --quants none fits a
# 15-minute lease with the rest).
#
#   benchmarks/gpu_suite.sh                       # on a GPU machine, from the repository root
#   benchmarks/gpu_suite.sh --out results/gpu     # where the tables go (default gpu-suite-DATE)
#   benchmarks/gpu_suite.sh --smoke               # CPU dry run of every step on one tiny configuration (CI runs it)
#   benchmarks/gpu_suite.sh --quants "none int4"  # the weight formats gpu_speed runs (default: none int8 int4 nf4)
#   PYTHON=.venv/bin/python benchmarks/gpu_suite.sh   # the interpreter (default: .venv, it has both backends)
#
# In order, each under its own time limit so one slow or failing step never loses the rest:
#   1. gpu_speed.py      decode speed at the published size: bf16, then int8, int4 and nf4 weights
#                        (docs/speed.md; goals: batch 1 >= 500 tokens/s, TTFA <= 150 ms, batch 32 >= 50x)
#   2. serve_load.py     the speech server, engine vs vLLM backend, concurrency 1/16/64, on a
#                        real-width random checkpoint built here (goal: vLLM >= 3x the engine at 64)
#   3. grpo_rollouts.py  GRPO rollouts on both backends and vLLM's weight sync per step
# Each writes OUT/<step>.md (its table, as the script prints it) and OUT/<step>.json; OUT/README.md
# lists every step with its exit status and time. Random weights only: nothing is downloaded.
# Where vLLM is not installed (a bare GPU image), steps 2 and 3 run the engine backend alone and the
# summary says so.
set -uo pipefail
cd "$(dirname "$0")/.."

SMOKE=0
QUANTS_ASKED=""
OUT="gpu-suite-$(date +%Y%m%d-%H%M%S)"
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) SMOKE=1 ;;
    --out) OUT="$2"; shift ;;
    --quants) QUANTS_ASKED="$2"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu_suite.sh: unknown option $1 (use --smoke, --out DIR, --quants LIST)" >&2; exit 2 ;;
  esac
  shift
done
PYTHON="${PYTHON:-.venv/bin/python}"
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "gpu_suite.sh: $PYTHON cannot import torch; run ./setup.sh --dev first, or set PYTHON" >&2
  exit 2
fi
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
SUMMARY="$OUT/README.md"
printf '# GPU suite %s\n\n%s\n\n| step | status | seconds | table |\n|---|---|---:|---|\n' \
  "$(date -u +%Y-%m-%dT%H:%MZ)" "$("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU: the CPU")')" > "$SUMMARY"

# installed MODULE: whether $PYTHON can import MODULE (found, not imported).
installed() {
  "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)" "$1"
}

# run NAME LIMIT_S COMMAND...: the command's stdout to OUT/NAME.md, a row in the summary.
run() {
  local name="$1" limit="$2"; shift 2
  local start=$SECONDS
  echo "== $name (at most ${limit} s)"
  timeout --kill-after=20 "$limit" "$@" > "$OUT/$name.md" 2> "$OUT/$name.log"
  local rc=$?
  local status="ok"
  [ $rc -eq 124 ] && status="timed out after ${limit} s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && status="failed (exit $rc; see $name.log)"
  echo "| $name | $status | $((SECONDS - start)) | [$name.md]($name.md) |" >> "$SUMMARY"
  tail -n 3 "$OUT/$name.md"
}

if [ "$SMOKE" = 1 ]; then
  # One tiny configuration that checks this script's wiring: every step runs and fills its table, with no
  # compiling and no vLLM start (each costs a minute on a CPU). Tested elsewhere: the compiled fast path
  # (tests/rumik_app/test_fast_decode.py), vLLM's server (tests/vllm/test_serve_process.py; serve_load passes
  # --backend through unchanged), grpo_rollouts' vLLM side (tests/vllm/test_grpo.py's rollout benchmark test).
  SPEED=(--smoke --device cpu --no-compile --batches 2); QUANTS="none int8"; CKPT_ARGS="tiny64 2"
  LOAD=(--concurrency 1,2 --rounds 1 --max-seconds 0.3 --max-batch 2); SPAWN=engine
  GRPO=(--prompts 2 --generations 2 --new-tokens 32 --steps 1 --backends engine)
  LIMIT_SPEED=300; LIMIT_LOAD=600; LIMIT_GRPO=600
else
  SPEED=(); QUANTS="none int8 int4 nf4"; CKPT_ARGS="real-width 12"
  LOAD=(--concurrency 1,16,64 --rounds 1 --max-seconds 2 --max-batch 64
        --vllm-server-arg=--gpu-memory-utilization=0.45)
  SPAWN=engine,vllm
  GRPO=(--preset real-width --layers 12 --new-tokens 512 --steps 2 --gpu-memory-utilization 0.4)
  # gpu_speed on an H200 (2026-12-04): 224 s with a warm compile cache (compiling batch 1 took 51 s cold,
  # batch 8 76 s), so 120 s timed out; grpo_rollouts took 97 s on the engine alone. serve_load's engine
  # server had refused vLLM's --gpu-memory-utilization (now --vllm-server-arg).
  LIMIT_SPEED=330; LIMIT_LOAD=150; LIMIT_GRPO=150
  if ! installed vllm; then
    SPAWN=engine; GRPO+=(--backends engine)
    echo "| vllm | skipped: vllm is not installed (serve_load and grpo_rollouts ran the engine alone) | 0 | |" \
      >> "$SUMMARY"
  fi
fi
[ -n "$QUANTS_ASKED" ] && QUANTS="$QUANTS_ASKED"

# kernel_package MODE: the package a quantize mode's CUDA kernel needs (pyproject's cuda extra), if any.
kernel_package() {
  case "$1" in
    int4) echo torchao ;;
    int8) [ "$SMOKE" = 1 ] || echo torchao ;;  # on the CPU int8 is aten's own kernel
    nf4) echo bitsandbytes ;;
  esac
}

for q in $QUANTS; do
  pkg="$(kernel_package "$q")"
  if [ -n "$pkg" ] && ! installed "$pkg"; then
    echo "| gpu_speed_$q | skipped: $pkg is not installed (pip install -e .[cuda]) | 0 | |" >> "$SUMMARY"
    continue
  fi
  if [ "$q" = none ]; then
    run gpu_speed "$LIMIT_SPEED" "$PYTHON" benchmarks/gpu_speed.py "${SPEED[@]}" --json "$OUT/gpu_speed.json"
  else
    run "gpu_speed_$q" "$LIMIT_SPEED" "$PYTHON" benchmarks/gpu_speed.py "${SPEED[@]}" --quantize "$q" \
      --json "$OUT/gpu_speed_$q.json"
  fi
done

CKPT="$("$PYTHON" -c "import sys; from benchmarks.backend_throughput import build_checkpoint; \
print(build_checkpoint(sys.argv[1], int(sys.argv[2])))" $CKPT_ARGS 2>> "$OUT/checkpoint.log" | tail -n 1)"
run serve_load "$LIMIT_LOAD" "$PYTHON" benchmarks/serve_load.py --spawn "$SPAWN" --checkpoint "$CKPT" \
  --server-python "$PYTHON" "${LOAD[@]}" --json "$OUT/serve_load.json"
run grpo_rollouts "$LIMIT_GRPO" "$PYTHON" benchmarks/grpo_rollouts.py "${GRPO[@]}" --json "$OUT/grpo_rollouts.json"

echo "gpu_suite.sh: tables in $OUT (summary: $SUMMARY)"
cat "$SUMMARY"
! grep -q -E '\| (failed|timed out)' "$SUMMARY"  # exit status 1 if any step did not finish
