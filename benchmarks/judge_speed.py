"""Audio judge speed on the CPU: clips per second for DNSMOS, resemblyzer and the IndicConformer stand-in.

    python benchmarks/judge_speed.py                  # 20 espeak-ng clips, onnxruntime on 2 threads, torch on 1
    python benchmarks/judge_speed.py --clips 40 --threads 2 --torch-threads 2

The clips are the English intelligibility prompts (evaluation/prompts/intelligibility_en.jsonl)
spoken by espeak-ng in turn by its four voice variants, at 24 kHz like the benchmark runner's
clips (2.5-4 s each: the typical TTS evaluation sentence). Every judge is loaded and warmed up on
one clip before the clock starts. onnxruntime (DNSMOS, IndicConformer) runs on `--threads`
intra-op threads, torch (resemblyzer's LSTM) on `--torch-threads`: torch's OpenMP threads spin
while they wait, so on a 2-core machine where anything else runs, a 2-thread LSTM measured 10x
slower than a 1-thread one (92 vs 7 ms per 1.6 s partial), where onnxruntime still gained from
its second thread. Rows:

  DNSMOS (speechmos windows)    evaluation.quality.DNSMOS(p808=False), as `evaluation.run --quality`:
                                every 9 s window speechmos scores (a 3 s clip is tiled to 12 s: 3 windows)
  DNSMOS (first window)         the same with max_windows=1 (`--quality-max-windows 1`)
  resemblyzer                   evaluation.speaker.ResemblyzerEncoder.embed, as `--speaker`
  IndicConformer stand-in       evaluation.indicconformer on the tiny ONNX stand-in: the front end,
                                onnxruntime calls and decoding; the real 600M encoder is far slower

Goal: a 100-clip evaluation adds under 60 s on 2 cores for DNSMOS and resemblyzer together.
Times include everything a run does per clip but the audio decoding (clips are in memory).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = ROOT / "evaluation" / "prompts" / "intelligibility_en.jsonl"
VOICES = ("Ira", "Aisha", "Siya", "Zoya")
GOAL_CLIPS, GOAL_SECONDS = 100, 60.0
HINDI_STANDIN = {"pieces": {"hi": ["▁नम", "स्ते"]}, "paths": {"hi": [256, 1, 1, 256, 2]}}


def make_clips(n: int) -> list:
    from evaluation.systems.espeak import espeak_synthesize

    texts = [json.loads(line)["text"] for line in PROMPTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [espeak_synthesize(texts[i % len(texts)], "en", voice=VOICES[i % len(VOICES)]).samples for i in range(n)]


def timed(fn, clips: list) -> float:
    fn(clips[:1])  # warm-up: sessions, numba's first compile, allocator
    start = time.perf_counter()
    fn(clips)
    return time.perf_counter() - start


def judges(threads: int, folder: Path) -> dict:
    from evaluation.indic_standin import build_standin
    from evaluation.indicconformer import IndicConformerJudge
    from evaluation.quality import DNSMOS
    from evaluation.speaker import ResemblyzerEncoder
    from rumik_app.audio import SAMPLE_RATE

    full = DNSMOS(device="cpu", threads=threads, p808=False)
    first = DNSMOS(device="cpu", threads=threads, p808=False, max_windows=1)
    speaker = ResemblyzerEncoder("cpu")
    asr = IndicConformerJudge(str(build_standin(folder, **HINDI_STANDIN)), device="cpu", threads=threads)
    return {
        "DNSMOS (speechmos windows)": lambda c: full.score(c, SAMPLE_RATE),
        "DNSMOS (first window)": lambda c: first.score(c, SAMPLE_RATE),
        "resemblyzer": lambda c: speaker.embed(c, SAMPLE_RATE),
        "IndicConformer stand-in": lambda c: [asr.transcribe(x, SAMPLE_RATE, "hi") for x in c],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=int, default=20, help="clips per judge (default 20)")
    p.add_argument("--threads", type=int, default=2, help="onnxruntime threads (default 2)")
    p.add_argument("--torch-threads", type=int, default=1, help="torch threads (default 1, see above)")
    args = p.parse_args(argv)
    import torch

    from evaluation.audio_io import resample
    from evaluation.quality import windows
    from evaluation.report import markdown_table
    from rumik_app.audio import SAMPLE_RATE

    torch.set_num_threads(args.torch_threads)
    clips = make_clips(args.clips)
    seconds = sum(len(c) for c in clips) / SAMPLE_RATE
    n_windows = sum(len(windows(resample(c, SAMPLE_RATE, 16_000))) for c in clips)
    results = {}
    with tempfile.TemporaryDirectory(prefix="judge_speed_") as tmp:
        for name, fn in judges(args.threads, Path(tmp)).items():
            elapsed = timed(fn, clips)
            results[name] = {"seconds": elapsed, "clips_per_s": len(clips) / elapsed,
                             "per_100_clips_s": GOAL_CLIPS * elapsed / len(clips)}
    print(f"{len(clips)} espeak-ng clips, {seconds / len(clips):.1f} s of audio each on average, {n_windows} "
          f"DNSMOS windows in all; onnxruntime {args.threads} threads, torch {args.torch_threads}")
    print(markdown_table(["judge", "clips/s", f"s per {GOAL_CLIPS} clips"],
                         [[k, v["clips_per_s"], v["per_100_clips_s"]] for k, v in results.items()], digits=2))
    for dnsmos in ("DNSMOS (speechmos windows)", "DNSMOS (first window)"):
        total = results[dnsmos]["per_100_clips_s"] + results["resemblyzer"]["per_100_clips_s"]
        verdict = "PASS" if total < GOAL_SECONDS else "FAIL"
        print(f"goal: {dnsmos} + resemblyzer on {GOAL_CLIPS} clips under {GOAL_SECONDS:.0f} s "
              f"-> {total:.0f} s {verdict}")
    results["windows"], results["clips"] = n_windows, len(clips)
    return results


if __name__ == "__main__":
    main()
