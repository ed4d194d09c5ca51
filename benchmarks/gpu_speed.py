"""GPU decode speed at the published size: fast path vs the published loop, side by side.

    python benchmarks/gpu_speed.py                          # CUDA, real width, 36 layers, bf16 (~5 min)
    python benchmarks/gpu_speed.py --no-compile             # the fast path without CUDA graphs
    python benchmarks/gpu_speed.py --smoke --device cpu     # a seconds-long dry run of every section
    python benchmarks/gpu_speed.py --quantize int4          # the same table on int8 / int4 / nf4 weights

Builds the network on the device with random weights (no download, no 6.8 GB file): the
published config (hidden 2048, 16/4 heads x 128, FFN 11008, 36 layers 3 sliding : 1 full,
vocabulary 277,404) in bf16, the real-size Mimi decoder (random), and a tokenizer with the
real id layout from a tiny checkpoint. Then, in one run:

  batch 1     tokens/s and real-time factor (compute s per audio s; 100 tokens = 1 s) of the
              fast path (compiled: CUDA graphs), the eager reference sampler and the
              published loop (benchmarks/published_loop.py)
  streaming   time to first audio (prefill + 2 frames + Mimi decode of them)
  batch 8/32  throughput in seconds of audio per wall second

Goals on an H200: batch 1 >= 500 tokens/s (RTF <= 0.2), time to first audio <= 150 ms,
batch 32 >= 50x real time. `--quantize int8|int4|nf4` quantises the body's linears after building
(`rumik_app.model.quantize`; the fast path, the reference and the published loop all read the
quantised weights) and puts the weight bytes before and after in the header. Every section
catches its own failure and reports it, so one problem never loses the rest of the table. Results also go to `--json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.published_loop import SEED, TEMPERATURE, TOP_K, reference_generate  # noqa: E402
from rumik_app import SynthesisRequest, TTSEngine  # noqa: E402
from rumik_app.checkpoint.load import auto_dtype, cache_root, load_tokenizer  # noqa: E402
from rumik_app.checkpoint.tiny import TinySpec, build_tiny_checkpoint, layer_types  # noqa: E402
from rumik_app.cli_args import QuantizeError, add_engine_arguments  # noqa: E402
from rumik_app.model.codec import MimiCodec  # noqa: E402
from rumik_app.model.config import RumikOSSConfig  # noqa: E402
from rumik_app.model.quantize import check_ready, quantize_model  # noqa: E402

GOALS = {"batch1_tokens_per_s": 500.0, "time_to_first_audio_s": 0.150, "batch32_x_real_time": 50.0}
PROMPT_TEXT = "आज की मीटिंग बहुत अच्छी रही, and everyone loved the new idea. <chuckle> चलो, कॉफ़ी पीते हैं!"
REAL = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=4, head_dim=128, intermediate_size=11008,
            num_hidden_layers=36, logit_scale=0.125)
SMOKE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
             num_hidden_layers=4, logit_scale=0.25)


def layout_checkpoint() -> Path:
    """A tiny checkpoint with the real vocabulary: tokenizer, token ids and config extras."""
    path = cache_root() / "bench-gpu-layout"
    if not (path / "codec" / "model.safetensors").exists():
        build_tiny_checkpoint(path, TinySpec(vocab_size=277_404, logit_scale=0.125))
    return path


def build_engine(device: torch.device, dtype: torch.dtype, shape: dict, compile: bool, real_codec: bool) -> TTSEngine:
    """The published architecture with random weights, built directly on `device`."""
    from transformers import MimiConfig, MimiModel

    from rumik_app.model.lm import RumikOSSForCausalLM

    path = layout_checkpoint()
    config = RumikOSSConfig.from_file(path)
    for key, value in shape.items():
        setattr(config.lm, key, value)
    config.lm.layer_types = layer_types(shape["num_hidden_layers"])
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = RumikOSSForCausalLM(config.lm).eval()
            mimi = MimiModel(MimiConfig()) if real_codec else None
    finally:
        torch.set_default_dtype(previous)
    if mimi is None:
        from rumik_app.checkpoint.load import load_codec

        mimi = load_codec(path, device)
    codec = MimiCodec(mimi.float().eval(), config.layout.num_quantizers)
    return TTSEngine(model, load_tokenizer(path, config), codec, config, path, compile=compile)


def request(tokens: int, seed: int = SEED) -> SynthesisRequest:
    return SynthesisRequest(PROMPT_TEXT, seed=seed, temperature=TEMPERATURE, top_k=TOP_K,
                            min_new_tokens=tokens, max_new_tokens=tokens)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def section(results: dict, name: str, fn) -> None:
    """Run one part of the table; a failure is reported and the rest still runs."""
    try:
        results[name] = fn()
        print(f"{name}: {results[name]}", flush=True)
    except Exception as exc:  # noqa: BLE001 - unattended run: keep going, say what failed
        results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{name}: FAILED\n{traceback.format_exc()}", flush=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_arguments(parser, backend=False)  # --device --dtype --compile, as every entry point
    parser.set_defaults(device="cuda", compile=True)
    parser.add_argument("--tokens", type=int, default=500, help="tokens per row (min = max); 100 = 1 s of audio")
    parser.add_argument("--published-tokens", type=int, default=200, help="tokens for the (slow) published loop")
    parser.add_argument("--batches", default="8,32", help="batch sizes for the throughput rows")
    parser.add_argument("--smoke", action="store_true", help="tiny width, 4 layers, few tokens: checks the script")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("unmeasured: no CUDA device here (use --smoke --device cpu for a dry run)")
        return {"error": "no CUDA device"}
    dtype = auto_dtype(device, args.dtype)
    try:
        check_ready(args.quantize, device, dtype)  # a missing torchao / bitsandbytes: before building 7 GB
    except QuantizeError as exc:
        parser.error(str(exc))
    tokens = 24 if args.smoke else args.tokens
    published_tokens = 16 if args.smoke else args.published_tokens
    batches = [int(b) for b in args.batches.split(",") if b]
    start = time.perf_counter()
    engine = build_engine(device, dtype, SMOKE if args.smoke else REAL, args.compile, real_codec=not args.smoke)
    lm = engine.config.lm
    params = sum(p.numel() for p in engine.model.parameters())
    weights = quantize_model(engine.model, args.quantize, device).describe()
    results: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "dtype": str(dtype), "layers": lm.num_hidden_layers, "hidden": lm.hidden_size,
                     "parameters": params, "compile": args.compile, "tokens": tokens,
                     "quantize": args.quantize, "weights": weights}
    print(f"built {params / 1e9:.2f} B parameters on {results['device']} in {time.perf_counter() - start:.0f} s",
          flush=True)
    reference = TTSEngine(engine.model, engine.tokenizer, engine.codec, engine.config, engine.checkpoint_dir,
                          decoder="reference")
    prompt_len = len(engine.prompt_ids(request(tokens)))
    for batch in [1, *batches]:
        section(results, f"compile_batch{batch}_s",
                lambda b=batch: round(engine.warmup(batch=b, max_new_tokens=tokens, prompt_len=prompt_len), 1))

    def tokens_per_s(eng: TTSEngine, n: int) -> dict:
        eng.generate_batch([request(16)])
        seconds = timed(lambda: eng.generate_batch([request(n)]), device)
        return {"tokens_per_s": round(n / seconds, 1), "rtf": round(seconds / (n / 100), 3)}

    section(results, "batch1_fast", lambda: tokens_per_s(engine, tokens))
    section(results, "batch1_reference_eager", lambda: tokens_per_s(reference, min(tokens, 200)))

    def published() -> dict:
        ids = engine.prompt_ids(request(published_tokens))
        reference_generate(engine, ids, 8)
        seconds = timed(lambda: reference_generate(engine, ids, published_tokens), device)
        return {"tokens_per_s": round(published_tokens / seconds, 1),
                "rtf": round(seconds / (published_tokens / 100), 3)}

    section(results, "batch1_published", published)

    def first_audio() -> dict:
        times = []
        for seed in range(3):
            sync(device)
            begin = time.perf_counter()
            stream = engine.stream(request(tokens, seed))
            next(stream)
            times.append(time.perf_counter() - begin)
            stream.close()
        return {"time_to_first_audio_s": round(min(times), 4)}

    section(results, "streaming", first_audio)

    def throughput(batch: int) -> dict:
        reqs = [request(tokens, SEED + i) for i in range(batch)]
        seconds = timed(lambda: engine.generate_batch(reqs), device)
        audio_s = batch * tokens / 100
        return {"x_real_time": round(audio_s / seconds, 1), "tokens_per_s": round(batch * tokens / seconds, 1)}

    for batch in batches:
        section(results, f"batch{batch}", lambda b=batch: throughput(b))
    print_table(results, batches)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


def print_table(results: dict, batches: list[int]) -> None:
    def get(name: str, key: str):
        value = results.get(name, {})
        return value.get(key, "failed") if isinstance(value, dict) else value

    print(f"\n{results['device']}, {results['dtype']}, {results['layers']} layers x {results['hidden']}, "
          f"compile={results['compile']}, quantize={results['quantize']}: {results['weights']}")
    print("| measure | fast path | eager reference | published loop | goal |")
    print("|---|---|---|---|---|")
    print(f"| batch 1 tokens/s | {get('batch1_fast', 'tokens_per_s')} "
          f"| {get('batch1_reference_eager', 'tokens_per_s')} "
          f"| {get('batch1_published', 'tokens_per_s')} | >= {GOALS['batch1_tokens_per_s']:.0f} |")
    print(f"| batch 1 RTF | {get('batch1_fast', 'rtf')} | {get('batch1_reference_eager', 'rtf')} "
          f"| {get('batch1_published', 'rtf')} | <= 0.2 |")
    print(f"| time to first audio (s) | {get('streaming', 'time_to_first_audio_s')} | | | "
          f"<= {GOALS['time_to_first_audio_s']} |")
    for batch in batches:
        goal = f">= {GOALS['batch32_x_real_time']:.0f}x" if batch == 32 else ""
        print(f"| batch {batch} x real time | {get(f'batch{batch}', 'x_real_time')} | | | {goal} |")


if __name__ == "__main__":
    main()
