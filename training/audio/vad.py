"""Voice activity detection and the cut of a long recording into clips: one home for training.prepare
(a corpus's recordings) and training.voice (a speaker's recordings), which both sit above it.

    speech = speech_frames(samples, 24000, cut)                   # bool [F], one per FRAME_SECONDS
    spans = clip_spans(samples, speech, 24000, cut)               # [(start, end) sample indices, ...]
    speech_frames(samples, 24000, cfg.data, vad_key="data.vad")   # a VADError's fix names the caller's key

`cut` is a `CutSettings` (the config of either caller extends it). Backends (`cut.vad`):
  "silero"  Silero VAD 6.2.3's sequence ONNX model (silero_vad_16k_sequence.onnx, inside the
            `silero-vad` wheel; the file is opened with onnxruntime, never by importing
            `silero_vad`, which imports torch and sets torch's thread count): a speech
            probability per 32 ms frame at 16 kHz, with silero's own hysteresis (speech starts
            at `threshold`, ends below `threshold - 0.15`).
  "energy"  no model: a frame is speech when its RMS is within `energy_range_db` of the
            recording's loud frames (95th percentile) and above -60 dBFS.

Cut (`clip_spans`): speech runs shorter than `min_speech_seconds` are dropped; runs separated by
at most `max_pause_seconds` join one clip while it stays within `clip_max_seconds`; a run
longer than that is cut at its quietest frames (`evaluation.asr_judge.split_windows`); every
clip gets `pad_seconds` of context on both sides (never into its neighbour); clips shorter
than `clip_min_seconds` are left out.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.asr_judge import split_windows
from evaluation.audio_io import resample
from rumik_app.errors import RumikError

VAD_BACKENDS = ("silero", "energy")  # CutSettings.vad
VAD_RATE = 16_000
FRAME_SAMPLES = 512  # silero at 16 kHz
CONTEXT_SAMPLES = 64
FRAME_SECONDS = FRAME_SAMPLES / VAD_RATE  # 32 ms
BLOCK_FRAMES = 512  # frames per onnxruntime call (16 s)
HYSTERESIS = 0.15  # silero: speech ends below threshold - 0.15
STATE_SHAPE = (1, 1, 128)
SILERO_PIN = "silero-vad==6.2.3"
SILERO_MODEL = "data/silero_vad_16k_sequence.onnx"
ENERGY_FLOOR_DB = -60.0
LOUD_PERCENTILE = 95


@dataclass
class CutSettings:
    """What `speech_frames` and `clip_spans` read, with their defaults: one home for the voice
    trainer's `[data]` (keys `data.vad`, ...) and `training.prepare`'s config (`vad`, ...), which
    both extend it. vad: "silero" or "energy"; vad_threshold: silero's speech probability;
    energy_range_db: the energy VAD's floor below the loud frames; speech runs under
    min_speech_seconds are ignored, pauses up to max_pause_seconds stay inside a clip of
    clip_min_seconds..clip_max_seconds, with pad_seconds of context on each side."""

    vad: str = "silero"
    vad_threshold: float = 0.5
    energy_range_db: float = 35.0
    min_speech_seconds: float = 0.25
    clip_min_seconds: float = 2.0
    clip_max_seconds: float = 20.0
    max_pause_seconds: float = 1.0
    pad_seconds: float = 0.1


class VADError(RumikError, RuntimeError):
    """The VAD cannot run; the message names the fix."""


def silero_model_path(vad_key: str = "vad") -> Path:
    """The sequence ONNX model inside the installed silero-vad package (found, not imported).
    vad_key: the caller's key for `CutSettings.vad`, named in the VADError's fix."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise VADError(f"{vad_key} = \"silero\" needs the silero-vad package (its ONNX model ships in the wheel): "
                       f"pip install {SILERO_PIN}; or use the model-free VAD with --set {vad_key}=energy.")
    path = Path(list(spec.submodule_search_locations)[0]) / SILERO_MODEL
    if not path.is_file():
        raise VADError(f"{path} is missing: reinstall {SILERO_PIN}, or use --set {vad_key}=energy.")
    return path


_SESSION = None


def silero_session(vad_key: str = "vad"):
    """Silero's onnxruntime session, opened once per process (VADError as `silero_model_path`)."""
    global _SESSION
    if _SESSION is None:
        from evaluation.onnx_session import check_io, open_session

        _SESSION = open_session(silero_model_path(vad_key), "cpu", 1, VADError)
        check_io(_SESSION, ["input", "h", "c"], ["speech_probs", "hn", "cn"], VADError, "Silero VAD")
    return _SESSION


