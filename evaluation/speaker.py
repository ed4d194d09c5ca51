"""Speaker similarity: the cosine between speaker embeddings of two clips (docs/ARCHITECTURE.md §8).

    from evaluation.speaker import cosine, load_speaker_encoder
    encoder = load_speaker_encoder("resemblyzer")          # default; offline, ships in its wheel
    encoder = load_speaker_encoder("hf:microsoft/wavlm-base-plus-sv")   # WavLM x-vector (transformers)
    ref, a = encoder.embed([ref_samples, samples], 24000)  # [D] float32 unit vectors; any input rate
    ref, a = encoder.embed(["ref.wav", load_native("a.flac", max_seconds=60)])  # files / own-rate Audio
    cosine(ref, a)                                         # resemblyzer: 0..1 (its embeddings are >= 0)

CLI (one JSONL row per clip: clip, similarity)::

    python -m evaluation.speaker REF.wav a.wav b.wav --out similarity.jsonl [--encoder hf:ID_OR_PATH]

Encoders:
- `resemblyzer` (0.1.4): equal to its own `preprocess_wav` + `VoiceEncoder.embed_utterance`
  (tests/evaluation/test_speaker.py compares them; tests/evaluation/test_resample_reference.py
  compares similarities with `preprocess_wav(path)` on files at 16-48 kHz): the clip converted
  once to 16 kHz with soxr HQ (as `preprocess_wav` does through librosa), volume normalised to
  -30 dBFS (raised only), long silences cut by webrtcvad, 40-band mel, 1.6 s partials at 1.3
  per second, a 3-layer LSTM, the L2-normalised mean of the partial embeddings. resemblyzer's
  own functions do the preprocessing, mel and slicing; the network is built here so that its
  weights (`pretrained.pt` in the wheel) load with `torch.load(weights_only=True)` (no
  unpickling of objects), and the partials of many clips run through the LSTM in one batch.
  Its `webrtcvad` dependency imports `pkg_resources`, hence `setuptools==78.1.1` in
  the eval extra (setuptools 81 removes it).
- `hf:ID_OR_PATH`: a transformers `WavLMForXVector` (e.g. microsoft/wavlm-base-plus-sv)
  with its feature extractor, safetensors weights only, no remote code. One clip per forward
  pass: WavLM-base's GroupNorm spans padding, so a padded clip would embed differently.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from evaluation.asr import resolve_model
from evaluation.asr_judge import download_fix
from evaluation.audio_io import LOCAL_MAX_SECONDS, SILENCE_PEAK, ClipSource, at_rate, load_native
from evaluation.report import markdown_table, write_jsonl
from rumik_app.errors import RumikError, user_errors

MODEL_RATE = 16_000
DEFAULT_ENCODER = "resemblyzer"
RESEMBLYZER_PIN = "resemblyzer==0.1.4"
RESEMBLYZER_WEIGHTS = "pretrained.pt"
# resemblyzer's network (voice_encoder.py, hparams.py): 40 mel bands -> 3 x LSTM(256) -> Linear(256).
MEL_BANDS, HIDDEN, LAYERS, EMBEDDING = 40, 256, 3, 256
PARTIAL_RATE, MIN_COVERAGE = 1.3, 0.75  # embed_utterance's defaults
PARTIAL_BATCH = 256  # partials (1.6 s each) per LSTM call
WAVLM_EXAMPLE = "microsoft/wavlm-base-plus-sv"
VALID_SPECS = (
    "resemblyzer            resemblyzer 0.1.4's voice encoder (default; offline)",
    "hf:MODEL_ID_OR_PATH    a transformers WavLMForXVector, e.g. hf:microsoft/wavlm-base-plus-sv",
)


class SpeakerError(RumikError, RuntimeError):
    """A speaker encoder that cannot load, or a clip it cannot embed; the message says how to fix it."""


class SpeakerModelUnavailable(SpeakerError):
    """A hub speaker model that is not cached while the hub cannot be used."""

    def __init__(self, model: str, reason: str):
        super().__init__(f"Speaker model {model!r} is not in the local Hugging Face cache and {reason}. "
                         + download_fix(model, "--speaker-encoder hf:/path/to/model",
                                        "use --speaker-encoder resemblyzer (offline)"))
        self.model, self.reason = model, reason


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors [D]."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def mean_embedding(embeddings: np.ndarray) -> np.ndarray:
    """The L2-normalised mean of unit embeddings [K, D] -> [D] (resemblyzer's `embed_speaker`)."""
    mean = np.asarray(embeddings, dtype=np.float64).mean(axis=0)
    return (mean / np.linalg.norm(mean)).astype(np.float32)


def _check_clip(samples: np.ndarray, k: int) -> np.ndarray:
    """Mono finite float32 samples [N] with a voice-level peak; SpeakerError naming clip k otherwise."""
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim != 1 or samples.size == 0 or not np.all(np.isfinite(samples)):
        raise SpeakerError(f"clip {k}: expected finite mono samples [N], got shape {samples.shape}.")
    if float(np.max(np.abs(samples))) < SILENCE_PEAK:
        raise SpeakerError(f"clip {k}: the audio is silent; there is no voice to compare.")
    return samples


def _at_rate(clip: ClipSource, sample_rate: int | None, to_rate: int, k: int) -> np.ndarray:
    """Clip k at the encoder's rate, converted once (`evaluation.audio_io.at_rate`), checked."""
    return _check_clip(at_rate(clip, sample_rate, to_rate), k)


class SpeakerEncoder:
    """Base class: `embed(clips, sample_rate) -> [B, D]` float32 unit vectors; `name` for reports.
    A clip is a file path (loaded straight to the encoder's rate), an `Audio` at its own rate,
    or float32 [N] mono samples at `sample_rate`; each is converted once."""

    name = "speaker"

    def embed(self, clips: Sequence[ClipSource], sample_rate: int | None = None) -> np.ndarray:
        raise NotImplementedError

    def similarities(self, reference: np.ndarray, clips: Sequence[ClipSource],
                     sample_rate: int | None = None) -> list[float]:
        """Cosine of each clip's embedding with the reference embedding [D]."""
        return [cosine(reference, e) for e in self.embed(clips, sample_rate)]


def _resemblyzer():
    """resemblyzer's `audio` module and `VoiceEncoder` class (importing it loads no weights)."""
    try:
        with warnings.catch_warnings():  # webrtcvad's `import pkg_resources` warns; we pin setuptools for it
            warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
            from resemblyzer import audio
            from resemblyzer.voice_encoder import VoiceEncoder
    except ImportError as exc:
        raise SpeakerError(f"resemblyzer cannot be imported ({exc}); run: pip install {RESEMBLYZER_PIN} "
                           "setuptools==80.10.2 (webrtcvad needs pkg_resources)") from exc
    return audio, VoiceEncoder


def _voice_lstm():
    """resemblyzer's network with its parameter names, so `pretrained.pt` loads strictly."""
    import torch

    class VoiceLSTM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(MEL_BANDS, HIDDEN, LAYERS, batch_first=True)
            self.linear = torch.nn.Linear(HIDDEN, EMBEDDING)

        def forward(self, mels: torch.Tensor) -> torch.Tensor:
            """mels [B, 160, 40] power mel -> [B, 256] unit embeddings (>= 0 after the ReLU)."""
            _, (hidden, _) = self.lstm(mels)
            raw = torch.relu(self.linear(hidden[-1]))
            return raw / torch.norm(raw, dim=1, keepdim=True)

    return VoiceLSTM()


class ResemblyzerEncoder(SpeakerEncoder):
    """resemblyzer 0.1.4's voice encoder (see the module docstring). weights: a `pretrained.pt`
    (default: the one in the installed wheel); device: torch device (default CPU)."""

    name = "resemblyzer"

    def __init__(self, device: str | None = None, weights: str | Path | None = None) -> None:
        import torch

        self.audio, self.voice_encoder = _resemblyzer()
        if weights is None:
            spec = importlib.util.find_spec("resemblyzer")
            weights = Path(list(spec.submodule_search_locations)[0]) / RESEMBLYZER_WEIGHTS
        self.device = torch.device(device or "cpu")
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)["model_state"]
        except Exception as exc:  # noqa: BLE001 - a missing, damaged or foreign file
            raise SpeakerError(f"Cannot read the resemblyzer weights {weights} ({type(exc).__name__}: {exc}); "
                               f"reinstall them: pip install --force-reinstall {RESEMBLYZER_PIN}") from exc
        self.net = _voice_lstm()
        # The file also holds the GE2E loss's similarity_weight/bias, which the encoder does not use.
        self.net.load_state_dict({k: v for k, v in state.items() if not k.startswith("similarity_")}, strict=True)
        self.net.to(self.device).eval()

    def partial_mels(self, samples16k: np.ndarray) -> np.ndarray:
        """`embed_utterance`'s partial mel spectrograms of one preprocessed clip: [P, 160, 40]."""
        wav_slices, mel_slices = self.voice_encoder.compute_partial_slices(len(samples16k), PARTIAL_RATE,
                                                                          MIN_COVERAGE)
        need = wav_slices[-1].stop
        if need >= len(samples16k):
            samples16k = np.pad(samples16k, (0, need - len(samples16k)), "constant")
        mel = self.audio.wav_to_mel_spectrogram(samples16k)
        return np.stack([mel[s] for s in mel_slices])

    def embed(self, clips: Sequence[ClipSource], sample_rate: int | None = None) -> np.ndarray:
        import torch

        parts, owner = [], []
        for k, clip in enumerate(clips):
            wav = self.audio.preprocess_wav(_at_rate(clip, sample_rate, MODEL_RATE, k))
            mels = self.partial_mels(wav)
            parts.append(mels)
            owner += [k] * len(mels)
        if not parts:
            return np.zeros((0, EMBEDDING), np.float32)
        mels = np.concatenate(parts)
        with torch.no_grad():
            partial = np.concatenate([self.net(torch.from_numpy(mels[lo:lo + PARTIAL_BATCH]).to(self.device)).cpu()
                                      .numpy() for lo in range(0, len(mels), PARTIAL_BATCH)])
        owner_arr = np.asarray(owner)
        raw = np.stack([partial[owner_arr == k].mean(axis=0) for k in range(len(clips))])
        return (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)


