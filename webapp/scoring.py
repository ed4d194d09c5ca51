"""Scoring uploaded clips for the Evaluate tab: references, transcripts, WER/CER/GCER, NoVA, chart.

Library module (no command line; no gradio). `score_uploads(...)` takes the uploaded file
paths, the references (typed lines or a CSV or JSONL manifest), an ASR judge spec or pasted
transcripts, and returns one row per clip plus the corpus-pooled rates. Every problem with
one clip (too large, unreadable, silent, no reference, transcription failed) becomes that
clip's message; the other clips are still scored.

References and pasted transcripts, typed: one line per clip in the order of the file names
(sorted), or `name.wav | text` lines matched by file name; or a CSV or JSONL manifest, streamed
and bounded (`webapp.manifest.read_manifest`: only the uploaded clips' rows are kept, the first
row of a clip wins and the summary notes clips listed again).

GCER uses `segmentation` ("grapheme", the default, or "unicode"; evaluation.metrics): the
table's "GCER rules" column and the summary name the library and Unicode version behind it.
References and transcripts are scored in spoken form (`evaluation.text.spoken_form`: numbers,
money, dates and times as words in the clip's language, as the engine reads them), like the
benchmark runner; the report says so.

Judges are the operator's choice, never the visitor's: `JudgeCatalog` holds the ones the app
was started with (`app.py --asr-model`, plus pasted transcripts and pocketsphinx), a visitor
picks one by its key, and anything else gets one message that says nothing about the
machine. Loaded judges are kept in a small LRU; one evicted is freed (its lock taken first,
so a running transcription finishes). One request scores at most MAX_CLIPS clips. Before
anything is decoded, every clip's header is read and repeats are marked (`webapp.uploads.plan_uploads`:
the same upload path, or the same bytes under another name, is scored once and the repeat's
row says where), and a run whose distinct clips declare more than MAX_TOTAL_SECONDS of audio
or MAX_TOTAL_DECODE_SAMPLES to decode is refused (`webapp.uploads.check_budget`). Each clip
is then bounded again while it is decoded (`webapp.uploads.read_upload`, which also bounds the
reference-voice upload: format, MAX_CLIP_MB, `load_audio(max_seconds=...)`), and so is the
run's running total.

Audio judges (optional, `audio=AudioRequest(quality=True, speaker=True, ...)`, the judges
from `webapp.audio_judges.AudioJudges`): DNSMOS OVRL/SIG/BAK and speaker similarity per clip,
whether or not it has a reference text, and their means with 95 % bootstrap CIs in the summary.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evaluation import nova
from evaluation.metrics import ErrorCounts, corpus_rate, grapheme_backend_info, score_pair, uses_graphemes
from evaluation.text import DEFAULT_SEGMENTATION, check_segmentation, segmentation_source, spoken_form
from rumik_app.text.languages import get_language
from webapp import zerogpu
from webapp.manifest import name_index, read_manifest
from webapp.ratings import tag_request
from webapp.uploads import (
    MAX_CLIP_SECONDS,
    MAX_CLIPS,
    MAX_TOTAL_SECONDS,
    UploadRefused,
    check_budget,
    plan_uploads,
    read_upload,
)

log = logging.getLogger(__name__)

PASTED = "pasted"
POCKETSPHINX = "pocketsphinx"
DEFAULT_ASR_MODEL = "openai/whisper-small"
MAX_LOADED_JUDGES = 2  # Hugging Face judges held in memory at once (each is up to ~3 GB)
UNKNOWN_JUDGE = "That ASR judge is not offered by this app; choose one of the judges listed in the form."
NAME_SEPARATOR = "|"
METRICS = ("wer", "cer", "gcer")
TABLE_HEADERS = ["file", "language", "reference", "transcript", "WER", "CER", "GCER", "GCER rules",
                 "content metric", "NoVA (3-class)", "NoVA (2-class)", "message"]


@dataclass
class ClipResult:
    file: str
    language: str = ""
    reference: str = ""
    transcript: str = ""
    scores: dict = field(default_factory=dict)
    nova: dict | None = None
    message: str = ""
    audio: dict = field(default_factory=dict)  # audio judges' values: dnsmos_ovrl, ..., speaker_sim

    def row(self, audio_columns: Sequence[str] = ()) -> list:
        """The table row: TABLE_HEADERS, with `audio_columns`' values (None if absent) before the message."""
        s = self.scores
        metric = ("GCER" if uses_graphemes(self.reference, self.language or None) else "WER/CER") if s else ""
        rules = gcer_rules(s["gcer_segmentation"]) if s else ""
        return [self.file, self.language, self.reference, self.transcript, s.get("wer"), s.get("cer"), s.get("gcer"),
                rules, metric, (self.nova or {}).get("verdict_3class", ""), (self.nova or {}).get("verdict_2class", ""),
                *(self.audio.get(c) for c in audio_columns), self.message]

    def note(self, message: str) -> None:
        """Add a message to this clip's (a clip can have an audio judge's and a transcript's)."""
        self.message = f"{self.message} {message}".strip()


