"""The watermark's detector command, the attacks it is measured against, and its share of a benchmark run.

    python -m evaluation.watermark out/*.wav         # one line a file: path, watermarked|clean, score
    rumik watermark detect out/*.wav                 # the same command

    from evaluation.watermark import Watermarker, detection_rates, ATTACKS
    marker = Watermarker.load()                      # rumik_app.watermark.marker's, from resemble-perth's wheel
    marker.detect(wave, 24000)                       # score in [0, 1]; >= THRESHOLD (0.5) means watermarked
    rates = detection_rates(clean, marked, 24000)    # per attack: true and false positive rates
    scores = clip_scores(manifest, out)              # evaluation.run: {(run, id): {"watermark_score", "watermarked"}}

The mark itself (PerthNet, applied by the engines to library voices' audio, docs/watermark.md)
lives in the core, rumik_app.watermark; this module only reads it. What survives it and what
does not (mp3, resampling, 8 kHz mu-law) is measured by benchmarks/watermark_robustness.py with
`detection_rates`; docs/watermark.md has the table. The command reads at most MAX_SECONDS of
audio a file (refused from the header, before decoding) and exits 2 when any file could not be read.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from evaluation.audio_io import LOCAL_MAX_SECONDS, AudioLoadError, load_audio, resample
from rumik_app.errors import RumikError, report_user_error
from rumik_app.watermark import WatermarkError
from rumik_app.watermark.marker import PERTH_RATE, THRESHOLD, Watermarker, fit, shared_watermarker

__all__ = ["ATTACKS", "CLIP_COLUMNS", "MAX_SECONDS", "SUMMARY_COLUMNS", "THRESHOLD", "Attack", "DetectionRates",
           "Watermarker", "WatermarkError", "clip_scores", "detection_rates", "main", "mp3", "mu_law_8k", "pool",
           "resampled", "score_file"]
MAX_SECONDS = 600.0  # the command's limit per file
FFMPEG_TIMEOUT_S = 120


# ---------------------------------------------------------------- robustness: attacks and detection rates


def _ffmpeg(*args: str | Path) -> None:
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise WatermarkError("the mp3 attack needs ffmpeg: apt-get install ffmpeg")
    proc = subprocess.run([exe, "-nostdin", "-v", "error", "-y", *map(str, args)], capture_output=True,
                          timeout=FFMPEG_TIMEOUT_S)
    if proc.returncode != 0:
        raise WatermarkError(f"ffmpeg failed: {proc.stderr.decode(errors='replace').strip()[-300:]}")


def mp3(wave: np.ndarray, sample_rate: int, bitrate: str = "128k") -> np.ndarray:
    """`wave` through an mp3 encode (LAME, constant `bitrate`) and decode (ffmpeg's, gapless), same length."""
    with tempfile.TemporaryDirectory() as tmp:
        source, encoded, decoded = Path(tmp, "in.wav"), Path(tmp, "out.mp3"), Path(tmp, "decoded.wav")
        sf.write(source, wave, sample_rate, subtype="FLOAT")
        _ffmpeg("-i", source, "-c:a", "libmp3lame", "-b:a", bitrate, encoded)
        _ffmpeg("-i", encoded, "-c:a", "pcm_f32le", "-ar", str(sample_rate), decoded)
        return fit(sf.read(decoded, dtype="float32")[0], wave.size)


def resampled(wave: np.ndarray, sample_rate: int, via: int = 16_000) -> np.ndarray:
    """`wave` down to `via` Hz and back."""
    return fit(resample(resample(wave, sample_rate, via), via, sample_rate), wave.size)


def mu_law_8k(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """`wave` as telephone audio: 8 kHz, 8-bit mu-law (a WAV in memory), and back."""
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(resample(wave, sample_rate, 8000), -1, 1), 8000, format="WAV", subtype="ULAW")
    buffer.seek(0)
    phone, _rate = sf.read(buffer, dtype="float32")
    return fit(resample(phone, 8000, sample_rate), wave.size)


Attack = Callable[[np.ndarray, int], np.ndarray]
ATTACKS: dict[str, Attack] = {
    "none": lambda wave, _rate: wave,
    "mp3 128 kbps": mp3,
    "resample via 16 kHz": resampled,
    "8 kHz mu-law": mu_law_8k,
}


@dataclass(frozen=True)
class DetectionRates:
    """Of `marked` watermarked clips the share detected (true positives), of `clean` ones the share
    wrongly detected (false positives); the median marked score and the highest clean one show the margin."""

    true_positive: float
    false_positive: float
    marked: int
    clean: int
    marked_median: float
    clean_max: float


def detection_rates(clean_waves: Sequence[np.ndarray], marked_waves: Sequence[np.ndarray], sample_rate: int,
                    attacks: Mapping[str, Attack] = ATTACKS,
                    watermarker: Watermarker | None = None) -> dict[str, DetectionRates]:
    """Each attack's DetectionRates: every clip attacked, then scored against THRESHOLD."""
    marker = watermarker or Watermarker.load()
    rates = {}
    for name, attack in attacks.items():
        marked = np.array([marker.detect(attack(w, sample_rate), sample_rate) for w in marked_waves])
        clean = np.array([marker.detect(attack(w, sample_rate), sample_rate) for w in clean_waves])
        rates[name] = DetectionRates(float(np.mean(marked >= THRESHOLD)), float(np.mean(clean >= THRESHOLD)),
                                     marked.size, clean.size, float(np.median(marked)), float(np.max(clean)))
    return rates


# ---------------------------------------------------------------- the benchmark runner's columns

CLIP_COLUMNS = ("watermark_score", "watermarked")


def score_file(marker: Watermarker, path: str | Path, max_seconds: float = MAX_SECONDS) -> float:
    """The detector's score for an audio file, read at perth's 32 kHz (AudioLoadError, WatermarkError)."""
    return marker.detect(load_audio(path, PERTH_RATE, max_seconds=max_seconds), PERTH_RATE)


def clip_scores(manifest: Sequence[dict], out: Path, marker: Watermarker | None = None) -> dict[tuple[int, str], dict]:
    """evaluation.run's per-clip columns: the detector's score and its verdict for every clip with
    audio (a manifest line without an error), {(run, id): {"watermark_score", "watermarked"}}."""
    marker = marker or shared_watermarker()
    scores = {}
    for rec in manifest:
        if rec["error"] is None:
            try:
                score = score_file(marker, out / rec["path"], LOCAL_MAX_SECONDS)
            except (AudioLoadError, WatermarkError):  # the clip's own error is in the manifest already
                continue
            scores[(rec["run"], rec["id"])] = {"watermark_score": round(score, 4), "watermarked": score >= THRESHOLD}
    return scores


SUMMARY_COLUMNS = ("watermark_scored", "watermarked_clips", "watermarked_fraction")


def pool(rows: Sequence[dict]) -> dict:
    """A summary row's SUMMARY_COLUMNS: clips the detector scored, how many it calls watermarked,
    and that share (None when it scored none)."""
    verdicts = [r["watermarked"] for r in rows if r.get("watermarked") is not None]
    marked = sum(verdicts)
    return {"watermark_scored": len(verdicts), "watermarked_clips": marked,
            "watermarked_fraction": marked / len(verdicts) if verdicts else None}


# ---------------------------------------------------------------- the command


def main(argv: Sequence[str] | None = None) -> int:
    """Score audio files: one `PATH<TAB>watermarked|clean<TAB>SCORE` line each; 2 when any file failed."""
    parser = argparse.ArgumentParser(description="Say whether audio files carry the PerthNet watermark "
                                                 f"(score >= {THRESHOLD}).")
    parser.add_argument("files", nargs="+", help="audio files (wav, flac, ogg, mp3, ...)")
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS,
                        help=f"refuse files longer than this (default {MAX_SECONDS:g})")
    parser.add_argument("--device", default="cpu", help="torch device for the network (default cpu)")
    args = parser.parse_args(argv)
    try:
        marker = Watermarker.load(args.device)
    except RumikError as exc:
        return report_user_error(exc)
    status = 0
    for path in args.files:
        try:
            score = score_file(marker, path, args.max_seconds)
        except (AudioLoadError, WatermarkError) as exc:
            status = report_user_error(exc if isinstance(exc, AudioLoadError) else f"{path}: {exc}")
            continue
        print(f"{path}\t{'watermarked' if score >= THRESHOLD else 'clean'}\t{score:.3f}", flush=True)
    return status

if __name__ == "__main__":
    sys.exit(main())
