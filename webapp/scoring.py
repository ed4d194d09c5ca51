"""Scoring uploaded clips for the Evaluate tab: references, transcripts, WER/CER/GCER, NoVA, chart.

Library module (no command line; no gradio). `score_uploads(...)` takes the uploaded file
paths, the references (typed lines or a CSV manifest), an ASR judge spec or pasted
transcripts, and returns one row per clip plus the corpus-pooled rates. Every problem with
one clip (too large, unreadable, silent, no reference, transcription failed) becomes that
clip's message; the other clips are still scored.

References and pasted transcripts, typed: one line per clip in the order of the file names
(sorted), or `name.wav | text` lines matched by file name. Manifest CSV columns: `file`
(or `id`, `clip`, `path`), `text` (or `reference`), optional `language` and `transcript`
(or `hyp`); files are matched by name or by name without extension.

GCER uses `segmentation` ("grapheme", the default, or "unicode"; evaluation.metrics): the
table's "GCER rules" column and the summary name the library and Unicode version behind it.
References and transcripts are scored in spoken form (`evaluation.text.spoken_form`: numbers,
money, dates and times as words in the clip's language, as the engine reads them), like the
benchmark runner; the report says so.
"""

from __future__ import annotations

import csv
import threading
from dataclasses import dataclass, field
from pathlib import Path

from evaluation import nova
from evaluation.metrics import ErrorCounts, corpus_rate, grapheme_backend_info, score_pair, uses_graphemes
from evaluation.text import DEFAULT_SEGMENTATION, check_segmentation, segmentation_source, spoken_form
from rumik_app.audio import SAMPLE_RATE
from rumik_app.text.languages import get_language
from webapp.ratings import tag_request

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
MAX_CLIP_MB = 50
MAX_CLIP_SECONDS = 300.0
MAX_CLIPS = 200
PASTED = "pasted"
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

    def row(self) -> list:
        s = self.scores
        metric = ("GCER" if uses_graphemes(self.reference, self.language or None) else "WER/CER") if s else ""
        rules = gcer_rules(s["gcer_segmentation"]) if s else ""
        return [self.file, self.language, self.reference, self.transcript, s.get("wer"), s.get("cer"), s.get("gcer"),
                rules, metric, (self.nova or {}).get("verdict_3class", ""), (self.nova or {}).get("verdict_2class", ""),
                self.message]


def gcer_rules(segmentation: str) -> str:
    """The "GCER rules" cell: "grapheme: grapheme 0.6.0, Unicode 13.0.0"."""
    return f"{segmentation}: {segmentation_source(segmentation)}"


@dataclass
class ScoreReport:
    clips: list[ClipResult]
    corpus: dict  # metric -> pooled rate over scored clips
    judge: str
    segmentation: str = DEFAULT_SEGMENTATION  # GCER's clusters

    def rows(self) -> list[list]:
        return [c.row() for c in self.clips]

    def table_rows(self, digits: int) -> list[list]:
        """`rows()` with the rates rounded to `digits` decimals (for display; None stays None)."""
        return [[round(v, digits) if isinstance(v, float) else v for v in row] for row in self.rows()]

    def markdown(self) -> str:
        scored = [c for c in self.clips if c.scores]
        lines = [f"**{len(scored)} of {len(self.clips)} clip(s) scored** with {self.judge}."]
        if scored:
            lines.append("Corpus (summed errors / summed reference length): " + ", ".join(
                f"{self.metric_label(m)} {self.corpus[m]:.3f}" for m in METRICS))
        failed = [c for c in self.clips if c.message and not c.scores]
        if failed:
            lines.append("Not scored: " + "; ".join(f"`{c.file}`: {c.message}" for c in failed))
        lines.append("<small>References and transcripts are compared in spoken form: numbers, money, dates and "
                     "times as words (rumik_app.text.normalize), in the clip's language.</small>")
        lines.append(f"<small>{grapheme_backend_info(self.segmentation)}</small>")
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
    keyed = {}
    plain = []
    for line in lines:
        left, sep, right = line.partition(NAME_SEPARATOR)
        key = _find_name(left.strip(), names) if sep else None
        if key is not None:
            keyed[key] = right.strip()
        else:
            plain.append(line)
    if plain and keyed:
        return {}, f"Mix of `name | {what}` lines and plain lines: use one style."
    if plain:
        if len(plain) != len(names):
            return dict(zip(names, plain)), (
                f"{len(plain)} {what} line(s) for {len(names)} file(s); give one line per file, in file-name order, "
                f"or `name.wav | {what}` lines.")
        return dict(zip(names, plain)), ""
    return keyed, ""


def _find_name(key: str, names: list[str]) -> str | None:
    for name in names:
        if key in (name, Path(name).stem):
            return name
    return None