def silero_probs(samples16k: np.ndarray, session) -> np.ndarray:
    """Speech probability of each 32 ms frame of 16 kHz audio [N] -> [ceil(N / 512)] float32."""
    count = -(-len(samples16k) // FRAME_SAMPLES)
    frames = np.zeros((count, FRAME_SAMPLES), np.float32)
    frames.reshape(-1)[: len(samples16k)] = samples16k
    context = np.zeros((count, CONTEXT_SAMPLES), np.float32)
    context[1:] = frames[:-1, -CONTEXT_SAMPLES:]
    inputs = np.concatenate([context, frames], axis=1)
    hidden, cell = np.zeros(STATE_SHAPE, np.float32), np.zeros(STATE_SHAPE, np.float32)
    probs = []
    for lo in range(0, count, BLOCK_FRAMES):
        values, hidden, cell = session.run(["speech_probs", "hn", "cn"],
                                           {"input": inputs[lo : lo + BLOCK_FRAMES], "h": hidden, "c": cell})
        probs.append(values.reshape(-1))
    return np.concatenate(probs) if probs else np.zeros(0, np.float32)


def hysteresis(probs: np.ndarray, threshold: float) -> np.ndarray:
    """Silero's rule: a frame is speech from the first frame >= threshold until one < threshold - 0.15."""
    out = np.zeros(len(probs), bool)
    speaking = False
    for i, p in enumerate(probs):
        speaking = p >= threshold or (speaking and p >= threshold - HYSTERESIS)
        out[i] = speaking
    return out


def energy_frames(samples16k: np.ndarray, range_db: float) -> np.ndarray:
    """Frames (32 ms) whose RMS is within `range_db` of the loud frames and above -60 dBFS."""
    # Silero's frames (the last one zero-padded), so both backends mark the same frames; a clip's
    # levels (training.audio.levels) measure whole frames only, floored, for its percentiles.
    count = -(-len(samples16k) // FRAME_SAMPLES)
    frames = np.zeros((count, FRAME_SAMPLES), np.float32)
    frames.reshape(-1)[: len(samples16k)] = samples16k
    level = 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-12)
    floor = max(float(np.percentile(level, LOUD_PERCENTILE)) - range_db, ENERGY_FLOOR_DB) if count else 0.0
    return level > floor


def speech_frames(samples: np.ndarray, sample_rate: int, cut: CutSettings, vad_key: str = "vad") -> np.ndarray:
    """Which 32 ms frames of mono audio [N] hold speech (bool [ceil(N16k / 512)]), by `cut.vad` with
    `cut.vad_threshold` or `cut.energy_range_db`. vad_key: the caller's key for `cut.vad` (`vad` in
    training.prepare, `data.vad` for a voice), which a VADError's fix names."""
    audio16k = resample(np.asarray(samples, np.float32), sample_rate, VAD_RATE)
    if cut.vad == "silero":
        return hysteresis(silero_probs(audio16k, silero_session(vad_key)), cut.vad_threshold)
    if cut.vad == "energy":
        return energy_frames(audio16k, cut.energy_range_db)
    raise VADError(f"Unknown VAD backend {cut.vad!r}; use silero or energy (--set {vad_key}=...).")


def speech_runs(speech: np.ndarray, min_frames: int) -> list[tuple[int, int]]:
    """[start, end) frame runs of True at least `min_frames` long."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], speech.astype(np.int8), [0]])))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True) if b - a >= min_frames]


def clip_spans(samples: np.ndarray, speech: np.ndarray, sample_rate: int, cut: CutSettings) -> list[tuple[int, int]]:
    """Clips of a recording [N] as (start, end) sample indices at `sample_rate`, from its
    speech frames and the cut's settings (the module docstring)."""
    num_samples = len(samples)
    per_frame = FRAME_SECONDS * sample_rate
    runs = speech_runs(speech, max(1, round(cut.min_speech_seconds / FRAME_SECONDS)))
    pause, longest = cut.max_pause_seconds / FRAME_SECONDS, cut.clip_max_seconds - 2 * cut.pad_seconds
    groups: list[list[int]] = []
    for start, end in runs:
        if groups and start - groups[-1][1] <= pause and (end - groups[-1][0]) * FRAME_SECONDS <= longest:
            groups[-1][1] = end
        else:
            groups.append([start, end])
    pad = int(round(cut.pad_seconds * sample_rate))
    spans = []
    for start, end in groups:
        lo, hi = int(start * per_frame), min(int(end * per_frame), num_samples)
        spans += [(max(0, a - pad), min(num_samples, b + pad)) for a, b in _cut_long(samples, lo, hi, sample_rate,
                                                                                       longest)]
    for k in range(1, len(spans)):  # padding stops where the neighbour's starts (cuts inside a run touch)
        if spans[k - 1][1] > spans[k][0]:
            middle = (spans[k - 1][1] + spans[k][0]) // 2
            spans[k - 1], spans[k] = (spans[k - 1][0], middle), (middle, spans[k][1])
    return [(a, b) for a, b in spans if b - a >= cut.clip_min_seconds * sample_rate]


def _cut_long(samples: np.ndarray, lo: int, hi: int, sample_rate: int, longest: float) -> list[tuple[int, int]]:
    """[lo, hi) as it is, or cut at its quietest frames into pieces of at most `longest` seconds."""
    if (hi - lo) <= longest * sample_rate:
        return [(lo, hi)]
    pieces, start = [], lo
    for piece in split_windows(samples[lo:hi], sample_rate, window_s=longest):
        pieces.append((start, start + len(piece)))
        start += len(piece)
    return pieces