class WavLMEncoder(SpeakerEncoder):
    """A transformers `WavLMForXVector` and its feature extractor (folder or hub id)."""

    def __init__(self, model: str, device: str | None = None) -> None:
        import torch
        from transformers import AutoFeatureExtractor, WavLMForXVector

        location = resolve_model(model, what="speaker model", example=WAVLM_EXAMPLE, error=SpeakerError,
                                 unavailable=SpeakerModelUnavailable)
        self.name, self.device = f"hf:{model}", torch.device(device or "cpu")
        try:
            self.extractor = AutoFeatureExtractor.from_pretrained(location)
            self.model = WavLMForXVector.from_pretrained(location, use_safetensors=True).to(self.device).eval()
        except Exception as exc:  # noqa: BLE001 - transformers fails in many library-specific ways
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
            raise SpeakerError(f"Could not load speaker model {model!r} as a WavLMForXVector with safetensors "
                               f"weights ({type(exc).__name__}: {first}). Pass a folder or hub id of a WavLM "
                               f"x-vector model such as {WAVLM_EXAMPLE}.") from exc
        self.sample_rate = int(getattr(self.extractor, "sampling_rate", MODEL_RATE))

    def embed(self, clips: Sequence[ClipSource], sample_rate: int | None = None) -> np.ndarray:
        import torch

        out = []
        for k, clip in enumerate(clips):
            wav = _at_rate(clip, sample_rate, self.sample_rate, k)
            inputs = self.extractor(wav, sampling_rate=self.sample_rate, return_tensors="pt")
            with torch.no_grad():
                emb = self.model(**{n: t.to(self.device) for n, t in inputs.items()}).embeddings
            out.append(torch.nn.functional.normalize(emb, dim=-1)[0].cpu().numpy())
        return np.stack(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)