def read_manifest(path: str | Path, names: list[str]) -> dict[str, dict]:
    """Manifest rows by uploaded file name; ValueError naming the missing column."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError("The manifest CSV has no rows.")
    cols = {c.strip().lower(): c for c in rows[0] if c}
    file_col = next((cols[c] for c in ("file", "id", "clip", "path", "filename") if c in cols), None)
    text_col = next((cols[c] for c in ("text", "reference", "ref") if c in cols), None)
    if file_col is None or text_col is None:
        raise ValueError(f"The manifest needs a `file` and a `text` column; it has {', '.join(cols)}.")
    lang_col = cols.get("language")
    hyp_col = next((cols[c] for c in ("transcript", "hyp") if c in cols), None)
    out = {}
    for row in rows:
        name = _find_name(Path(str(row[file_col]).strip()).name, names) or _find_name(str(row[file_col]).strip(), names)
        if name is not None:
            out[name] = {"text": row[text_col] or "", "language": (row.get(lang_col) or "") if lang_col else "",
                         "transcript": row.get(hyp_col) if hyp_col else None}
    return out


_JUDGES: dict[str, tuple[object, threading.Lock]] = {}
_JUDGES_LOCK = threading.Lock()


def get_judge(spec: str):
    """An ASR judge loaded once per process (`evaluation.asr.load_asr`), with its lock."""
    from evaluation.asr import load_asr

    with _JUDGES_LOCK:
        if spec not in _JUDGES:
            _JUDGES[spec] = (load_asr(spec), threading.Lock())
        return _JUDGES[spec]


def score_uploads(files: list[str], references: str = "", manifest: str | None = None, judge_spec: str = PASTED,
                  transcripts: str = "", language: str = "",
                  segmentation: str = DEFAULT_SEGMENTATION) -> ScoreReport:
    """Score every uploaded clip; problems become per-clip messages (ValueError only for bad forms)."""
    from evaluation.audio_io import AudioLoadError, check_audio, load_audio

    check_segmentation(segmentation)
    paths = sorted((Path(f) for f in files or []), key=lambda p: p.name)
    if not paths:
        raise ValueError("Upload at least one clip (WAV, FLAC, OGG or MP3).")
    if len(paths) > MAX_CLIPS:
        raise ValueError(f"{len(paths)} clips uploaded; the limit is {MAX_CLIPS} per run. Split them up.")
    names = [p.name for p in paths]
    info: dict[str, dict] = {}
    form_note = ""
    if manifest:
        info = read_manifest(manifest, names)
    else:
        refs, form_note = _match(_split_lines(references), names, "reference")
        info = {n: {"text": t, "language": "", "transcript": None} for n, t in refs.items()}
    if judge_spec == PASTED and transcripts.strip():
        hyps, note = _match(_split_lines(transcripts), names, "transcript")
        form_note = form_note or note
        for n, t in hyps.items():
            info.setdefault(n, {"text": "", "language": "", "transcript": None})["transcript"] = t
    judge = None if judge_spec == PASTED else get_judge(judge_spec)
    results = []
    for path, name in zip(paths, names):
        meta = info.get(name, {})
        res = ClipResult(name, language=(meta.get("language") or language or "").strip(), reference=meta.get("text", ""))
        results.append(res)
        size_mb = path.stat().st_size / 1e6 if path.exists() else 0.0
        if path.suffix.lower() not in AUDIO_SUFFIXES:
            res.message = f"not a WAV, FLAC, OGG or MP3 file ({path.suffix or 'no extension'}); convert it first."
            continue
        if size_mb > MAX_CLIP_MB:
            res.message = f"too large ({size_mb:.1f} MB; the limit is {MAX_CLIP_MB} MB). Trim or compress it."
            continue
        try:
            samples = load_audio(path)
            check_audio(samples, SAMPLE_RATE, where=name)
        except AudioLoadError as exc:
            res.message = f"unreadable: {str(exc).replace(str(path), name)}"
            continue
        if len(samples) / SAMPLE_RATE > MAX_CLIP_SECONDS:
            res.message = f"too long ({len(samples) / SAMPLE_RATE:.0f} s; the limit is {MAX_CLIP_SECONDS:.0f} s). Cut it."
            continue
        if not res.reference.strip():
            res.message = "no reference text for this file." + (f" {form_note}" if form_note else "")
            continue
        if judge is None:
            hyp = meta.get("transcript")
            if hyp is None:
                res.message = "no pasted transcript for this file." + (f" {form_note}" if form_note else "")
                continue
        else:
            model, lock = judge
            try:
                with lock:
                    hyp = model.transcribe(samples, SAMPLE_RATE, res.language or None, clip_id=Path(name).stem)
            except Exception as exc:  # noqa: BLE001 - one clip's failure must not stop the others
                res.message = f"transcription failed: {exc}"
                continue
        res.transcript = str(hyp)
        lang = _known_language(res.language)
        res.scores = score_pair(spoken_form(res.reference, lang), spoken_form(res.transcript, lang), segmentation)
        req = tag_request(res.reference)
        if req is not None:
            res.nova = nova.score_prompt(req.nova_prompt(name, res.reference), {"hyp": res.transcript})
    scored = [r.scores for r in results if r.scores]
    corpus = {m: corpus_rate(ErrorCounts(s[f"{unit}_errors"], s[f"{unit}_ref_len"]) for s in scored)
              for m, unit in zip(METRICS, ("word", "char", "grapheme"))}
    return ScoreReport(results, corpus, "pasted transcripts" if judge is None else judge_spec, segmentation)


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
