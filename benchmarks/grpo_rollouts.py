"""GRPO rollouts on the two backends side by side: rollout tokens/s and the weight sync per step.

    .venv/bin/python benchmarks/grpo_rollouts.py                          # CPU: tiny, head size 64
    .venv/bin/python benchmarks/grpo_rollouts.py --prompts 8 --generations 8 --new-tokens 256 --steps 3
    .venv/bin/python benchmarks/grpo_rollouts.py --preset real-width --layers 36 --new-tokens 1024 \
        --gpu-memory-utilization 0.5 --json grpo_gpu.json                  # one GPU: the real model's shape
    .venv/bin/python benchmarks/grpo_rollouts.py --backends engine         # the engine alone: no vLLM start

One step is what `training.grpo` does with `rollout.backend = "engine"` or `"vllm"`: P prompts
x G generations sampled as GRPO samples them (`stop_mode="sample"`, temperature 1, top-k 30,
sample j of a prompt with seed + j), through `generate_batch` on the in-process engine and on
vLLM; then, for vLLM, the weight sync after an optimiser step: every weight of the model is
moved a little (as a full-weight AdamW step moves them all) and pushed into vLLM
(`VLLMEngine.load_weights`: packing, transport to vLLM's worker, its layerwise reload, the
prefix-cache reset). The engine backend samples from the live weights and syncs nothing.
Rows run to `--new-tokens` (min = max), so both backends generate the same token count.
Prints rollout tokens/s of each (the best step), vLLM's ratio to the engine, and sync seconds
and megabytes per step. At the end vLLM gets the checkpoint's weights back. `--backends engine`
measures the engine alone and starts no vLLM (the GPU suite's CPU dry run does).

GPU (unmeasured until a GPU is available): the command above on one GPU; both backends hold
the model on it at once (the engine in bf16 plus its decode cache, vLLM at
`--gpu-memory-utilization`). There the sync moves 6.8 GB of bf16 through vLLM's RPC as bytes
(copies through CPU memory), so expect seconds per step; see docs/vllm.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

import torch  # noqa: E402

from benchmarks.backend_throughput import TEXTS, build_checkpoint  # noqa: E402
from rumik_app import SynthesisRequest  # noqa: E402
from rumik_app.cli_args import quiet_vllm_logs  # noqa: E402
from rumik_app.engine.loading import load_engine  # noqa: E402

STEP_SCALE = 1e-4  # relative size of the simulated optimiser step (every weight moves)
TOP_K = 30  # the GRPO smoke's sampling
BACKENDS = ("engine,vllm", "engine")  # --backends: both side by side, or the engine alone


def rollout_requests(prompts: int, new_tokens: int) -> list[SynthesisRequest]:
    return [SynthesisRequest(TEXTS[i % len(TEXTS)], seed=100 * i, temperature=1.0, top_k=TOP_K,
                             min_new_tokens=new_tokens, max_new_tokens=new_tokens) for i in range(prompts)]


def run(engine, vllm=None, prompts: int = 8, generations: int = 8, new_tokens: int = 256,
        steps: int = 3) -> list[dict]:
    """Time `steps` GRPO steps' rollouts on the engine and on vLLM (None: the engine alone) and
    vLLM's weight sync; one result row per backend: rows, tokens per step, best rollout seconds,
    tokens/s, sync s and MB per step."""
    reqs = rollout_requests(prompts, new_tokens)
    backends = {"engine": engine} if vllm is None else {"engine": engine, "vllm": vllm}
    original = {name: p.detach().clone() for name, p in engine.model.named_parameters()} if vllm is not None else {}
    best = dict.fromkeys(backends, float("inf"))
    tokens = {}
    syncs = []
    for backend in backends.values():  # warm-up at this shape
        backend.generate_batch(reqs[:1], num_samples=2, stop_mode="sample")
    for _ in range(steps):
        for name, backend in backends.items():  # alternate: background load hits both
            start = time.perf_counter()
            rollouts = backend.generate_batch(reqs, num_samples=generations, stop_mode="sample")
            best[name] = min(best[name], time.perf_counter() - start)
            tokens[name] = int(rollouts.lengths.sum())
        if vllm is not None:
            with torch.no_grad():
                moved = {n: w + STEP_SCALE * w.abs().mean() * torch.randn_like(w) for n, w in original.items()}
            syncs.append(vllm.load_weights(moved))
    if vllm is not None:
        vllm.load_weights(original)  # leave vLLM with the checkpoint's weights
    sync_s = sum(r.seconds for r in syncs) / max(len(syncs), 1)
    sync_mb = sum(r.megabytes for r in syncs) / max(len(syncs), 1)
    rows = []
    for name in backends:
        rows.append({"backend": name, "rows": prompts * generations, "tokens_per_step": tokens[name],
                     "rollout_s": best[name], "tokens_per_s": tokens[name] / best[name],
                     "vs_engine": best["engine"] / best[name],
                     "sync_s_per_step": sync_s if name == "vllm" else 0.0,
                     "sync_mb_per_step": sync_mb if name == "vllm" else 0.0})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| backend | rows | tokens/step | rollout s (best) | rollout tok/s | vs engine | sync s/step "
             "| sync MB/step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['rows']} | {r['tokens_per_step']} | {r['rollout_s']:.2f} | "
                     f"{r['tokens_per_s']:,.0f} | {r['vs_engine']:.2f}x | {r['sync_s_per_step']:.3f} | "
                     f"{r['sync_mb_per_step']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=("tiny64", "real-width"), default="tiny64")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--gpu-memory-utilization", type=float, default=None,
                        help="vLLM's share of the GPU (the engine backend holds the model there too)")
    parser.add_argument("--backends", choices=BACKENDS, default=BACKENDS[0],
                        help="engine,vllm (default) or engine alone, which starts no vLLM")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    quiet_vllm_logs()
    path = str(build_checkpoint(args.preset, args.layers))
    engine = load_engine(path)
    vllm = None
    if "vllm" in args.backends:
        extra = {} if args.gpu_memory_utilization is None else {"gpu_memory_utilization": args.gpu_memory_utilization}
        vllm = load_engine(path, backend="vllm", dtype=engine.model.dtype, **extra)
    engines = "\n".join(repr(e) for e in (engine, vllm) if e is not None)
    print(f"{engines}\n{args.prompts} prompts x {args.generations} generations, {args.new_tokens} tokens "
          f"each, best of {args.steps} steps", flush=True)
    rows = run(engine, vllm, args.prompts, args.generations, args.new_tokens, args.steps)
    print(table(rows), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    if vllm is not None:
        vllm.close()
    return rows


if __name__ == "__main__":
    main()
