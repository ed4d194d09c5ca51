"""Robust loading and checking of audio clips (uploaded, pre-generated or synthesised).

Every clip the benchmark runner or the app scores passes through here, so a broken file
gives one clear, per-clip message instead of a stack trace:

    from evaluation.audio_io import load_audio, load_native, check_audio, at_rate, AudioLoadError
    samples = load_audio("clips/p01.mp3", max_seconds=300)   # float32 [N] mono at 24 kHz
    clip = load_native("clips/p01.mp3", max_seconds=300)     # Audio: float32 [N] mono at the file's own rate
    wave16k = at_rate(clip, None, 16_000)           # a judge's input: a path, an Audio or samples at a rate
    check_audio(samples, 24000)                     # raises AudioLoadError if silent/empty
    read_header("clips/p01.flac", max_seconds=300)  # AudioHeader(frames, rate, channels), nothing decoded

Decoding: soundfile (libsndfile: WAV, FLAC, OGG/Vorbis/Opus, MP3, AIFF, ...) first, then
ffmpeg (if installed) for anything else (m4a, webm, ...), both at the file's own rate.
Multi-channel audio is averaged to mono. The rate is converted once, straight from the file's
rate to the caller's, by the project's one resampler (`rumik_app.resample`: soxr HQ, what
`librosa.load(path, sr=...)` does), so a judge scores what its reference pipeline would
(tests/evaluation/test_resample_reference.py). Judges take a file path or the file's
own-rate samples (`load_native`) and convert once to their rate (`at_rate`); nothing goes
through 24 kHz on its way to 16 kHz.

Bounded before anything is decoded: every caller passes `max_seconds` (the app, the runner,
training prep and campaigns each have their own), and a clip is refused from its header when
its rate is outside 8-192 kHz, it has more than 8 channels, or it declares more than
`max_seconds`. A header can lie (a FLAC of constant blocks compresses an hour into a few
kilobytes and need not declare its length), so decoding itself stops at `max_seconds` too:
soundfile reads at most that many frames plus one, ffmpeg runs with `-t`, file input only,
and is killed once its output passes the same size. Memory is therefore bounded by the
caller's limit, whatever the file says. A MemoryError becomes the clip's own error.

Not a CLI; tested by tests/evaluation/test_systems.py, test_run.py, test_audio_bombs.py and
test_resample_reference.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np
import soundfile as sf

from rumik_app import resample as one_resampler
from rumik_app.audio import SAMPLE_RATE, Audio
from rumik_app.errors import RumikError
from rumik_app.files import sha256_file

# Extensions FolderSystem and the app look for, in order of preference.
AUDIO_EXTENSIONS: tuple[str, ...] = (".wav", ".flac", ".ogg", ".mp3")
# A clip whose peak is below this (about -60 dBFS) is treated as silent.
SILENCE_PEAK = 1e-3
# Shorter than this (seconds) cannot hold a word; reported as an error.
MIN_DURATION_S = 0.05
# ffmpeg decode timeout (seconds) for one clip.
FFMPEG_TIMEOUT_S = 120
# What a clip's header may declare: telephone quality to high-resolution studio audio.
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8_000, 192_000
MAX_CHANNELS = 8
FFMPEG_READ_BYTES = 1 << 16
# The limit of the command-line tools on an operator's own files (the runner, `evaluation.asr`,
# folder systems, campaign clips): an hour, longer than any chapter the engine takes. The
# public app sets its own, far lower (webapp.scoring).
LOCAL_MAX_SECONDS = 3600.0
FFPROBE_TIMEOUT_S = 30
# What a judge takes: a file (loaded straight to the judge's rate), an `Audio` (samples at their
# own rate, e.g. `load_native`'s), or bare float samples [N] at a rate the caller names.
ClipSource = Union[str, os.PathLike, Audio, np.ndarray]


class AudioLoadError(RumikError, ValueError):
    """A clip that cannot be used; the message names the file and how to fix it."""


def resample(samples: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Mono float samples [N] from `orig_sr` to `target_sr` Hz with the project's one resampler
    (`rumik_app.resample.resample`, soxr HQ); float32 out, the same array when the rates are equal."""
    if int(orig_sr) <= 0 or int(target_sr) <= 0:
        raise AudioLoadError(f"Invalid sample rates {orig_sr} -> {target_sr} Hz.")
    return one_resampler.resample(samples, int(orig_sr), int(target_sr))


def to_mono(samples: np.ndarray) -> np.ndarray:
    """[N], [N, C] (soundfile layout) or [C, N] (torch layout) -> float32 [N] by averaging
    channels; the shorter axis is taken as the channel axis."""
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim == 2:
        samples = samples.mean(axis=1 if samples.shape[1] <= samples.shape[0] else 0)
    elif samples.ndim != 1:
        raise AudioLoadError(f"Expected audio shaped [N] or [N, C], got {samples.shape}.")
    return samples


def _too_long(path: Path, seconds: float, max_seconds: float) -> AudioLoadError:
    return AudioLoadError(f"{path}: the clip is {seconds:,.1f} s or longer; the limit here is {max_seconds:g} s. "
                          "Cut it into shorter clips.")


