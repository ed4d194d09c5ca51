"""ASR judges: one interface that turns a clip into a transcript (docs/ARCHITECTURE.md §8).

    from evaluation.asr import load_asr
    judge = load_asr("pocketsphinx")              # English, offline
    judge = load_asr("hf:openai/whisper-small")   # any transformers ASR model (or whisper:small)
    judge = load_asr("supplied:transcripts.jsonl")  # transcripts you made yourself
    judge = load_asr("indicconformer")            # AI4Bharat IndicConformer (22 Indian languages)
    text = judge.transcribe(samples, 24000, "en")  # samples: float32 [N] mono at any rate, converted once

Back-ends:
- `HFJudge`: any Hugging Face ASR model through the transformers pipeline (Whisper family:
  the language hint goes to `generate`; CTC models such as wav2vec2 too). Audio is
  resampled to the model's rate and cut into ~15 s windows at the quietest point.
- `PocketSphinxJudge`: the English model shipped in the `pocketsphinx` package (16 kHz int16).
- `SuppliedTranscripts`: a JSONL/CSV file (or a dict) keyed by clip id.
- `evaluation.indicconformer.IndicConformerJudge` (`indicconformer[:PATH]`): AI4Bharat's
  IndicConformer through onnxruntime, 22 Indian languages, the language passed explicitly.
- `CachedJudge` + `TranscriptCache`: transcripts cached by sha256(float32 samples, rate,
  judge name, language) in a JSON file written atomically.

The interface they share (`ASRJudge`, `ASRError`, `ASRModelUnavailable`, `language_code`,
`split_windows`, ...) is `evaluation.asr_judge`'s, below this module and IndicConformer's.

CLI (transcribe files):  python -m evaluation.asr --asr pocketsphinx --language en a.wav b.wav
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from evaluation.asr_judge import (
    WINDOW_SECONDS,
    ASRError,
    ASRJudge,
    ASRModelUnavailable,
    download_fix,
    language_code,
    looks_like_path,
    split_windows,
)
from evaluation.audio_io import LOCAL_MAX_SECONDS, SILENCE_PEAK, audio_sha256, load_native, resample
from rumik_app.errors import RumikError, report_user_error
from rumik_app.files import atomic_write

POCKETSPHINX_RATE = 16_000
INT16_MAX = 32767
# pocketsphinx settings that make a transcript a function of the clip alone: cepstral mean
# normalisation per utterance ("batch") instead of a running estimate carried over from
# the previous clip, and no random dither. With the defaults the same clip decodes
# differently depending on which clips came before it, which would poison the cache. Even so
# the feature state carries over between utterances, so `transcribe` resets it before each clip
# (`reinit_feat`, 0.1 ms): the same hypothesis and score whatever was decoded before.
POCKETSPHINX_CONFIG = {"loglevel": "FATAL", "cmn": "batch", "dither": False}
HF_BATCH_SIZE = 8
# Whisper's language table (ISO 639-1 codes) covers these of our languages; the rest get
# no hint and Whisper detects the language itself.
WHISPER_LANGUAGES = frozenset(
    {"as", "bn", "en", "gu", "hi", "kn", "ml", "mr", "ne", "pa", "sa", "sd", "ta", "te", "ur"})
TRANSCRIPT_FIELDS = ("hyp", "transcript")
VALID_SPECS = (
    "pocketsphinx                      English only, offline (the pocketsphinx package's model)",
    "hf:MODEL_ID_OR_PATH               any transformers ASR model, e.g. hf:openai/whisper-large-v3",
    "whisper:SIZE_OR_ID                shorthand: whisper:small = hf:openai/whisper-small",
    "supplied:PATH.jsonl|.csv|.json    your own transcripts keyed by clip id (field hyp or transcript)",
    "indicconformer[:PATH_OR_ID]       AI4Bharat's IndicConformer 600M, 22 Indian languages (ONNX, no remote code)",
)


# ---------------------------------------------------------------------------- pocketsphinx
class PocketSphinxJudge(ASRJudge):
    """Offline English ASR with the model shipped inside the `pocketsphinx` package."""

    name = "pocketsphinx"

    def __init__(self) -> None:
        try:
            import pocketsphinx  # noqa: F401
        except ImportError as exc:  # pragma: no cover - it is in the eval extra
            raise ASRError("pocketsphinx is not installed; run: pip install pocketsphinx") from exc
        self._decoder = None

    def _get_decoder(self):
        if self._decoder is None:
            from pocketsphinx import Decoder

            self._decoder = Decoder(**POCKETSPHINX_CONFIG)
        return self._decoder

    def transcribe(self, samples: np.ndarray, sample_rate: int, language: str | None = None,
                   clip_id: str | None = None) -> str:
        code = language_code(language)
        if code not in (None, "en"):
            raise ASRError(
                f"pocketsphinx only has an English model and cannot transcribe language {language!r}. "
                "Use an Hugging Face model (e.g. --asr hf:openai/whisper-large-v3) or supply transcripts "
                "(--asr supplied:PATH.jsonl)."
            )
        audio = resample(np.asarray(samples, dtype=np.float32), sample_rate, POCKETSPHINX_RATE)
        if audio.size == 0 or float(np.max(np.abs(audio))) < SILENCE_PEAK:
            return ""  # without dither, pocketsphinx hears words ("i'm") in digital silence
        pcm = (np.clip(audio, -1.0, 1.0) * INT16_MAX).astype("<i2").tobytes()
        decoder = self._get_decoder()
        decoder.reinit_feat()  # the clip alone decides the transcript (see POCKETSPHINX_CONFIG)
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr.strip() if hyp is not None else ""


# ---------------------------------------------------------------------------- transformers
def resolve_model(ref: str, what: str = "ASR model", example: str = "openai/whisper-small",
                  error: type[RumikError] = ASRError,
                  unavailable: Callable[[str, str], Exception] = ASRModelUnavailable,
                  required: str = "config.json") -> str:
    """A loadable location for `ref`: an existing local folder, the hub id itself when the hub
    can be used, else its cached snapshot; `error` (one message with the fix) otherwise.
    Without a usable hub this fails within seconds (one probe, `rumik_app.checkpoint.hub`), never after
    transformers' download retries. what/example/required word the messages for other judges
    (the speaker encoders); `unavailable(ref, reason)` builds the offline error."""
    from rumik_app.checkpoint.hub import HubUnavailable, offline_snapshot

    local = Path(ref).expanduser()
    if local.exists():
        if not (local / required).is_file():
            raise error(f"{local} has no {required}; it is not a {what} folder.")
        return str(local)
    if looks_like_path(ref):
        raise error(f"{what} folder {ref!r} does not exist. Pass an existing local folder or a hub id "
                    f"such as {example}.")
    try:
        cached = offline_snapshot(ref)
    except HubUnavailable as exc:
        raise unavailable(ref, exc.reason) from None
    return ref if cached is None else str(cached)


class HFJudge(ASRJudge):
    """Any transformers ASR model (Whisper, wav2vec2/CTC, ...) via the ASR pipeline."""

    def __init__(self, model: str, device: str | None = None, window_s: float = WINDOW_SECONDS,
                 batch_size: int = HF_BATCH_SIZE) -> None:
        self.model_ref = model
        self.name = f"hf:{model}"
        self.window_s = window_s
        self.batch_size = batch_size
        location = resolve_model(model)
        import torch
        from transformers import pipeline

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.float16 if str(device).startswith("cuda") else torch.float32
        try:
            # Never code from the model folder, never a pickle: a model is only config + safetensors.
            self.pipe = pipeline("automatic-speech-recognition", model=location, device=device, dtype=dtype,
                                 trust_remote_code=False, model_kwargs={"use_safetensors": True})
        except Exception as exc:  # noqa: BLE001 - loading fails in many library-specific ways
            where = "local folder" if Path(location).exists() else "hub model"
            fix = "Check the folder holds a complete transformers ASR model." if where == "local folder" \
                else download_fix(model)
            raise ASRError(f"Could not load ASR {where} {model!r} ({type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else 'no detail'}). {fix}") from exc
        self.sample_rate = int(self.pipe.feature_extractor.sampling_rate)
        self.is_whisper = getattr(self.pipe.model.config, "model_type", "") == "whisper"

    def transcribe(self, samples: np.ndarray, sample_rate: int, language: str | None = None,
                   clip_id: str | None = None) -> str:
        audio = resample(np.asarray(samples, dtype=np.float32), sample_rate, self.sample_rate)
        pieces = split_windows(audio, self.sample_rate, self.window_s)
        if not pieces:
            return ""
        kwargs = {}
        code = language_code(language)
        if self.is_whisper:
            generate = {"task": "transcribe"}
            if code in WHISPER_LANGUAGES:
                generate["language"] = code
            kwargs["generate_kwargs"] = generate
        inputs = [{"raw": p, "sampling_rate": self.sample_rate} for p in pieces]
        outputs = self.pipe(inputs, batch_size=self.batch_size, **kwargs)
        return " ".join(o["text"].strip() for o in outputs if o["text"].strip())


# ---------------------------------------------------------------------------- supplied
def run_key(clip_id: str, run: int | str | None) -> str:
    """Lookup key for a clip of a run: "run2/p01"; "p01" when run is None."""
    return f"run{run}/{clip_id}" if run not in (None, "") else clip_id


class SuppliedTranscripts(ASRJudge):
    """Transcripts made elsewhere, keyed by clip id (optionally per run).

    File lines (JSONL) or rows (CSV): `id`, `hyp` (or `transcript`), optional `run`.
    `hyp: null` marks a listener error. A JSON file may also be a plain {id: hyp} object.
    `transcribe(..., clip_id="run2/p01")` tries "run2/p01", then "p01".
    """

    cacheable = False

    def __init__(self, source: str | os.PathLike | dict[str, str | None], name: str | None = None) -> None:
        if isinstance(source, dict):
            self.transcripts = {str(k): v for k, v in source.items()}
            self.name = name or "supplied"
            self.source = "dict"
        else:
            self.source = str(source)
            self.transcripts = self._read(Path(source))
            self.name = name or f"supplied:{Path(source).name}"

    @staticmethod
    def _read(path: Path) -> dict[str, str | None]:
        if not path.is_file():
            raise ASRError(f"Transcript file {path} does not exist.")
        if path.suffix.lower() == ".csv":
            with open(path, newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        elif path.suffix.lower() == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = data if isinstance(data, list) else [{"id": k, "hyp": v} for k, v in data.items()]
        else:
            rows = []
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise ASRError(f"{path}:{n}: not valid JSON ({exc.msg}).") from exc
        out: dict[str, str | None] = {}
        for n, row in enumerate(rows, 1):
            field = next((f for f in TRANSCRIPT_FIELDS if f in row), None) if isinstance(row, dict) else None
            if field is None or not row.get("id"):
                raise ASRError(f"{path}: entry {n} needs an `id` and a `hyp` (or `transcript`) field; got {row!r}.")
            key = run_key(str(row["id"]), row.get("run"))
            if key in out:
                raise ASRError(f"{path}: clip {key!r} has two transcripts; keep one.")
            out[key] = row[field]
        return out

    def transcribe(self, samples: np.ndarray | None = None, sample_rate: int | None = None,
                   language: str | None = None, clip_id: str | None = None) -> str:
        if clip_id is None:
            raise ASRError("Supplied transcripts are looked up by clip id; pass clip_id=...")
        for key in (clip_id, clip_id.split("/", 1)[-1]):
            if key in self.transcripts:
                hyp = self.transcripts[key]
                if hyp is None:
                    raise ASRError(f"listener error: the supplied transcript for {clip_id!r} is null.")
                return str(hyp)
        raise ASRError(f"No supplied transcript for clip {clip_id!r} in {self.source} "
                       f"({len(self.transcripts)} transcripts loaded).")


# ---------------------------------------------------------------------------- cache
class TranscriptCache:
    """JSON file {key: transcript}; every `put` rewrites it atomically (temp file + rename)."""

    VERSION = 1

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.entries: dict[str, str] = {}
        self.hits = 0
        self.misses = 0
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.entries = dict(data.get("entries", {}))
            except (json.JSONDecodeError, AttributeError):
                print(f"warning: ASR cache {self.path} is unreadable; starting a new one.", file=sys.stderr)

    @staticmethod
    def key(samples: np.ndarray, sample_rate: int, judge_name: str, language: str | None) -> str:
        return audio_sha256(samples, sample_rate, judge_name, language or "")

    def get(self, key: str) -> str | None:
        value = self.entries.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: str, transcript: str) -> None:
        self.entries[key] = transcript
        atomic_write(self.path, json.dumps({"version": self.VERSION, "entries": self.entries}, ensure_ascii=False))


class CachedJudge(ASRJudge):
    """Wraps a judge with a TranscriptCache (judges that are not `cacheable` pass through)."""

    def __init__(self, judge: ASRJudge, cache: TranscriptCache) -> None:
        self.judge = judge
        self.cache = cache
        self.name = judge.name
        self.cacheable = judge.cacheable

    def transcribe(self, samples: np.ndarray, sample_rate: int, language: str | None = None,
                   clip_id: str | None = None) -> str:
        if not self.judge.cacheable:
            return self.judge.transcribe(samples, sample_rate, language, clip_id=clip_id)
        key = self.cache.key(samples, sample_rate, self.judge.name, language_code(language))
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        text = self.judge.transcribe(samples, sample_rate, language, clip_id=clip_id)
        self.cache.put(key, text)
        return text


# ---------------------------------------------------------------------------- specs
def load_asr(spec: str, cache: str | os.PathLike | None = None, device: str | None = None) -> ASRJudge:
    """Build a judge from a spec (see VALID_SPECS); wrap it in a cache file when `cache` is given."""
    spec = (spec or "").strip()
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind in ("pocketsphinx", "sphinx") and not arg:
        judge: ASRJudge = PocketSphinxJudge()
    elif kind in ("hf", "whisper") and arg:
        model = arg
        if kind == "whisper" and "/" not in arg and not Path(arg).exists():
            model = f"openai/whisper-{arg}"
        judge = HFJudge(model, device=device)
    elif kind == "supplied" and arg:
        judge = SuppliedTranscripts(arg)
    elif kind == "indicconformer":
        from evaluation.indicconformer import REPO_ID, IndicConformerJudge

        judge = IndicConformerJudge(arg or REPO_ID, device=device)
    else:
        raise ASRError(f"Unknown ASR spec {spec!r}. Valid specs:\n  " + "\n  ".join(VALID_SPECS))
    if cache is not None and judge.cacheable:
        judge = CachedJudge(judge, TranscriptCache(cache))
    return judge


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Transcribe audio files with an ASR judge.")
    parser.add_argument("files", nargs="+", help="audio files (wav, flac, ogg, mp3, ...)")
    parser.add_argument("--asr", default="pocketsphinx",
                        help="judge spec: " + "; ".join(s.split()[0] for s in VALID_SPECS))
    parser.add_argument("--language", default=None, help="ISO code or name, e.g. en, hi, Tamil")
    parser.add_argument("--cache", default=None, help="transcript cache JSON file")
    args = parser.parse_args(argv)
    try:
        judge = load_asr(args.asr, cache=args.cache)
        for f in args.files:
            clip = load_native(f, max_seconds=LOCAL_MAX_SECONDS)  # the judge converts it once, to its rate
            print(json.dumps({"id": Path(f).stem, "hyp": judge.transcribe(clip.samples, clip.sample_rate,
                                                                          args.language, clip_id=Path(f).stem)},
                             ensure_ascii=False))
    except (RumikError, OSError, ValueError) as exc:
        return report_user_error(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
