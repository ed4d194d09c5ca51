"""Per-token framework overhead on CPU: the fast path vs the eager engine vs the published loop.

    python benchmarks/decode_overhead.py                  # 36 layers, hidden 128, real vocab, 200 tokens
    python benchmarks/decode_overhead.py --no-compile     # the fast path eager only (no inductor)
    python benchmarks/decode_overhead.py --layers 4 --new-tokens 64 --repeats 1   # a quick look

A random checkpoint with the published depth (36 layers, 3 sliding : 1 full), the real
vocabulary and `first_unit_id`, but a tiny width (hidden 128, heads 4/2, FFN 256): the
arithmetic is negligible, so the time per token is what each decode loop costs in Python
and kernel launches - the regime a GPU is in at batch 1, where reading the 6.8 GB of bf16
weights takes ~1.4 ms on an H200. Exactly `--new-tokens` tokens per run (min = max), the
same prompt for all, and per path:

  fast (compiled)  `TTSEngine(compile=True)`: static KV cache, fixed-shape step with sampling
                   and stopping on the device, compiled with torch.compile (inductor, C++)
  fast (eager)     the same step, not compiled
  engine (eager)   `decoder="reference"`: the eager reference sampler (transformers forward
                   with a dynamic cache, host bookkeeping per token)
  published        the published loop (benchmarks/published_loop.py)

Runs alternate between paths; the best of `--repeats` is reported (load only adds time).
Goal: the fast path >= 5x faster per token than the published loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.published_loop import SEED, TEMPERATURE, TOP_K, reference_generate  # noqa: E402
from rumik_app import SynthesisRequest, TTSEngine  # noqa: E402
from rumik_app.checkpoint.load import cache_root  # noqa: E402
from rumik_app.checkpoint.tiny import TinySpec, build_tiny_checkpoint  # noqa: E402

GOAL_RATIO = 5.0
PROMPT_TEXT = "आज की मीटिंग बहुत अच्छी रही, and everyone loved the new idea. <chuckle> चलो!"
REAL_VOCAB = 277_404


def overhead_spec(layers: int) -> TinySpec:
    """Published depth and vocabulary, tiny width (real first_unit_id follows from the vocab)."""
    return TinySpec(hidden=128, layers=layers, heads=4, kv_heads=2, ffn=256, vocab_size=REAL_VOCAB, logit_scale=0.125)


def build_checkpoint(layers: int) -> Path:
    path = cache_root() / f"bench-overhead-{layers}l"
    if not (path / "codec" / "model.safetensors").exists():
        print(f"building the overhead checkpoint ({layers} layers) in {path} ...", flush=True)
        build_tiny_checkpoint(path, overhead_spec(layers))
    return path


def time_engine(engine: TTSEngine, req: SynthesisRequest) -> float:
    start = time.perf_counter()
    rollouts = engine.generate_batch([req])
    elapsed = time.perf_counter() - start
    assert int(rollouts.lengths[0]) == req.max_new_tokens
    return elapsed


def time_published(engine: TTSEngine, prompt_ids: list[int], new_tokens: int) -> float:
    start = time.perf_counter()
    reference_generate(engine, prompt_ids, new_tokens, SEED)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (overhead regime: 1)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the compiled fast path (inductor; compiling takes a minute or two)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    path = str(build_checkpoint(args.layers))
    fast = TTSEngine.from_pretrained(path, device="cpu", dtype="fp32", compile=False)
    reference = TTSEngine(fast.model, fast.tokenizer, fast.codec, fast.config, fast.checkpoint_dir, decoder="reference")
    engines = {"fast (eager)": fast, "engine (eager)": reference}
    if args.compile:
        compiled = TTSEngine(fast.model, fast.tokenizer, fast.codec, fast.config, fast.checkpoint_dir, compile=True)
        start = time.perf_counter()
        compiled.warmup(prompt_len=64, max_new_tokens=args.new_tokens)
        print(f"compiled the decode step in {time.perf_counter() - start:.0f} s", flush=True)
        engines = {"fast (compiled)": compiled, **engines}
    req = SynthesisRequest(PROMPT_TEXT, seed=SEED, temperature=TEMPERATURE, top_k=TOP_K,
                           min_new_tokens=args.new_tokens, max_new_tokens=args.new_tokens)
    prompt_ids = fast.prompt_ids(req)
    print(f"{fast}; prompt {len(prompt_ids)} tokens; {args.new_tokens} new tokens; {args.threads} thread(s)",
          flush=True)
    for engine in engines.values():  # warm-up (allocations, first-call costs)
        time_engine(engine, req.with_(min_new_tokens=16, max_new_tokens=16))
    time_published(fast, prompt_ids, 16)
    best: dict[str, float] = {}
    for r in range(args.repeats):
        for name, engine in engines.items():
            best[name] = min(best.get(name, float("inf")), time_engine(engine, req))
        best["published"] = min(best.get("published", float("inf")), time_published(fast, prompt_ids, args.new_tokens))
        print(f"  run {r + 1}: " + ", ".join(f"{k} {1e3 * v / args.new_tokens:.1f}" for k, v in best.items())
              + " ms/token (best so far)", flush=True)
    ms = {name: 1e3 * seconds / args.new_tokens for name, seconds in best.items()}
    print(f"\n{'path':<18}{'ms/token':>10}{'vs published':>14}")
    for name, value in ms.items():
        print(f"{name:<18}{value:>10.2f}{ms['published'] / value:>13.2f}x")
    fastest = min(v for k, v in ms.items() if k.startswith("fast"))
    ratio = ms["published"] / fastest
    print(f"\nfast path: {ratio:.2f}x the published loop per token "
          f"(goal >= {GOAL_RATIO}x: {'met' if ratio >= GOAL_RATIO else 'NOT met'})")
    result = {"layers": args.layers, "new_tokens": args.new_tokens, "threads": args.threads, "ms_per_token": ms,
              "ratio_fast_vs_published": ratio, "goal_ratio": GOAL_RATIO}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
