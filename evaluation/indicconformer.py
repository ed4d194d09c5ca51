"""IndicConformer ASR judge: AI4Bharat's indic-conformer-600m-multilingual (22 Indian languages)
through onnxruntime, without its remote code (docs/ARCHITECTURE.md §8).

    from evaluation.asr import load_asr
    judge = load_asr("indicconformer")                     # the hub model (gated: accept its terms once)
    judge = load_asr("indicconformer:/models/indicconf")   # a local copy of the repository
    judge.transcribe(samples, 24000, "hi")                 # float32 [N] mono; the language is required

The repository's `model_onnx.py` is what `trust_remote_code` would run; this module does the
same steps itself, reading only data files from `assets/`:
1. features: NeMo's log-mel front end (AI4Bharat's NeMo fork, `FilterbankFeatures`, inference
   mode) at 16 kHz: pre-emphasis 0.97, centred STFT (n_fft 512, hop 160, symmetric 400-sample
   Hann, reflect padding), power, 80 Slaney mel bands, log(x + 2^-24), each band normalised by
   its mean and (n - 1) std over the clip's len // 160 + 1 frames (+1e-5): [80, T]. The
   repository ships this step as `preprocessor.ts`, a TorchScript program; we compute it here
   instead of running code from the download;
2. `encoder.onnx`: `audio_signal` [1, 80, T] float32, `length` [1] int64 -> `outputs`
   [1, 1024, T'] and `encoded_lengths` [1] (8x subsampling: 80 ms frames);
3. `ctc_decoder.onnx`: `encoder_output` -> `logprobs` [1, T', 22 x 256 + 1];
4. `language_masks.json` picks the language's 256 tokens and the shared blank (local id 256),
   then greedy CTC: argmax per frame, repeats collapsed, blanks dropped, `vocab.json`'s
   SentencePiece pieces joined with "▁" as the space.
The language is passed explicitly (the model has no language identification); English and the
languages outside its 22 are an ASRError, so GRPO's content reward abstains on them. Audio
longer than WINDOW_SECONDS is cut at quiet points (`evaluation.asr_judge.split_windows`) and each
window decoded alone: the model is reported to drop words past about 18 s. RNNT decoding (the
repository's other head) is not implemented.

Accuracy with the real weights is NOT measured in this repository (they are a 2.5 GB gated
download): the tests decode a tiny stand-in with the same file names and graph I/O, and the
front end follows the fork's code, not a comparison with `preprocessor.ts`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from evaluation.asr_judge import (
    ASRError,
    ASRJudge,
    ASRModelUnavailable,
    download_fix,
    language_code,
    looks_like_path,
    split_windows,
)
from evaluation.audio_io import resample
from evaluation.onnx_session import check_io, open_session

REPO_ID = "ai4bharat/indic-conformer-600m-multilingual"
ASSETS = "assets"
ENCODER, CTC, VOCAB, MASKS = "encoder.onnx", "ctc_decoder.onnx", "vocab.json", "language_masks.json"
REQUIRED_FILES = (ENCODER, CTC, VOCAB, MASKS)
# The encoder's weights are external-data files beside encoder.onnx, so all of assets/ is fetched.
DOWNLOAD_PATTERNS = [f"{ASSETS}/*", "config.json"]
MODEL_RATE = 16_000
N_FFT, WIN_LENGTH, HOP, N_MELS = 512, 400, 160, 80
PREEMPHASIS = 0.97
LOG_GUARD = 2.0 ** -24
NORM_EPS = 1e-5
BLANK = 256  # local id of the shared CTC blank after masking
WORD_START = "\u2581"  # SentencePiece's "▁"
WINDOW_SECONDS = 15.0
SPEC_HELP = "indicconformer[:PATH_OR_HUB_ID]"


def log_mel(samples: np.ndarray) -> tuple[np.ndarray, int]:
    """NeMo's features of a 16 kHz clip [N]: ([80, T] float32, valid frames N // 160 + 1)."""
    import librosa

    x = np.asarray(samples, dtype=np.float32)
    frames = len(x) // HOP + 1
    x = np.concatenate([x[:1], x[1:] - PREEMPHASIS * x[:-1]])
    window = np.hanning(WIN_LENGTH)  # symmetric, as torch.hann_window(periodic=False); librosa centres it in n_fft
    spec = librosa.stft(x, n_fft=N_FFT, hop_length=HOP, win_length=WIN_LENGTH, window=window, center=True,
                        pad_mode="reflect")
    power = np.abs(spec) ** 2
    bank = librosa.filters.mel(sr=MODEL_RATE, n_fft=N_FFT, n_mels=N_MELS, fmin=0.0, fmax=MODEL_RATE / 2,
                               norm="slaney")
    feats = np.log(bank @ power + LOG_GUARD)
    valid = feats[:, :frames]
    feats = (feats - valid.mean(axis=1, keepdims=True)) / (valid.std(axis=1, ddof=1, keepdims=True) + NORM_EPS)
    feats[:, frames:] = 0.0
    return feats.astype(np.float32), frames


def ctc_greedy(logits: np.ndarray, pieces: list[str], blank: int = BLANK) -> str:
    """Greedy CTC over one language's [T, 257] scores: argmax, collapse repeats, drop blanks."""
    ids = np.argmax(logits, axis=-1)
    keep = np.ones(len(ids), dtype=bool)
    keep[1:] = ids[1:] != ids[:-1]
    return "".join(pieces[i] for i in ids[keep] if i != blank).replace(WORD_START, " ").strip()


