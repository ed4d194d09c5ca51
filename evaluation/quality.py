"""DNSMOS P.835 audio quality (SIG, BAK, OVRL) and P.808 MOS, with the ONNX models that ship
inside the `speechmos` wheel (docs/ARCHITECTURE.md §8). Works offline; nothing is downloaded.

    from evaluation.quality import DNSMOS
    judge = DNSMOS()                          # loaded once; DNSMOS(device="cuda") on onnxruntime-gpu
    [s] = judge.score([samples], 24000)       # samples: float32 [N] mono; any rate (resampled to 16 kHz)
    [s] = judge.score(["clip.wav"])           # a file: loaded straight to 16 kHz, as librosa.load(path, sr=16000)
    s.ovrl, s.sig, s.bak, s.p808              # MOS on 1-5

CLI (one JSONL row per clip: clip, sig, bak, ovrl, p808)::

    python -m evaluation.quality a.wav b.wav --out dnsmos.jsonl [--personalized] [--device cpu] [--threads 2]

Scores equal speechmos 0.0.1.1's own `speechmos.dnsmos.run` on the same audio at 16 kHz
(tests/evaluation/test_quality.py compares them), because every step is the same:
- a clip is a file path, an `Audio` at its own rate (`evaluation.audio_io.load_native`) or
  samples at a named rate, converted once to 16 kHz by the one resampler (soxr HQ), as the
  official script and speechmos's users load with `librosa.load(path, sr=16000)`
  (tests/evaluation/test_resample_reference.py: within 0.02 OVRL of that pipeline at 16-48 kHz);
- a clip shorter than a window is tiled by doubling (`np.append(a, a)`) until it fills one;
- windows of 9.01 s (144,160 samples) start every second, `audio[int(i * 16000):
  int((i + 9.01) * 16000)]`; float rounding makes that slice one sample short for some i
  (7-23, 119-122, ...) and speechmos skips those windows, so we do too;
- P.835 reads the raw window; P.808 reads librosa's 120-band mel power of the window minus its
  last 160 samples (n_fft 321, hop 160), `(power_to_db(mel, ref=max) + 40) / 40`, [900, 120];
- the raw P.835 outputs go through DNSMOS's polynomials; a clip's score is the plain mean over
  its windows.
What is ours: one onnxruntime session per model, loaded once, windows of many clips batched
into one call, the provider (CPU or CUDA) and thread count chosen, and clipping of samples to
[-1, 1] (speechmos refuses anything outside; resampling can overshoot by a hair).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from evaluation.audio_io import LOCAL_MAX_SECONDS, ClipSource, at_rate, load_audio
from evaluation.onnx_session import check_io, open_session
from evaluation.report import markdown_table, write_jsonl
from rumik_app.errors import RumikError, user_errors

MODEL_RATE = 16_000
WINDOW_SECONDS = 9.01  # speechmos's INPUT_LENGTH
WINDOW_SAMPLES = int(WINDOW_SECONDS * MODEL_RATE)  # 144,160
HOP_SAMPLES = MODEL_RATE  # windows start every second
P808_TRIM = 160  # P.808 reads the window without its last 160 samples: 900 mel frames
P808_MEL = {"n_fft": 321, "hop_length": 160, "n_mels": 120}
P808_DB_OFFSET = 40.0
# Windows per onnxruntime call (0.6 MB of input each). On the CPU batching saves nothing (a window
# is ~240 ms of convolutions on 2 threads, batched or not) and large batches fall out of cache.
BATCH_WINDOWS = 4
PACKAGE = "speechmos"
PACKAGE_PIN = "speechmos==0.0.1.1"
MODEL_FILES = {False: "dnsmos_models/sig_bak_ovr.onnx", True: "pdnsmos_models/sig_bak_ovr.onnx"}
P808_FILE = "dnsmos_models/model_v8.onnx"
INPUT, OUTPUT = "input_1", "Identity:0"
# DNSMOS's mapping of the raw P.835 outputs to MOS (np.poly1d coefficients, highest power first),
# copied from speechmos.dnsmos.DNSMOS.get_polyfit_val: {personalized: (sig, bak, ovrl)}.
POLYNOMIALS = {
    False: ([-0.08397278, 1.22083953, 0.0052439], [-0.13166888, 1.60915514, -0.39604546],
            [-0.06766283, 1.11546468, 0.04602535]),
    True: ([-0.01019296, 0.02751166, 1.19576786, -0.24348726], [-0.04976499, 0.44276479, -0.1644611, 0.96883132],
           [-0.00533021, 0.005101, 1.18058466, -0.11236046]),
}
MOS_MIN, MOS_MAX = 1.0, 5.0


class QualityError(RumikError, RuntimeError):
    """The quality judge cannot load or cannot score a clip; the message says why and how to fix it."""


@dataclass(frozen=True)
class QualityScores:
    """DNSMOS of one clip (MOS on 1-5): P.835 signal, background, overall; P.808 overall."""

    sig: float
    bak: float
    ovrl: float
    p808: float | None

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def model_dir() -> Path:
    """The installed speechmos package folder (found without importing it: its `dnsmos` module
    imports requests and librosa at import time, and we need only its model files)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise QualityError(f"The DNSMOS models come with the speechmos package, which is not installed; "
                           f"run: pip install {PACKAGE_PIN}")
    return Path(list(spec.submodule_search_locations)[0])


