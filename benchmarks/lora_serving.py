"""Many voices in one batch: decode throughput with 0, 1, 4 and 16 distinct LoRA adapters, same run.

    python benchmarks/lora_serving.py                       # published width, 4 layers, batch 16, CPU
    python benchmarks/lora_serving.py --new-tokens 48 --repeats 1 --layers 2   # quicker look
    python benchmarks/lora_serving.py --checkpoint tiny --new-tokens 8 --repeats 1   # a dry run of the script

Builds (once, cached) the random-weight checkpoint of the published width that
benchmarks/decode_speed.py uses, 16 random voice packages of rank `--rank` on it
(`rumik_app.voices.tiny`), and times `TTSEngine.generate_batch` on a batch of 16 rows, each
exactly `--new-tokens` tokens (min = max), with:

  none          every row a built-in voice: the plain step, no adapter arithmetic (the reference);
  1 / 4 / 16    the rows spread over that many library voices: per-row LoRA (rumik_app.voices.lora);
  merged        one voice's adapter merged into the weights (W + alpha/r B A), all rows that voice:
                what serving a custom voice costs without per-row adapters (one model per voice).

Runs alternate between the rows so background load hits all alike, and the best of
`--repeats` is reported. Goal: 16 distinct voices at >= 0.7x the no-adapter throughput.
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

from benchmarks.decode_speed import PROMPT_TEXT, build_checkpoint  # noqa: E402
from rumik_app import SynthesisRequest, TTSEngine  # noqa: E402
from rumik_app.checkpoint.load import cache_root, resolve_checkpoint  # noqa: E402
from rumik_app.voices.library import VoiceLibrary  # noqa: E402
from rumik_app.voices.lora import merged_copy  # noqa: E402
from rumik_app.voices.package import base_fingerprint  # noqa: E402
from rumik_app.voices.tiny import build_random_voice  # noqa: E402

GOAL = 0.7
BATCH = 16
VOICES = tuple(f"Voice{i:02d}" for i in range(BATCH))


def build_voices(engine: TTSEngine, checkpoint: Path, rank: int) -> Path:
    """16 random packages of rank `rank` for `checkpoint`, cached (by its fingerprint)."""
    folder = cache_root() / f"bench-voices-{base_fingerprint(checkpoint)[7:23]}-r{rank}"  # by the weights' identity
    for seed, name in enumerate(VOICES):
        if not (folder / name / "voice.json").exists():
            build_random_voice(folder, engine.model, name, checkpoint, rank=rank, seed=seed, scale=0.02)
    return folder


def merged_engine(engine: TTSEngine, folder: Path) -> TTSEngine:
    """A second engine whose weights hold one voice's adapter merged in (no library)."""
    model = merged_copy(engine.model, folder)
    return TTSEngine(model, engine.tokenizer, engine.codec, engine.config, engine.checkpoint_dir)


def batch(voices: list[str], new_tokens: int) -> list[SynthesisRequest]:
    return [SynthesisRequest(PROMPT_TEXT, voice=voice, seed=7 + i, temperature=0.8, top_k=50,
                             min_new_tokens=new_tokens, max_new_tokens=new_tokens) for i, voice in enumerate(voices)]


def rows_of(distinct: int) -> list[str]:
    """BATCH row voices spread over `distinct` library voices (0: built-in voices)."""
    if distinct == 0:
        return [("Ira", "Aisha", "Siya", "Zoya")[i % 4] for i in range(BATCH)]
    return [VOICES[i % distinct] for i in range(BATCH)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--checkpoint", help="time this checkpoint instead (a folder, or tiny: a dry run)")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    checkpoint = resolve_checkpoint(args.checkpoint) if args.checkpoint else build_checkpoint(args.layers)
    engine = TTSEngine.from_pretrained(str(checkpoint), device="cpu", dtype="float32")
    folder = build_voices(engine, checkpoint, args.rank)
    engine.use_voices(VoiceLibrary(folder, base_fingerprint(checkpoint)), capacity=BATCH, rank=args.rank)
    merged = merged_engine(engine, folder / VOICES[0])
    cases = {"none": (engine, rows_of(0)), "1 voice": (engine, rows_of(1)), "4 voices": (engine, rows_of(4)),
             "16 voices": (engine, rows_of(16)), "merged (1 voice)": (merged, rows_of(0))}
    print(f"{engine}; batch {BATCH}; {args.new_tokens} tokens per row; rank {args.rank}; "
          f"{torch.get_num_threads()} threads", flush=True)
    for eng, voices in cases.values():  # warm-up: load the adapters into the bank, touch every path
        eng.generate_batch(batch(voices, 8))
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.repeats):
        for label, (eng, voices) in cases.items():
            start = time.perf_counter()
            eng.generate_batch(batch(voices, args.new_tokens))
            times[label].append(time.perf_counter() - start)
    tps = {label: BATCH * args.new_tokens / min(t) for label, t in times.items()}
    result = {"layers": args.layers, "batch": BATCH, "new_tokens": args.new_tokens, "rank": args.rank,
              "tokens_per_s": tps, "x_none": {label: v / tps["none"] for label, v in tps.items()},
              "bank_bytes": engine.bank.bytes, "goal": GOAL}
    print("| adapters in the batch | tokens/s | x no adapters |\n|---|---:|---:|")
    for label, value in tps.items():
        print(f"| {label} | {value:.1f} | {value / tps['none']:.2f}x |")
    ratio = result["x_none"]["16 voices"]
    print(f"goal: 16 distinct voices >= {GOAL}x the no-adapter throughput -> {ratio:.2f}x "
          f"{'PASS' if ratio >= GOAL else 'FAIL'}; bank {engine.bank.bytes / 2**20:.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
