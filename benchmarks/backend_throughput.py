"""Batch throughput of the two backends side by side: engine vs vLLM, same checkpoint, same run.

    .venv/bin/python benchmarks/backend_throughput.py                       # CPU: tiny, head size 64
    .venv/bin/python benchmarks/backend_throughput.py --preset real-width --layers 36 \
        --concurrency 1,16,64 --new-tokens 512                                   # a GPU (the issue's goal)

For each concurrency c, c requests (different texts, seeds) generate exactly
`--new-tokens` tokens each (min = max, so no row stops early) through
`generate_batch`: one `BatchDecoder` batch on the engine backend, c concurrent vLLM
requests on the vLLM backend. Prints generated tokens per second of each, seconds of audio
per wall second, and the ratio vLLM / engine. Runs alternate (engine, vLLM, ...) so
background load hits both alike; the best run of each counts. Goal on a GPU at real width
and 36 layers: ratio >= 3 at concurrency 64. Token generation only: Mimi decoding is the
same code on both backends. Needs vLLM (`./setup.sh --dev`).
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

from rumik_app import SynthesisRequest  # noqa: E402
from rumik_app.checkpoint.load import cache_root  # noqa: E402
from rumik_app.checkpoint.tiny import TinySpec, build_tiny_checkpoint  # noqa: E402
from rumik_app.cli_args import quiet_vllm_logs  # noqa: E402
from rumik_app.engine.loading import load_engine  # noqa: E402

GOAL_RATIO, GOAL_CONCURRENCY = 3.0, 64
TEXTS = ("Hello there, how are you today?", "आज की मीटिंग बहुत अच्छी रही।", "<laugh> That was really funny!",
         "কাল দেখা হবে, ভালো থেকো।", "We will meet again tomorrow morning.", "நன்றி, மீண்டும் சந்திப்போம்.")


def build_checkpoint(preset: str, layers: int) -> Path:
    spec = TinySpec.real_width(layers=layers) if preset == "real-width" else \
        TinySpec(hidden=256, heads=4, kv_heads=2, ffn=512, layers=layers)
    path = cache_root() / f"bench-{preset}-{layers}l"
    if not (path / "codec" / "model.safetensors").exists():
        print(f"building the {preset} checkpoint ({layers} layers) in {path} ...", flush=True)
        build_tiny_checkpoint(path, spec)
    return path


def requests(count: int, new_tokens: int) -> list[SynthesisRequest]:
    return [SynthesisRequest(TEXTS[i % len(TEXTS)], seed=1000 + i, min_new_tokens=new_tokens,
                             max_new_tokens=new_tokens) for i in range(count)]


def timed(engine, reqs) -> tuple[float, int]:
    start = time.perf_counter()
    rollouts = engine.generate_batch(reqs)
    return time.perf_counter() - start, int(rollouts.lengths.sum())


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=("tiny64", "real-width"), default="tiny64")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--concurrency", default="1,16", help="comma-separated request counts")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    quiet_vllm_logs()
    path = str(build_checkpoint(args.preset, args.layers))
    engine = load_engine(path)
    vllm = load_engine(path, backend="vllm")
    print(f"{engine}\n{vllm}", flush=True)
    tokens_per_second = engine.layout.tokens_per_second
    results = []
    for count in [int(c) for c in args.concurrency.split(",")]:
        reqs = requests(count, args.new_tokens)
        timed(engine, reqs[:1] if count > 1 else reqs)  # warm-up at this shape's first step
        best = {"engine": float("inf"), "vllm": float("inf")}
        for _ in range(args.repeats):
            for name, backend in (("engine", engine), ("vllm", vllm)):
                seconds, tokens = timed(backend, reqs)
                best[name] = min(best[name], seconds)
        total = count * args.new_tokens
        row = {"concurrency": count, "new_tokens": args.new_tokens,
               **{f"{k}_tokens_per_s": total / v for k, v in best.items()},
               **{f"{k}_audio_s_per_s": total / tokens_per_second / v for k, v in best.items()},
               "ratio": best["engine"] / best["vllm"]}
        results.append(row)
        print(f"concurrency {count:>3}: engine {row['engine_tokens_per_s']:8.1f} tok/s "
              f"({row['engine_audio_s_per_s']:.2f} s audio/s)   vLLM {row['vllm_tokens_per_s']:8.1f} tok/s "
              f"({row['vllm_audio_s_per_s']:.2f} s audio/s)   ratio {row['ratio']:.2f}x", flush=True)
    goal = [r for r in results if r["concurrency"] == GOAL_CONCURRENCY]
    if goal:
        print(f"goal (GPU, real width, 36 layers): ratio >= {GOAL_RATIO}x at concurrency {GOAL_CONCURRENCY}: "
              f"{'met' if goal[0]['ratio'] >= GOAL_RATIO else 'NOT met'} ({goal[0]['ratio']:.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    vllm.close()
    return results


if __name__ == "__main__":
    main()