def windows(samples: np.ndarray) -> list[np.ndarray]:
    """speechmos's windows of a 16 kHz clip [N]: each [WINDOW_SAMPLES] (see the module docstring)."""
    audio = np.asarray(samples)
    if audio.size == 0:
        raise QualityError("DNSMOS cannot score an empty clip.")
    while len(audio) < WINDOW_SAMPLES:
        audio = np.append(audio, audio)
    count = int(np.floor(len(audio) / MODEL_RATE) - WINDOW_SECONDS) + 1
    # The float arithmetic of the slice bounds is speechmos's: it decides which windows are dropped.
    cut = [audio[int(i * HOP_SAMPLES): int((i + WINDOW_SECONDS) * HOP_SAMPLES)] for i in range(count)]
    return [w for w in cut if len(w) >= WINDOW_SAMPLES]


def p808_features(window: np.ndarray) -> np.ndarray:
    """P.808 input of one window [WINDOW_SAMPLES]: scaled log-mel [900, 120] float32."""
    import librosa

    mel = librosa.feature.melspectrogram(y=window[:-P808_TRIM], sr=MODEL_RATE, **P808_MEL)
    return ((librosa.power_to_db(mel, ref=np.max) + P808_DB_OFFSET) / P808_DB_OFFSET).T.astype(np.float32)