def gcer_rules(segmentation: str) -> str:
    """The "GCER rules" cell: "grapheme: grapheme 0.6.0, Unicode 13.0.0"."""
    return f"{segmentation}: {segmentation_source(segmentation)}"


@dataclass
class ScoreReport:
    clips: list[ClipResult]
    corpus: dict  # metric -> pooled rate over scored clips
    judge: str
    segmentation: str = DEFAULT_SEGMENTATION  # GCER's clusters
    audio: object | None = None  # the audio judges of this run (`webapp.audio_judges.ClipJudge`), if any
    notes: list[str] = field(default_factory=list)  # on the form: manifest rows listed twice, repeated uploads

    @property
    def audio_columns(self) -> list[str]:
        return self.audio.columns() if self.audio is not None else []

    def headers(self) -> list[str]:
        """TABLE_HEADERS with the audio judges' columns (e.g. "DNSMOS OVRL") before "message"."""
        from webapp.audio_judges import HEADERS

        return [*TABLE_HEADERS[:-1], *(HEADERS[c] for c in self.audio_columns), TABLE_HEADERS[-1]]

    def rows(self) -> list[list]:
        return [c.row(self.audio_columns) for c in self.clips]

    def table_rows(self, digits: int) -> list[list]:
        """`rows()` with the rates rounded to `digits` decimals (for display; None stays None)."""
        return [[round(v, digits) if isinstance(v, float) else v for v in row] for row in self.rows()]

    def markdown(self) -> str:
        scored = [c for c in self.clips if c.scores]
        lines = [f"**{len(scored)} of {len(self.clips)} clip(s) scored** with {self.judge}.", *self.notes]
        if scored:
            lines.append("Corpus (summed errors / summed reference length): " + ", ".join(
                f"{self.metric_label(m)} {self.corpus[m]:.3f}" for m in METRICS))
        failed = [c for c in self.clips if c.message and not c.scores]
        if failed:
            lines.append("Not scored: " + "; ".join(f"`{c.file}`: {c.message}" for c in failed))
        lines.append("<small>References and transcripts are compared in spoken form: numbers, money, dates and "
                     "times as words (rumik_app.text.normalize), in the clip's language.</small>")
        lines.append(f"<small>{grapheme_backend_info(self.segmentation)}</small>")
        if self.audio is not None:
            lines.insert(len(lines) - 2, self.audio.summary([c.audio for c in self.clips if c.audio]))
        return "\n\n".join(lines)

    def metric_label(self, metric: str) -> str:
        """"WER", "CER", or "GCER (grapheme)": GCER always says its segmentation."""
        return f"GCER ({self.segmentation})" if metric == "gcer" else metric.upper()


def _known_language(code: str) -> str | None:
    """The ISO code of a manifest's language field, or None (decide from the script) if unknown."""
    try:
        return get_language(code).code if code else None
    except ValueError:
        return None


def _split_lines(text: str | None) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _match(lines: list[str], names: list[str], what: str) -> tuple[dict[str, str], str]:
    """Map typed lines to files: `name | text` lines by name, plain lines by order."""
    index = name_index(names)
    keyed = {}
    plain = []
    for line in lines:
        left, sep, right = line.partition(NAME_SEPARATOR)
        key = index.get(left.strip()) if sep else None
        if key is not None:
            keyed[key] = right.strip()
        else:
            plain.append(line)
    if plain and keyed:
        return {}, f"Mix of `name | {what}` lines and plain lines: use one style."
    if plain:
        if len(plain) != len(names):
            return dict(zip(names, plain, strict=False)), (
                f"{len(plain)} {what} line(s) for {len(names)} file(s); give one line per file, in file-name order, "
                f"or `name.wav | {what}` lines.")
        return dict(zip(names, plain, strict=True)), ""
    return keyed, ""


def judge_spec(entry: str) -> str:
    """An operator's --asr-model entry as an `evaluation.asr` spec: a bare hub id or folder
    becomes `hf:...`; a spec (hf:, whisper:, pocketsphinx, ...) stays as it is."""
    entry = entry.strip()
    return entry if ":" in entry or entry == POCKETSPHINX else f"hf:{entry}"


