"""How well the PerthNet watermark (evaluation.watermark) survives what speech goes through: detection rates.

    python benchmarks/watermark_robustness.py               # 50 espeak-ng clips (en and hi), about 4 minutes
    python benchmarks/watermark_robustness.py --clips 10 --json rates.json

The clips are the English and Hindi sentences of evaluation/prompts/intelligibility*.jsonl, half
each, spoken by espeak-ng through evaluation.systems.espeak in turn by its four voice variants and
three paces, at 24 kHz (the model's rate). Each clip is scored clean and after `Watermarker.apply`,
untouched and after each attack: evaluation.watermark.ATTACKS (mp3 128 kbps, resampling via
16 kHz, 8 kHz mu-law telephone audio), then the harder ones below. A row gives the true positive
rate (marked clips detected), the false positive rate (clean clips detected), the median score of
the marked clips and the highest of the clean ones (THRESHOLD 0.5 between them).
A measurement, not a test: docs/watermark.md quotes its table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluation.audio_io import resample  # noqa: E402
from evaluation.watermark import ATTACKS, Attack, Watermarker, detection_rates, mp3  # noqa: E402

PROMPTS = ("intelligibility.jsonl", "intelligibility_en.jsonl")
VOICES = ("Ira", "Aisha", "Siya", "Zoya")
PACES = ("steady", "fast", "slow")


def noise(wave: np.ndarray, _rate: int, snr_db: float = 20.0) -> np.ndarray:
    """Seeded white noise `snr_db` below the clip's power."""
    power = np.mean(wave**2) / 10 ** (snr_db / 10)
    return wave + np.random.default_rng(0).normal(0, np.sqrt(power), wave.size).astype(np.float32)


def faster(wave: np.ndarray, rate: int, factor: float = 1.1) -> np.ndarray:
    """Played `factor` times faster (pitch up too): the samples taken as if at rate * factor."""
    return resample(wave, round(rate * factor), rate)


HARDER: dict[str, Attack] = {
    "mp3 64 kbps": lambda wave, rate: mp3(wave, rate, "64k"),
    "white noise at 20 dB SNR": noise,
    "10% faster": faster,
}


def sentences(language: str) -> list[str]:
    rows = [json.loads(line) for name in PROMPTS
            for line in (ROOT / "evaluation" / "prompts" / name).read_text(encoding="utf-8").splitlines() if line]
    return sorted({row["text"] for row in rows if row["language"] == language})


def make_clips(n: int) -> list[np.ndarray]:
    """n espeak-ng clips at 24 kHz, alternately English and Hindi, voices and paces in turn."""
    from evaluation.systems.espeak import espeak_synthesize

    texts = {language: sentences(language) for language in ("en", "hi")}
    clips = []
    for i in range(n):
        language = ("en", "hi")[i % 2]
        text = texts[language][(i // 2) % len(texts[language])]
        clips.append(espeak_synthesize(text, language, voice=VOICES[i % 4], pace=PACES[(i // 4) % 3]).samples)
    return clips


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=int, default=50, help="clips, each scored clean and watermarked (default 50)")
    p.add_argument("--json", type=Path, help="also write the rates here")
    args = p.parse_args(argv)
    from evaluation.report import markdown_table
    from rumik_app.audio import SAMPLE_RATE

    marker = Watermarker.load()
    clean = make_clips(args.clips)
    marked = [marker.apply(wave, SAMPLE_RATE) for wave in clean]
    rates = detection_rates(clean, marked, SAMPLE_RATE, {**ATTACKS, **HARDER}, marker)
    seconds = sum(w.size for w in clean) / SAMPLE_RATE / len(clean)
    snr = np.median([10 * np.log10(np.sum(c**2) / np.sum((m - c) ** 2)) for c, m in zip(clean, marked, strict=True)])
    print(f"{len(clean)} espeak-ng clips (en, hi) at {SAMPLE_RATE} Hz, {seconds:.1f} s each on average; "
          f"median signal-to-watermark ratio {snr:.1f} dB")
    print(markdown_table(["attack", "true positive", "false positive", "median marked score", "max clean score"],
                         [(name, f"{r.true_positive:.0%}", f"{r.false_positive:.0%}", f"{r.marked_median:.3f}",
                           f"{r.clean_max:.3f}") for name, r in rates.items()]))
    result = {"clips": len(clean), "snr_db": float(snr), "rates": {k: vars(v) for k, v in rates.items()}}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