def resolve_folder(ref: str = REPO_ID) -> Path:
    """A folder with the model's assets: `ref` itself when it is a folder, else the hub id's
    snapshot (downloaded once; without a usable hub, the cached one or an error with the fix)."""
    local = Path(ref).expanduser()
    if local.exists() or looks_like_path(ref) or "/" not in ref:
        if not local.is_dir():
            raise ASRError(f"IndicConformer folder {ref!r} does not exist. Pass the folder holding "
                           f"{ASSETS}/{ENCODER} (--asr indicconformer:PATH), "
                           "or --asr indicconformer for the hub model.")
        return local
    from rumik_app.checkpoint.hub import HubUnavailable, hub_snapshot

    try:
        return hub_snapshot(ref, allow_patterns=DOWNLOAD_PATTERNS)
    except HubUnavailable as exc:
        raise ASRModelUnavailable(ref, exc.reason, download_fix(ref, "--asr indicconformer:/path/to/folder",
                                                                "use another judge (--asr hf:MODEL)")) from None
    except Exception as exc:  # noqa: BLE001 - gated, unknown repo, HTTP errors: huggingface_hub's own types
        raise ASRError(f"Could not download {ref!r} ({type(exc).__name__}: {str(exc).strip().splitlines()[0]}). "
                       "The repository is gated: accept its terms on its Hugging Face page while signed in, "
                       "then run `hf auth login` here, or pass a local copy (--asr indicconformer:PATH).") from exc


class IndicConformerJudge(ASRJudge):
    """indic-conformer-600m-multilingual, CTC head (see the module docstring).

    model: a folder or hub id; device: onnxruntime device (None: CUDA if available);
    threads: onnxruntime intra-op threads; window_s: the longest piece decoded at once.
    """

    def __init__(self, model: str = REPO_ID, device: str | None = None, threads: int | None = None,
                 window_s: float = WINDOW_SECONDS) -> None:
        folder = resolve_folder(model)
        assets = folder / ASSETS
        missing = [name for name in REQUIRED_FILES if not (assets / name).is_file()]
        if missing:
            raise ASRError(f"{assets} lacks {', '.join(missing)}; it is not a copy of {REPO_ID}. Download the "
                           f"repository's assets folder again.")
        self.name = "indicconformer" if model == REPO_ID else f"indicconformer:{model}"
        self.window_s = window_s
        self.encoder = open_session(assets / ENCODER, device, threads, ASRError)
        self.ctc = open_session(assets / CTC, device, threads, ASRError)
        check_io(self.encoder, ["audio_signal", "length"], ["outputs", "encoded_lengths"], ASRError, str(ENCODER))
        check_io(self.ctc, ["encoder_output"], ["logprobs"], ASRError, str(CTC))
        self.vocab, self.masks = self._tables(assets)

    @staticmethod
    def _tables(assets: Path) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
        """vocab {lang: pieces} and masks {lang: bool [V]}, checked against each other."""
        try:
            vocab = json.loads((assets / VOCAB).read_text(encoding="utf-8"))
            raw = json.loads((assets / MASKS).read_text(encoding="utf-8"))
            masks = {lang: np.asarray(m, dtype=bool) for lang, m in raw.items()}
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError) as exc:
            raise ASRError(f"{assets}: {VOCAB} or {MASKS} is not valid ({exc}); download them again.") from exc
        for lang, mask in masks.items():
            if lang not in vocab or int(mask.sum()) != len(vocab[lang]) or not mask[-1]:
                raise ASRError(f"{assets}: the tables disagree for language {lang!r} (its mask must select as many "
                               "tokens as its vocabulary has, the shared blank last); download them again.")
        return vocab, masks

    @property
    def languages(self) -> list[str]:
        return sorted(self.masks)

    def _language(self, language: str | None) -> str:
        code = language_code(language)
        if code is None:
            raise ASRError("IndicConformer has no language identification; pass the clip's language.")
        if code not in self.masks:
            raise ASRError(f"IndicConformer does not cover language {language!r}; it covers "
                           f"{', '.join(self.languages)}. For English use --asr hf:openai/whisper-large-v3 or "
                           "--asr pocketsphinx.")
        return code

    def decode_window(self, samples16k: np.ndarray, lang: str) -> str:
        """Transcript of one window [N] at 16 kHz in language `lang` (an ISO code it covers)."""
        feats, frames = log_mel(samples16k)
        outputs, lengths = self.encoder.run(["outputs", "encoded_lengths"],
                                            {"audio_signal": feats[None], "length": np.array([frames], np.int64)})
        logprobs = self.ctc.run(["logprobs"], {"encoder_output": outputs})[0]  # [1, T', V]
        mask = self.masks[lang]
        if logprobs.shape[-1] != len(mask):
            raise ASRError(f"the CTC head scores {logprobs.shape[-1]} tokens but the language masks have "
                           f"{len(mask)}; the assets come from different models.")
        # model_onnx.py re-applies log_softmax after masking; argmax does not change under it.
        return ctc_greedy(logprobs[0, : int(lengths[0])][:, mask], self.vocab[lang])

    def transcribe(self, samples: np.ndarray, sample_rate: int, language: str | None = None,
                   clip_id: str | None = None) -> str:
        lang = self._language(language)
        audio = resample(np.asarray(samples, dtype=np.float32), sample_rate, MODEL_RATE)
        pieces = [p for p in split_windows(audio, MODEL_RATE, self.window_s) if len(p) > 1]
        return " ".join(t for t in (self.decode_window(p, lang) for p in pieces) if t)