class JudgeCatalog:
    """The ASR judges this app offers (keys are evaluation.asr specs) and the loaded ones.

    asr_models: the operator's Hugging Face models (ids or folders, `--asr-model`); pasted
    transcripts and pocketsphinx (offline) are always offered. `get(key)` loads on first use
    and keeps at most `max_loaded` judges, freeing the least recently used.
    """

    def __init__(self, asr_models: Sequence[str] = (DEFAULT_ASR_MODEL,), max_loaded: int = MAX_LOADED_JUDGES):
        self.keys = [PASTED, POCKETSPHINX, *dict.fromkeys(judge_spec(m) for m in asr_models if m.strip())]
        self.max_loaded = max_loaded
        self._loaded: OrderedDict[str, tuple[object, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, key: str) -> str:
        """`key`, or ValueError with one message whatever was sent (no file system detail)."""
        if key not in self.keys:
            log.warning("refused an ASR judge that is not offered (%d characters)", len(str(key)))
            raise ValueError(UNKNOWN_JUDGE)
        return key

    def get(self, key: str) -> tuple[object, threading.Lock]:
        """(judge, its lock) for an offered key (not PASTED), loading it once."""
        from evaluation.asr import load_asr

        self.check(key)
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            while len(self._loaded) >= self.max_loaded:
                self._free(*self._loaded.popitem(last=False))
            judge = load_asr(key)
            if key != POCKETSPHINX:  # a neural judge: on a ZeroGPU Space it hears clips inside spaces.GPU
                judge.transcribe_on_gpu = zerogpu.gpu_task(judge.transcribe, _clip_seconds,
                                                           zerogpu.ASR_GPU_SECONDS_PER_AUDIO_SECOND)
            self._loaded[key] = (judge, threading.Lock())
            return self._loaded[key]

    @staticmethod
    def _free(key: str, entry: tuple[object, threading.Lock]) -> None:
        judge, lock = entry
        with lock:  # a transcription still running on it finishes first
            del judge, entry
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
        log.info("ASR judge %s freed (the app holds at most %d)", key, MAX_LOADED_JUDGES)

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._loaded)


def _clip_seconds(samples, sample_rate: int, *_, **__) -> float:
    return len(samples) / sample_rate


def score_uploads(files: list[str], references: str = "", manifest: str | None = None, judge: str = PASTED,
                  transcripts: str = "", language: str = "", segmentation: str = DEFAULT_SEGMENTATION,
                  catalog: JudgeCatalog | None = None, audio=None, audio_judges=None) -> ScoreReport:
    """Score every uploaded clip; problems become per-clip messages (ValueError only for bad
    forms, UserError for audio judges that cannot load). judge: a key of `catalog` (default:
    the default catalog's judges); audio: a `webapp.audio_judges.AudioRequest` (None: no audio
    judges), run by `audio_judges` (default: a fresh `AudioJudges()`, uploaded references only)."""
    catalog = catalog or JudgeCatalog()
    catalog.check(judge)
    check_segmentation(segmentation)
    paths = sorted((Path(f) for f in files or []), key=lambda p: p.name)
    if not paths:
        raise ValueError("Upload at least one clip (WAV, FLAC, OGG or MP3).")
    if len(paths) > MAX_CLIPS:
        raise ValueError(f"{len(paths)} clips uploaded; the limit is {MAX_CLIPS} per run. Split them up.")
    uploads = plan_uploads(paths)
    check_budget(uploads)
    names = [u.name for u in uploads]
    info, form_note, notes = _form_info(names, references, manifest, judge, transcripts)
    model = None if judge == PASTED else catalog.get(judge)
    clip_judge = _clip_judge(audio, audio_judges)
    results, total_s = [], 0.0
    for u in uploads:
        path, name, meta = u.path, u.name, info.get(u.name, {})
        res = ClipResult(name, language=(meta.get("language") or language or "").strip(),
                         reference=meta.get("text", ""))
        results.append(res)
        if u.same_as is not None:
            res.message = f"the same audio as `{u.same_as}`, uploaded again: scored once, in its first row."
            continue
        try:
            clip = read_upload(path, MAX_CLIP_SECONDS, name)  # at its own rate: each judge converts it once
        except UploadRefused as exc:
            res.message = str(exc)
            continue
        if total_s + clip.duration > MAX_TOTAL_SECONDS:  # a header that understated its length
            res.message = (f"not scored: this run already holds {total_s / 60:.0f} min of audio, the most one run "
                           f"takes is {MAX_TOTAL_SECONDS / 60:.0f} min. Score the rest in another run.")
            continue
        total_s += clip.duration
        if clip_judge is not None:
            _judge_audio(clip_judge, clip, res)
        _score_words(res, clip, meta, model, form_note, segmentation)
    scored = [r.scores for r in results if r.scores]
    corpus = {m: corpus_rate(ErrorCounts(s[f"{unit}_errors"], s[f"{unit}_ref_len"]) for s in scored)
              for m, unit in zip(METRICS, ("word", "char", "grapheme"), strict=True)}
    repeats = sum(u.same_as is not None for u in uploads)
    if repeats:
        notes.append(f"{repeats} upload(s) repeat an earlier clip's file or bytes; each distinct clip is scored once.")
    return ScoreReport(results, corpus, "pasted transcripts" if model is None else judge, segmentation, clip_judge,
                       notes)


