"""Word-timestamp cost: how long aligning a synthesis's words takes beside synthesising it (CPU).

    python benchmarks/align_speed.py                           # real width + vocabulary, 4 layers, 2 sentences
    python benchmarks/align_speed.py --sentences 3 --seconds 3
    python benchmarks/align_speed.py --checkpoint /path/to/ckpt  # any checkpoint (the tests pass the tiny one)

Synthesises a few English sentences with the engine on a random-weight checkpoint of the
published width and vocabulary (hidden 2048, vocab 277,404) at reduced depth, built once and
cached as benchmarks/decode_speed.py's is, each to a fixed length (`--seconds`: min = max new
tokens, so the random stop head never ends one early). Then, on the same audio, times:

  pocketsphinx + refine       evaluation.aligners.PocketSphinxAligner on the sentence's words, then
                              rumik_app.align.refine.refine_boundaries (what `timestamps=True` runs
                              for English)
  pocketsphinx + refine       the same on espeak-ng speaking the same sentences (24 kHz): the cost
  (espeak-ng speech)          of an alignment that succeeds
  IndicConformer stand-in     evaluation.aligners.IndicConformerAligner on the tiny ONNX stand-in
  + refine                    (evaluation.indic_standin) with Hindi words: the front end, the
                              onnxruntime calls and the CTC Viterbi; the real 600M encoder is far
                              slower (about what evaluation.asr's IndicConformer judge costs)

and prints seconds of work per second of audio for each, and each aligner's cost as a share of
synthesis (per second of audio). Goal: alignment <= 5 % of synthesis time. The audio of a random
model is not speech: pocketsphinx usually finds no path for the words through it and says so
(printed), but only after searching every frame, so the time is still what an alignment costs
(the espeak-ng row shows a successful one); the stand-in's path ignores the audio.

Four layers understate the real model's synthesis time (it has far more), so the share printed
here is an upper bound of the real one. Each aligner is loaded and warmed up before the clock
starts; each row is the best of `--repeats`.
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

GOAL_SHARE = 0.05
SENTENCES = (
    "The morning train was late again, so we walked along the river to the old market.",
    "Please send the report to my sister before dinner, and call the doctor about the ticket.",
    "Summer music in the garden made every family happy, even the little rabbit by the window.",
)
HINDI_WORDS = ["नमस्ते", "दुनिया", "नमस्ते", "दुनिया"]
HINDI_STANDIN = {"pieces": {"hi": ["▁नम", "स्ते", "▁दु", "निया"]},
                 "paths": {"hi": [256, 1, 2, 256, 3, 4, 256, 1, 2, 256, 3, 4]}}
DEFAULT_SECONDS = 2.5


def synthesise(checkpoint: Path, sentences: list[str], seconds: float) -> tuple[list, float]:
    """([(samples [N], rate, text)] per sentence, total synthesis seconds)."""
    from rumik_app import SynthesisRequest, TTSEngine

    engine = TTSEngine.from_pretrained(str(checkpoint), device="cpu")
    tokens = engine.max_new_tokens_for(seconds)
    engine.synthesize(SynthesisRequest(sentences[0], seed=0, min_new_tokens=8, max_new_tokens=8))  # warm-up
    clips, total = [], 0.0
    for i, text in enumerate(sentences):
        start = time.perf_counter()
        audio = engine.synthesize(SynthesisRequest(text, seed=i, min_new_tokens=tokens, max_new_tokens=tokens))
        total += time.perf_counter() - start
        clips.append((audio.samples, audio.sample_rate, text))
    return clips, total


def time_aligner(aligner, clips: list, words_of, language: str, repeats: int) -> tuple[float, str | None]:
    """(best total seconds over the clips, the first AlignmentError's message or None)."""
    from rumik_app.align import AlignmentError
    from rumik_app.align.refine import refine_boundaries

    error = None

    def run_all() -> float:
        nonlocal error
        start = time.perf_counter()
        for samples, rate, text in clips:
            try:
                spans = aligner.align(samples, rate, words_of(text), language)
                refine_boundaries(samples, rate, spans)
            except AlignmentError as exc:
                error = error or str(exc)
        return time.perf_counter() - start

    run_all()  # warm-up: decoders, sessions, the dictionary's added words
    return min(run_all() for _ in range(repeats)), error


def aligners(folder: Path) -> dict:
    """name -> (aligner, words of a sentence, language)."""
    from evaluation.aligners import IndicConformerAligner, PocketSphinxAligner
    from evaluation.indic_standin import build_standin

    standin = build_standin(folder, HINDI_STANDIN["pieces"], HINDI_STANDIN["paths"])
    sphinx = PocketSphinxAligner(None)
    return {"pocketsphinx + refine": (sphinx, str.split, "en", False),
            "pocketsphinx + refine (espeak-ng speech)": (sphinx, str.split, "en", True),
            "IndicConformer stand-in + refine": (IndicConformerAligner(str(standin), device="cpu", threads=1),
                                                 lambda _text: HINDI_WORDS, "hi", False)}


def espeak_clips(sentences: list[str]) -> list:
    """[(samples [N], rate, text)]: espeak-ng saying each sentence (24 kHz)."""
    from evaluation.systems.espeak import espeak_synthesize

    return [(audio.samples, audio.sample_rate, text)
            for text in sentences for audio in [espeak_synthesize(text, "en", voice="Ira")]]


def print_table(result: dict) -> None:
    synth = result["synthesis_s_per_audio_s"]
    print("\n| step | s per audio s | share of synthesis | goal |")
    print("|---|---:|---:|---|")
    print(f"| synthesis ({result['checkpoint_name']}) | {synth:.3f} | | |")
    for name, row in result["aligners"].items():
        met = "met" if row["share_of_synthesis"] <= GOAL_SHARE else "NOT met"
        print(f"| {name} | {row['s_per_audio_s']:.4f} | {100 * row['share_of_synthesis']:.2f} % "
              f"| <= {100 * GOAL_SHARE:g} %: {met} |")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="layers of the real-width random checkpoint")
    parser.add_argument("--checkpoint", default=None, help="use this checkpoint instead of building one")
    parser.add_argument("--sentences", type=int, default=2, help=f"how many of the {len(SENTENCES)} sentences")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help="audio per sentence")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.checkpoint:
        checkpoint = Path(args.checkpoint)
    else:  # decode_speed.py's real-width checkpoint and its cache (that module imports torch: loaded here)
        from benchmarks.decode_speed import build_checkpoint

        checkpoint = build_checkpoint(args.layers)
    sentences = list(SENTENCES[: max(1, min(args.sentences, len(SENTENCES)))])
    clips, synth_s = synthesise(checkpoint, sentences, args.seconds)
    audio_s = sum(len(samples) / rate for samples, rate, _ in clips)
    result = {"checkpoint_name": checkpoint.name, "sentences": len(clips), "audio_s": audio_s,
              "synthesis_s": synth_s, "synthesis_s_per_audio_s": synth_s / audio_s, "aligners": {}}
    spoken = espeak_clips(sentences)
    with tempfile.TemporaryDirectory(prefix="align_speed_") as tmp:
        for name, (aligner, words_of, language, espeak) in aligners(Path(tmp)).items():
            timed = spoken if espeak else clips
            seconds, error = time_aligner(aligner, timed, words_of, language, args.repeats)
            per_audio_s = seconds / sum(len(samples) / rate for samples, rate, _ in timed)
            result["aligners"][name] = {"s": seconds, "s_per_audio_s": per_audio_s, "error": error,
                                        "share_of_synthesis": per_audio_s / result["synthesis_s_per_audio_s"]}
            if error:
                print(f"  {name}: {error} (timed all the same: the search ran to the end)", flush=True)
    print(f"{len(clips)} sentences, {audio_s:.1f} s of audio, synthesis {synth_s:.1f} s ({checkpoint})")
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