def load_speaker_encoder(spec: str = DEFAULT_ENCODER, device: str | None = None) -> SpeakerEncoder:
    """An encoder from a spec (see VALID_SPECS); SpeakerError listing them otherwise."""
    spec = (spec or "").strip()
    kind, _, arg = spec.partition(":")
    if kind.lower() == "resemblyzer" and not arg:
        return ResemblyzerEncoder(device)
    if kind.lower() == "hf" and arg:
        return WavLMEncoder(arg, device)
    raise SpeakerError(f"Unknown speaker encoder {spec!r}. Valid specs:\n  " + "\n  ".join(VALID_SPECS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.speaker", description=__doc__.split("\n")[0])
    parser.add_argument("reference", help="the reference voice: an audio file")
    parser.add_argument("clips", nargs="+", help="audio files to compare with it")
    parser.add_argument("--out", required=True, help="JSONL file: one row per clip (clip, similarity)")
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, help="resemblyzer (default) or hf:MODEL_ID_OR_PATH")
    parser.add_argument("--device", default=None, help="torch device (default cpu)")
    parser.add_argument("--max-seconds", type=float, default=LOCAL_MAX_SECONDS,
                        help=f"refuse longer clips, read from the header (default {LOCAL_MAX_SECONDS:g})")
    args = parser.parse_args(argv)
    with user_errors(OSError):
        # each file at its own rate, converted once by the encoder to its own
        ref = load_native(args.reference, max_seconds=args.max_seconds)
        audio = [load_native(path, max_seconds=args.max_seconds) for path in args.clips]
        encoder = load_speaker_encoder(args.encoder, args.device)
        sims = encoder.similarities(encoder.embed([ref])[0], audio)
        rows = [{"clip": path, "similarity": s} for path, s in zip(args.clips, sims, strict=True)]
        write_jsonl(args.out, rows)
    print(markdown_table(["clip", f"similarity to {args.reference} ({encoder.name})"],
                         [[r["clip"], r["similarity"]] for r in rows]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