def _form_info(names: list[str], references: str, manifest: str | None, judge: str,
               transcripts: str) -> tuple[dict[str, dict], str, list[str]]:
    """({file name: {"text", "language", "transcript"}}, a note on how the typed lines were
    matched, the summary's notes on the manifest)."""
    notes: list[str] = []
    if manifest:
        (info, notes), form_note = read_manifest(manifest, names), ""
    else:
        refs, form_note = _match(_split_lines(references), names, "reference")
        info = {n: {"text": t, "language": "", "transcript": None} for n, t in refs.items()}
    if judge == PASTED and transcripts.strip():
        hyps, note = _match(_split_lines(transcripts), names, "transcript")
        form_note = form_note or note
        for n, t in hyps.items():
            info.setdefault(n, {"text": "", "language": "", "transcript": None})["transcript"] = t
    return info, form_note, notes


def _clip_judge(audio, audio_judges):
    """The audio judges a request asks for, loaded (or None); UserError if one cannot load."""
    if audio is None or not audio.active:
        return None
    if audio_judges is None:
        from webapp.audio_judges import AudioJudges

        audio_judges = AudioJudges()
    return audio_judges.judge(audio)


def _judge_audio(clip_judge, clip, res: ClipResult) -> None:
    """The audio judges' values of one clip (an `Audio` at the file's rate) into `res.audio`."""
    from rumik_app.errors import RumikError

    try:
        res.audio = clip_judge.score(clip)
    except RumikError as exc:  # QualityError, SpeakerError: this clip only
        res.note(f"audio judges: {exc}")
    except Exception:  # noqa: BLE001 - one clip's failure must not stop the others
        log.exception("the audio judges failed on %s", res.file)
        res.note("audio judges failed on this clip (see the server log).")


def _score_words(res: ClipResult, clip, meta: dict, model, form_note: str, segmentation: str) -> None:
    """Transcribe (or take the pasted transcript) and score WER/CER/GCER and NoVA into `res`."""
    if not res.reference.strip():
        res.note("no reference text for this file." + (f" {form_note}" if form_note else ""))
        return
    if model is None:
        hyp = meta.get("transcript")
        if hyp is None:
            res.note("no pasted transcript for this file." + (f" {form_note}" if form_note else ""))
            return
    else:
        asr, lock = model
        try:
            with lock:
                transcribe = getattr(asr, "transcribe_on_gpu", asr.transcribe)
                hyp = transcribe(clip.samples, clip.sample_rate, res.language or None, clip_id=Path(res.file).stem)
        except Exception:  # noqa: BLE001 - one clip's failure must not stop the others
            log.exception("transcribing %s failed", res.file)
            res.note("transcription failed (see the server log).")
            return
    res.transcript = str(hyp)
    lang = _known_language(res.language)
    res.scores = score_pair(spoken_form(res.reference, lang), spoken_form(res.transcript, lang), segmentation)
    req = tag_request(res.reference)
    if req is not None:
        res.nova = nova.score_prompt(req.nova_prompt(res.file, res.reference), {"hyp": res.transcript})


def chart(report: ScoreReport):
    """Grouped bars of WER/CER/GCER per scored clip plus the corpus; a matplotlib Figure (or None)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from evaluation.charts import label_bars

    scored = [c for c in report.clips if c.scores]
    if not scored:
        return None
    labels = [c.file for c in scored] + ["corpus"]
    values = {m: [c.scores[m] for c in scored] + [report.corpus[m]] for m in METRICS}
    x = np.arange(len(labels))
    width = 0.26
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(labels) + 2), 3.6))
    for k, m in enumerate(METRICS):
        bars = ax.bar(x + (k - 1) * width, values[m], width, label=report.metric_label(m))
        label_bars(ax, bars, values[m], n_bars=len(labels) * len(METRICS))
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("error rate")
    ax.set_title(f"Intelligibility ({report.judge})")
    ax.legend()
    fig.tight_layout()
    return fig
