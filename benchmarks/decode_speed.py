"""Decode speed: this engine vs a faithful copy of the published reference loop, same run.

    python benchmarks/decode_speed.py                    # real width + vocabulary, 4 layers, CPU
    python benchmarks/decode_speed.py --layers 2 --new-tokens 200 --repeats 1   # quicker look
    python benchmarks/decode_speed.py --quantize int8 --dtype bfloat16   # + int8 and bf16 engine rows

Builds (once, cached) a random-weight checkpoint of the published width and vocabulary
(hidden 2048, 16/4 heads, FFN 11008, vocab 277,404) at reduced depth, loads it once, and
times generating exactly `--new-tokens` tokens (min = max, so the stop head never ends a
run early) from the same prompt with:

  reference  the published loop: a transformers forward per token returning full-vocabulary
             logits (277k rows x 2048) and `output_hidden_states=True` for the stop head,
             then a freshly built -inf mask over non-audio ids, top-k sampling;
  engine     `TTSEngine.generate_batch`: audio-only head (codebook rows + </audio> only),
             stop head on the final hidden state it already has, KV cache, one token/step.

Runs alternate (ref, engine, ref, engine, ...) so background load hits both alike; the
best (fastest) run of each is reported, since background load only ever adds time, with
the ratio and the streaming time-to-first-audio. Decode is
memory-bound: the reference reads ~3.5 GB of fp32 weights per token, the engine ~1.3 GB,
so ~2.7x is the ceiling on CPU. Goal: ratio >= 2.3x.

`--dtype bfloat16` and `--quantize int8` (comma lists) add engine rows, each loaded once and
timed in the same alternation, against the fp32 engine: the weights the body reads per token
are half (bf16) or a quarter (int8, `rumik_app.model.quantize`) of fp32's, so on a memory-bound
CPU the goal is >= 1.5x fp32 for each. int8 rows load in fp32 (norms, embedding and stop head
stay fp32; the int8 kernel takes bf16 activations). The table also gives each row's weight bytes.
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
from rumik_app.model.quantize import human_bytes, module_bytes  # noqa: E402

GOAL_RATIO = 2.3
GOAL_VS_FP32 = 1.5  # --dtype bfloat16 / --quantize int8 rows against the fp32 engine
PROMPT_TEXT = "आज की मीटिंग बहुत अच्छी रही, and everyone loved the new idea. <chuckle> चलो, कॉफ़ी पीते हैं!"


def build_checkpoint(layers: int) -> Path:
    path = cache_root() / f"bench-real-width-{layers}l"
    if not (path / "codec" / "model.safetensors").exists():
        print(f"building real-width checkpoint ({layers} layers) in {path} ...", flush=True)
        build_tiny_checkpoint(path, TinySpec.real_width(layers=layers))
    return path


def time_engine(engine: TTSEngine, req: SynthesisRequest) -> tuple[float, int]:
    start = time.perf_counter()
    rollouts = engine.generate_batch([req])
    return time.perf_counter() - start, int(rollouts.lengths[0])


def time_reference(engine: TTSEngine, prompt_ids: list[int], new_tokens: int) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = reference_generate(engine, prompt_ids, new_tokens, SEED)
    return time.perf_counter() - start, len(tokens)


def time_to_first_audio(engine: TTSEngine, req: SynthesisRequest) -> float:
    start = time.perf_counter()
    stream = engine.stream(req)
    next(stream)
    elapsed = time.perf_counter() - start
    stream.close()
    return elapsed


def engine_rows(args) -> list[tuple[str, str, str | None]]:
    """(label, dtype, quantize) of every engine to time: fp32 first, then --dtype, then --quantize."""
    rows = [("engine fp32", "fp32", None)]
    rows += [(f"engine {d}", d, None) for d in args.dtype.split(",") if d and d not in ("fp32", "float32")]
    rows += [(f"engine {q} (fp32 rest)", "fp32", q) for q in args.quantize.split(",") if q and q != "none"]
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="fp32", help="comma list of engine dtypes to time (fp32 always is)")
    parser.add_argument("--quantize", default="", help="comma list of quantize modes to time (CPU: int8)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    path = str(build_checkpoint(args.layers))
    engines = {label: TTSEngine.from_pretrained(path, device="cpu", dtype=dtype, quantize=q)
               for label, dtype, q in engine_rows(args)}
    engine = engines["engine fp32"]
    req = SynthesisRequest(PROMPT_TEXT, seed=SEED, temperature=TEMPERATURE, top_k=TOP_K,
                           min_new_tokens=args.new_tokens, max_new_tokens=args.new_tokens)
    prompt_ids = engine.prompt_ids(req)
    print(f"{engine}; prompt {len(prompt_ids)} tokens; {args.new_tokens} new tokens; "
          f"{torch.get_num_threads()} threads", flush=True)
    time_reference(engine, prompt_ids, 8)  # warm-up every path
    for eng in engines.values():
        time_engine(eng, req.with_(min_new_tokens=8, max_new_tokens=8))
    times: dict[str, list[float]] = {"reference": [], **{label: [] for label in engines}}
    for r in range(args.repeats):
        t, n = time_reference(engine, prompt_ids, args.new_tokens)
        times["reference"].append(t)
        print(f"  run {r + 1}: reference {n} tokens in {t:.1f} s ({n / t:.2f} tokens/s)", flush=True)
        for label, eng in engines.items():
            t, n = time_engine(eng, req)
            times[label].append(t)
            print(f"  run {r + 1}: {label} {n} tokens in {t:.1f} s ({n / t:.2f} tokens/s)", flush=True)
    ttfa = time_to_first_audio(engine, req)
    tps = {label: args.new_tokens / min(ts) for label, ts in times.items()}
    ref_tps, eng_tps = tps["reference"], tps["engine fp32"]
    result = {"layers": args.layers, "new_tokens": args.new_tokens, "threads": torch.get_num_threads(),
              "reference_tokens_per_s": ref_tps, "engine_tokens_per_s": eng_tps, "ratio": eng_tps / ref_tps,
              "stream_time_to_first_audio_s": ttfa, "goal_ratio": GOAL_RATIO,
              "rows": {label: {"tokens_per_s": tps[label], "x_fp32_engine": tps[label] / eng_tps,
                               "weight_bytes": module_bytes(eng.model),
                               "body_bytes": module_bytes(eng.model.model.layers)}
                       for label, eng in engines.items()}}
    print(f"reference: {ref_tps:.2f} tokens/s   engine: {eng_tps:.2f} tokens/s   "
          f"ratio: {result['ratio']:.2f}x "
          f"(goal >= {GOAL_RATIO}x: {'met' if result['ratio'] >= GOAL_RATIO else 'NOT met'})")
    print(f"streaming time to first audio: {ttfa:.2f} s")
    print_rows(result, ref_tps)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def print_rows(result: dict, ref_tps: float) -> None:
    """The markdown table: every row's tokens/s, x the fp32 engine and x the published loop."""
    print("\n| path | tokens/s | x fp32 engine | x published loop | body weights | all weights | goal |")
    print("|---|---:|---:|---:|---:|---:|---|")
    print(f"| published loop fp32 | {ref_tps:.2f} | | 1.00x | | | |")
    for label, row in result["rows"].items():
        x = row["x_fp32_engine"]
        goal = "" if label == "engine fp32" else f">= {GOAL_VS_FP32}x fp32: {'met' if x >= GOAL_VS_FP32 else 'NOT met'}"
        print(f"| {label} | {row['tokens_per_s']:.2f} | {x:.2f}x | {row['tokens_per_s'] / ref_tps:.2f}x "
              f"| {human_bytes(row['body_bytes'])} | {human_bytes(row['weight_bytes'])} | {goal} |")


if __name__ == "__main__":
    main()
