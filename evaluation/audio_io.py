"""Robust loading and checking of audio clips (uploaded, pre-generated or synthesised).

Every clip the benchmark runner or the app scores passes through here, so a broken file
gives one clear, per-clip message instead of a stack trace:

    from evaluation.audio_io import load_audio, check_audio, AudioLoadError
    samples = load_audio("clips/p01.mp3")          # float32 [N] mono at 24 kHz
    check_audio(samples, 24000)                     # raises AudioLoadError if silent/empty

Decoding: soundfile (libsndfile: WAV, FLAC, OGG/Vorbis/Opus, MP3, AIFF, ...) first, then
ffmpeg (if installed) for anything else (m4a, webm, ...). Multi-channel audio is averaged to
mono; the rate is converted with `scipy.signal.resample_poly`.

Not a CLI; tested by tests/evaluation/test_systems.py and test_run.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from math import gcd
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

from rumik_app.audio import SAMPLE_RATE
from rumik_app.errors import RumikError

# Extensions FolderSystem and the app look for, in order of preference.
AUDIO_EXTENSIONS: tuple[str, ...] = (".wav", ".flac", ".ogg", ".mp3")
# A clip whose peak is below this (about -60 dBFS) is treated as silent.
SILENCE_PEAK = 1e-3
# Shorter than this (seconds) cannot hold a word; reported as an error.
MIN_DURATION_S = 0.05
# ffmpeg decode timeout (seconds) for one clip.
FFMPEG_TIMEOUT_S = 120
# Longest clip the judges decode (seconds): read from the file's header before decoding, so a
# huge or hostile upload is refused before it fills memory (1 h of float32 at 24 kHz is 350 MB).
MAX_CLIP_SECONDS = 3600.0


class AudioLoadError(RumikError, ValueError):
    """A clip that cannot be used; the message names the file and how to fix it."""


def resample(samples: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Polyphase resampling of mono float samples [N] from `orig_sr` to `target_sr` Hz."""
    samples = np.asarray(samples, dtype=np.float32)
    if orig_sr == target_sr or samples.size == 0:
        return samples
    if orig_sr <= 0 or target_sr <= 0:
        raise AudioLoadError(f"Invalid sample rates {orig_sr} -> {target_sr} Hz.")
    g = gcd(int(orig_sr), int(target_sr))
    return resample_poly(samples, int(target_sr) // g, int(orig_sr) // g).astype(np.float32)


def to_mono(samples: np.ndarray) -> np.ndarray:
    """[N], [N, C] (soundfile layout) or [C, N] (torch layout) -> float32 [N] by averaging
    channels; the shorter axis is taken as the channel axis."""
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim == 2:
        samples = samples.mean(axis=1 if samples.shape[1] <= samples.shape[0] else 0)
    elif samples.ndim != 1:
        raise AudioLoadError(f"Expected audio shaped [N] or [N, C], got {samples.shape}.")
    return samples


def _decode_with_ffmpeg(path: Path, sample_rate: int, max_seconds: float | None = None) -> np.ndarray:
    """Decode any container ffmpeg knows into float32 mono at `sample_rate`; with
    `max_seconds`, ffmpeg stops one second past it (so the caller can tell it was longer)."""
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise AudioLoadError(
            f"{path}: soundfile cannot decode this file and ffmpeg is not installed. "
            "Convert it to WAV or FLAC, or install ffmpeg (apt-get install ffmpeg)."
        )
    limit = [] if max_seconds is None else ["-t", f"{max_seconds + 1:g}"]
    cmd = [exe, "-nostdin", "-v", "error", "-i", str(path), *limit, "-f", "f32le", "-ac", "1",
           "-ar", str(sample_rate), "-"]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AudioLoadError(f"{path}: ffmpeg took over {FFMPEG_TIMEOUT_S} s to decode it.") from exc
    if proc.returncode != 0 or not proc.stdout:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise AudioLoadError(
            f"{path}: not a readable audio file ({detail[-1] if detail else 'no audio stream'}). "
            "Re-export it as 16-bit PCM WAV."
        )
    return np.frombuffer(proc.stdout, dtype="<f4").astype(np.float32)


def audio_duration(path: str | os.PathLike) -> float | None:
    """Duration in seconds from the file's header (soundfile), without decoding the samples;
    None when soundfile cannot read the header (the ffmpeg path then bounds the decode)."""
    try:
        info = sf.info(str(path))
    except (sf.SoundFileError, RuntimeError, TypeError, ValueError):
        return None
    return info.frames / float(info.samplerate) if info.samplerate > 0 else None


def _too_long(path: Path, seconds: float, max_seconds: float) -> AudioLoadError:
    return AudioLoadError(f"{path}: the clip is {seconds:.0f} s long, over the {max_seconds:.0f} s limit; "
                          "cut it into shorter clips.")


def load_audio(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE,
               max_seconds: float | None = None) -> np.ndarray:
    """Read a clip as float32 mono [N] at `sample_rate` Hz; raises AudioLoadError.

    The error names the file and the problem: missing, empty (0 bytes), undecodable
    (corrupt or truncated), containing no samples, or (with `max_seconds`) longer than that:
    the length is read from the header before anything is decoded.
    """
    path = Path(path)
    if not path.is_file():
        raise AudioLoadError(f"{path}: no such audio file.")
    if path.stat().st_size == 0:
        raise AudioLoadError(f"{path}: the file is empty (0 bytes); regenerate or re-export it.")
    seconds = audio_duration(path) if max_seconds is not None else None
    if seconds is not None and seconds > max_seconds:
        raise _too_long(path, seconds, max_seconds)
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=False)
        samples = resample(to_mono(data), int(sr), sample_rate)
    except (sf.SoundFileError, RuntimeError, TypeError, ValueError) as exc:
        try:
            samples = _decode_with_ffmpeg(path, sample_rate, max_seconds)
        except AudioLoadError as ff_exc:
            raise AudioLoadError(f"{ff_exc} (soundfile said: {exc})") from exc
    if samples.size == 0:
        raise AudioLoadError(f"{path}: the file holds no audio samples.")
    if max_seconds is not None and samples.size > max_seconds * sample_rate:  # a header that lied, or ffmpeg
        raise _too_long(path, samples.size / sample_rate, max_seconds)
    return samples