class DNSMOS:
    """The DNSMOS judge: P.835 (or personalized P.835) and P.808 sessions, loaded once.

    device: None (CUDA provider if onnxruntime has one, else CPU), "cpu" or "cuda";
    threads: onnxruntime intra-op threads (None: every core); batch_windows: windows per call;
    p808: also run the P.808 model (False: `p808` is None, ~15 % faster);
    max_windows: score only each clip's first k windows (None: all of them, as speechmos; a short
    clip tiled to 11-18 s has up to 7, each a shifted copy of the same audio, so k = 1 is ~5x
    faster on such clips but no longer equals speechmos).
    """

    def __init__(self, personalized: bool = False, device: str | None = None, threads: int | None = None,
                 batch_windows: int = BATCH_WINDOWS, p808: bool = True, max_windows: int | None = None) -> None:
        folder = model_dir()
        self.personalized = bool(personalized)
        self.name = "dnsmos_personalized" if personalized else "dnsmos"
        self.batch_windows = max(1, int(batch_windows))
        self.with_p808, self.max_windows = bool(p808), max_windows
        if max_windows is not None:
            self.name += f"_first{int(max_windows)}"
        self.primary = open_session(folder / MODEL_FILES[self.personalized], device, threads, QualityError)
        self.p808 = open_session(folder / P808_FILE, device, threads, QualityError)
        for session in (self.primary, self.p808):
            check_io(session, [INPUT], [OUTPUT], QualityError, "DNSMOS")
        self.polys = [np.poly1d(c) for c in POLYNOMIALS[self.personalized]]

    def _raw(self, batch: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Raw P.835 outputs [W, 3] and P.808 MOS [W] (NaN without P.808) of a list of windows."""
        p835 = self.primary.run([OUTPUT], {INPUT: np.stack(batch).astype(np.float32)})[0]
        if not self.with_p808:
            return p835, np.full(len(batch), np.nan, np.float32)
        p808 = self.p808.run([OUTPUT], {INPUT: np.stack([p808_features(w) for w in batch])})[0][:, 0]
        return p835, p808

    def score(self, clips: Sequence[ClipSource], sample_rate: int | None = None, progress: bool = False,
              max_seconds: float = LOCAL_MAX_SECONDS) -> list[QualityScores]:
        """DNSMOS of each clip, its windows batched with the others'. A clip is a file path (loaded
        straight to 16 kHz, at most `max_seconds`), an `Audio` at its own rate, or float32 [N] mono
        samples at `sample_rate`; each is converted once (`evaluation.audio_io.at_rate`)."""
        segs, owner = [], []
        for k, clip in enumerate(clips):
            audio = np.clip(at_rate(clip, sample_rate, MODEL_RATE, max_seconds=max_seconds), -1.0, 1.0)
            if not np.all(np.isfinite(audio)):
                raise QualityError(f"clip {k}: audio contains NaN or infinite values.")
            found = windows(audio)[: self.max_windows]
            segs += found
            owner += [k] * len(found)
        if not segs:
            return []
        parts = [self._raw(segs[lo:lo + self.batch_windows])
                 for lo in tqdm(range(0, len(segs), self.batch_windows), desc=f"DNSMOS ({len(segs)} windows)",
                                unit="batch", disable=not progress)]
        p835, p808 = np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts])
        mos = [poly(p835[:, i]) for i, poly in enumerate(self.polys)]  # sig, bak, ovrl per window
        owner_arr = np.asarray(owner)
        out = []
        for k in range(len(clips)):
            rows = owner_arr == k
            sig, bak, ovrl = (float(np.mean(m[rows])) for m in mos)
            out.append(QualityScores(sig=sig, bak=bak, ovrl=ovrl,
                                     p808=float(np.mean(p808[rows])) if self.with_p808 else None))
        return out


def scaled_ovrl(scores: QualityScores) -> float:
    """OVRL mapped from the MOS scale 1-5 onto 0-1 (clipped): the GRPO `quality` reward."""
    return float(min(1.0, max(0.0, (scores.ovrl - MOS_MIN) / (MOS_MAX - MOS_MIN))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.quality", description=__doc__.split("\n")[0])
    parser.add_argument("clips", nargs="+", help="audio files (wav, flac, ogg, mp3, ...)")
    parser.add_argument("--out", required=True, help="JSONL file: one row per clip (clip, sig, bak, ovrl, p808)")
    parser.add_argument("--personalized", action="store_true", help="personalized DNSMOS (interfering talkers "
                        "count as noise)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if onnxruntime has it)")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime threads (default: every core)")
    parser.add_argument("--max-seconds", type=float, default=LOCAL_MAX_SECONDS,
                        help=f"refuse longer clips, read from the header (default {LOCAL_MAX_SECONDS:g})")
    args = parser.parse_args(argv)
    with user_errors(OSError):
        audio = [load_audio(path, MODEL_RATE, max_seconds=args.max_seconds) for path in args.clips]  # one conversion
        judge = DNSMOS(args.personalized, args.device, args.threads)
        scores = judge.score(audio, MODEL_RATE, progress=True)
        rows = [{"clip": path, **s.as_dict()} for path, s in zip(args.clips, scores, strict=True)]
        write_jsonl(args.out, rows)
    print(markdown_table(["clip", "SIG", "BAK", "OVRL", "P.808"],
                         [[r["clip"], r["sig"], r["bak"], r["ovrl"], r["p808"]] for r in rows]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
