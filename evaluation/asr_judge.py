"""The ASR judge interface and what every judge shares (docs/ARCHITECTURE.md §8).

The bottom of the ASR judges: `evaluation.asr` (pocketsphinx, transformers, supplied
transcripts, the cache and `load_asr`) and `evaluation.indicconformer` both build on it, and
it imports neither.

- `ASRJudge`: the base class, `transcribe(samples [N] float32, sample_rate, language) -> str`.
- `ASRError`: a judge that cannot be loaded or cannot transcribe a clip; `ASRModelUnavailable`:
  a hub model that is not cached while the hub cannot be used (the fix in the message,
  worded by `download_fix`).
- `language_code`: the ISO code judges are asked in ("Hindi" -> "hi", "en-US" -> "en").
- `split_windows`: long audio cut into ~WINDOW_SECONDS pieces at the quietest point.
- `looks_like_path`: whether a model reference is a folder rather than a hub id.
"""

from __future__ import annotations

import numpy as np

from rumik_app.errors import RumikError
from rumik_app.text.languages import get_language

# Window length for long audio (seconds) and how far back from a window's end to look for
# the quietest frame to cut at.
WINDOW_SECONDS = 15.0
CUT_SEARCH_SECONDS = 2.0
CUT_FRAME_SECONDS = 0.02


class ASRError(RumikError, RuntimeError):
    """An ASR judge that cannot be loaded or cannot transcribe a clip; the message says why."""


def language_code(language: str | None) -> str | None:
    """ISO code for an ISO code or English name ("Hindi" -> "hi"); "en-US" -> "en"; None stays None."""
    if language is None or not str(language).strip():
        return None
    try:
        return get_language(str(language)).code
    except ValueError:
        return str(language).strip().lower().replace("_", "-").split("-")[0]


class ASRJudge:
    """Base class. `transcribe(samples [N] float32, sample_rate Hz, language) -> str`.

    `clip_id` is used only by judges that look transcripts up by id (supplied transcripts).
    `cacheable` says whether the transcript is a function of the audio (so it may be cached).
    """

    name: str = "asr"
    cacheable: bool = True

    def transcribe(self, samples: np.ndarray, sample_rate: int, language: str | None = None,
                   clip_id: str | None = None) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def split_windows(samples: np.ndarray, sample_rate: int, window_s: float = WINDOW_SECONDS,
                  search_s: float = CUT_SEARCH_SECONDS) -> list[np.ndarray]:
    """Cut samples [N] into pieces of at most `window_s` seconds, each cut at the quietest
    `CUT_FRAME_SECONDS` frame in the last `search_s` seconds of the window."""
    samples = np.asarray(samples, dtype=np.float32)
    window = int(window_s * sample_rate)
    frame = max(1, int(CUT_FRAME_SECONDS * sample_rate))
    search = min(int(search_s * sample_rate), window - frame)
    pieces, start = [], 0
    while len(samples) - start > window:
        lo = start + window - search
        region = samples[lo:start + window]
        n_frames = len(region) // frame
        energy = (region[: n_frames * frame].reshape(n_frames, frame) ** 2).mean(axis=1)
        cut = lo + int(np.argmin(energy)) * frame + frame // 2
        pieces.append(samples[start:cut])
        start = cut
    pieces.append(samples[start:])
    return [p for p in pieces if len(p)]


def looks_like_path(ref: str) -> bool:
    """A hub id is `name` or `org/name`; anything else with slashes or a leading ./ ~ is a path."""
    return ref.startswith((".", "/", "~")) or "\\" in ref or ref.count("/") > 1


def download_fix(ref: str, local: str = "--asr hf:/path/to/model",
                 offline: str = "for English, use --asr pocketsphinx (offline)") -> str:
    """The fix for a hub model that cannot be fetched: `local` is the option that passes a
    folder instead, `offline` the judge that needs no download."""
    return (f"Fix: go online (it then downloads by itself); or pass a local model folder ({local}); "
            f"or download it once where there is internet (`hf download {ref}`) and copy the Hugging Face cache "
            f"here; or, {offline}.")


class ASRModelUnavailable(ASRError):
    """A hub ASR model that is not cached while the hub cannot be used (offline, unreachable).

    model: the hub id; reason: why the hub cannot be used; fix: the sentence with the fix
    (default: the `hf:` judge's). The message names the command-line fix; the app words its
    own (webapp.evaluate_tab).
    """

    def __init__(self, model: str, reason: str, fix: str | None = None):
        super().__init__(f"ASR model {model!r} is not in the local Hugging Face cache and {reason}. "
                         + (fix or download_fix(model)))
        self.model, self.reason = model, reason