def check_audio(samples: np.ndarray, sample_rate: int, where: str = "clip") -> None:
    """Raise AudioLoadError if `samples` [N] cannot be scored: empty, non-finite, too short, silent."""
    samples = np.asarray(samples)
    if samples.ndim != 1:
        raise AudioLoadError(f"{where}: expected mono samples [N], got shape {samples.shape}.")
    if samples.size == 0:
        raise AudioLoadError(f"{where}: no audio samples (0 s).")
    if not np.all(np.isfinite(samples)):
        raise AudioLoadError(f"{where}: audio contains NaN or infinite values.")
    duration = samples.size / float(sample_rate)
    if duration < MIN_DURATION_S:
        raise AudioLoadError(f"{where}: audio is only {duration * 1000:.0f} ms long.")
    peak = float(np.max(np.abs(samples)))
    if peak < SILENCE_PEAK:
        raise AudioLoadError(
            f"{where}: audio is silent (peak {peak:.2e}, below {SILENCE_PEAK:g}); nothing to transcribe."
        )


def audio_sha256(samples: np.ndarray, sample_rate: int, *extra: str) -> str:
    """sha256 hex of the float32 little-endian samples, the rate and any extra strings."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(samples, dtype="<f4").tobytes())
    h.update(f"|{int(sample_rate)}".encode())
    for item in extra:
        h.update(f"|{item}".encode("utf-8"))
    return h.hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_clip(folder: str | os.PathLike, clip_id: str) -> Path | None:
    """`<folder>/<clip_id>.<ext>` for the first existing extension in AUDIO_EXTENSIONS, else None."""
    folder = Path(folder)
    for ext in AUDIO_EXTENSIONS:
        candidate = folder / f"{clip_id}{ext}"
        if candidate.is_file():
            return candidate
    return None