def _check_header(path: Path, info, max_seconds: float) -> None:
    """Refuse from the header alone: a rate or channel count no real clip has, or too long."""
    if not MIN_SAMPLE_RATE <= info.samplerate <= MAX_SAMPLE_RATE:
        raise AudioLoadError(f"{path}: the file declares a sample rate of {info.samplerate} Hz; clips must be "
                             f"{MIN_SAMPLE_RATE // 1000}-{MAX_SAMPLE_RATE // 1000} kHz. Re-export it as a normal "
                             "WAV (e.g. 24 kHz, 16-bit).")
    if not 1 <= info.channels <= MAX_CHANNELS:
        raise AudioLoadError(f"{path}: the file declares {info.channels} channels; at most {MAX_CHANNELS} are "
                             "accepted. Mix it down to mono.")
    if 0 < info.frames < 2**62 and info.frames / info.samplerate > max_seconds:  # libsndfile: huge = unknown
        raise _too_long(path, info.frames / info.samplerate, max_seconds)


@dataclass(frozen=True)
class AudioHeader:
    """What a clip's header declares: `frames` per channel (None when it does not say),
    `sample_rate` (Hz) and `channels`."""

    frames: int | None
    sample_rate: int
    channels: int

    @property
    def seconds(self) -> float | None:
        return None if self.frames is None else self.frames / self.sample_rate


def read_header(path: str | os.PathLike, max_seconds: float) -> AudioHeader | None:
    """The clip's header as libsndfile reads it, nothing decoded: AudioLoadError when
    `load_audio(path, max_seconds=...)` would refuse it from the header (rate, channels,
    length), None when soundfile cannot read the header (load_audio would then try ffmpeg)."""
    path = Path(path)
    try:
        info = sf.info(str(path))
    except (sf.SoundFileError, RuntimeError, TypeError):
        return None
    _check_header(path, info, max_seconds)
    frames = info.frames if 0 < info.frames < 2**62 else None  # libsndfile: huge = unknown
    return AudioHeader(frames, int(info.samplerate), int(info.channels))


def _read_with_soundfile(path: Path, max_seconds: float) -> tuple[np.ndarray, int]:
    """(mono samples [n] float32, rate): at most max_seconds + one frame whatever the header
    says, mixed down a block at a time so that many channels cost no extra memory."""
    with sf.SoundFile(str(path)) as f:
        _check_header(path, f, max_seconds)
        limit, parts, got = int(max_seconds * f.samplerate), [], 0
        block = max(1, f.samplerate)  # one second at a time
        while got <= limit:
            data = f.read(frames=min(block, limit + 1 - got), dtype="float32", always_2d=True)
            if not len(data):
                break
            parts.append(data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0].copy())
            got += len(data)
        if got > limit:
            raise _too_long(path, max_seconds, max_seconds)
        return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), f.samplerate


def _ffmpeg_tools(path: Path) -> tuple[str, str]:
    exe, probe = shutil.which("ffmpeg"), shutil.which("ffprobe")
    if exe is None or probe is None:
        raise AudioLoadError(
            f"{path}: soundfile cannot decode this file and ffmpeg (with its ffprobe) is not installed. "
            "Convert it to WAV or FLAC, or install ffmpeg (apt-get install ffmpeg)."
        )
    return exe, probe


def _ffprobe_rate(probe: str, path: Path) -> int:
    """The first audio stream's sample rate (Hz) as ffprobe reads it from the container, nothing
    decoded; AudioLoadError when there is none or it is outside MIN..MAX_SAMPLE_RATE."""
    cmd = [probe, "-v", "error", "-protocol_whitelist", "file", "-select_streams", "a:0",
           "-show_entries", "stream=sample_rate", "-of", "default=noprint_wrappers=1:nokey=1",
           f"file:{path.resolve()}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=FFPROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AudioLoadError(f"{path}: ffprobe took over {FFPROBE_TIMEOUT_S} s to read its header.") from exc
    text = proc.stdout.decode("ascii", "replace").split()
    if proc.returncode != 0 or not text or not text[0].isdigit():
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise AudioLoadError(f"{path}: not a readable audio file ({err[-1] if err else 'no audio stream'}). "
                             "Re-export it as 16-bit PCM WAV.")
    rate = int(text[0])
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioLoadError(f"{path}: the file declares a sample rate of {rate} Hz; clips must be "
                             f"{MIN_SAMPLE_RATE // 1000}-{MAX_SAMPLE_RATE // 1000} kHz. Re-export it as a normal "
                             "WAV (e.g. 24 kHz, 16-bit).")
    return rate


def _decode_with_ffmpeg(path: Path, max_seconds: float) -> tuple[np.ndarray, int]:
    """(float32 mono [n], rate): any container ffmpeg knows, decoded at its own rate (ffprobe's;
    ffmpeg converts no rate, the one resampler does that), at most `max_seconds` of it (ffmpeg's
    -t, and its output cut off past that size)."""
    exe, probe = _ffmpeg_tools(path)
    sample_rate = _ffprobe_rate(probe, path)
    limit = 4 * int(max_seconds * sample_rate)  # float32 bytes
    # -t a little past the limit: a clip that reaches it is refused as too long, never cut short.
    cmd = [exe, "-nostdin", "-v", "error", "-protocol_whitelist", "file,pipe", "-t", f"{max_seconds + 0.5:g}",
           "-i", f"file:{path.resolve()}", "-f", "f32le", "-ac", "1", "-ar", str(sample_rate), "pipe:1"]
    out = bytearray()
    # stderr to a file, not a pipe nobody reads while stdout is drained (a damaged file's error flood
    # would fill the pipe and stall ffmpeg); a watchdog kills it past the deadline, even mid-read.
    with tempfile.TemporaryFile() as errors, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors) as proc:
        watchdog = threading.Timer(FFMPEG_TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            while chunk := proc.stdout.read(FFMPEG_READ_BYTES):
                out += chunk
                if len(out) > limit:  # past the limit: stop it now (whether or not -t would have)
                    proc.kill()
                    raise _too_long(path, max_seconds, max_seconds)
            proc.wait()
        finally:
            timed_out = not watchdog.is_alive() and proc.returncode is not None and proc.returncode < 0
            watchdog.cancel()
        if timed_out and len(out) <= limit:
            raise AudioLoadError(f"{path}: ffmpeg took over {FFMPEG_TIMEOUT_S} s to decode it.")
        errors.seek(0)
        err = errors.read(4096).decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0 or not out:
        raise AudioLoadError(
            f"{path}: not a readable audio file ({err[-1] if err else 'no audio stream'}). "
            "Re-export it as 16-bit PCM WAV."
        )
    return np.frombuffer(bytes(out[: len(out) - len(out) % 4]), dtype="<f4").astype(np.float32), sample_rate


def load_native(path: str | os.PathLike, *, max_seconds: float) -> Audio:
    """Read a clip as float32 mono [N] at the file's own rate (`Audio.sample_rate`), at most
    `max_seconds` long, no rate converted; raises AudioLoadError (see the module docstring).

    The error names the file and the problem: missing, empty (0 bytes), a header no real clip
    has, too long, undecodable (corrupt or truncated), or containing no samples.
    """
    path = Path(path)
    if not path.is_file():
        raise AudioLoadError(f"{path}: no such audio file.")
    if path.stat().st_size == 0:
        raise AudioLoadError(f"{path}: the file is empty (0 bytes); regenerate or re-export it.")
    try:
        try:
            samples, sr = _read_with_soundfile(path, max_seconds)
        except (sf.SoundFileError, RuntimeError, TypeError) as exc:
            try:
                samples, sr = _decode_with_ffmpeg(path, max_seconds)
            except AudioLoadError as ff_exc:
                raise AudioLoadError(f"{ff_exc} (soundfile said: {exc})") from exc
    except MemoryError:
        raise AudioLoadError(f"{path}: not enough memory to decode this clip; send a shorter one.") from None
    if samples.size == 0:
        raise AudioLoadError(f"{path}: the file holds no audio samples.")
    return Audio(samples=samples, sample_rate=int(sr))


def load_audio(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE, *, max_seconds: float) -> np.ndarray:
    """Read a clip as float32 mono [N] at `sample_rate` Hz, at most `max_seconds` long: one
    decode at the file's own rate (`load_native`), one conversion (`resample`) straight to
    `sample_rate`; raises AudioLoadError as `load_native` does."""
    clip = load_native(path, max_seconds=max_seconds)
    return resample(clip.samples, clip.sample_rate, sample_rate)


def at_rate(clip: ClipSource, sample_rate: int | None, to_rate: int, *,
            max_seconds: float = LOCAL_MAX_SECONDS) -> np.ndarray:
    """A judge's input as float32 mono [N] at `to_rate`, converted once from its source: a file
    path is loaded straight to `to_rate` (`load_audio`, at most `max_seconds`); an `Audio`
    carries its own rate; bare samples [N] are at `sample_rate`. AudioLoadError (naming the file)
    for a file that cannot be used, or bare samples without their rate."""
    if isinstance(clip, (str, os.PathLike)):
        return load_audio(clip, to_rate, max_seconds=max_seconds)
    if isinstance(clip, Audio):
        return resample(clip.samples, clip.sample_rate, to_rate)
    if sample_rate is None:
        raise AudioLoadError("bare samples need their sample_rate; pass it, or an Audio or a file path instead.")
    return resample(clip, sample_rate, to_rate)


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
    """sha256 hex of a file's bytes (rumik_app.files.sha256_file)."""
    return sha256_file(path)


def find_clip(folder: str | os.PathLike, clip_id: str) -> Path | None:
    """`<folder>/<clip_id>.<ext>` for the first existing extension in AUDIO_EXTENSIONS, else None."""
    folder = Path(folder)
    for ext in AUDIO_EXTENSIONS:
        candidate = folder / f"{clip_id}{ext}"
        if candidate.is_file():
            return candidate
    return None
