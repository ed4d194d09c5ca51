"""The Evaluate tab of `app.py`: score uploaded clips against reference texts.

Library module (run the app with `python app.py`). Upload clips (WAV/FLAC/OGG/MP3), give
references (typed, or a CSV or JSONL manifest, streamed and bounded: `webapp.manifest`),
choose one of the ASR judges the app was started with
(`app.py --asr-model`; `webapp.scoring.JudgeCatalog`) or paste transcripts, and get
WER/CER/GCER per clip and corpus-pooled, NoVA verdicts where the
reference carries one inline tag, a chart and a CSV. The work is in `webapp.scoring`.
"GCER clusters" picks the segmentation (evaluation.metrics: "grapheme", the default, or
"unicode"); the summary, the table and the CSV name it with its Unicode version.
A run first clears the previous result (an error never sits under old scores); a guide
says which judge suits which language and what its limits are.
"Audio judges" adds DNSMOS OVRL/SIG/BAK and speaker-similarity columns per clip, and their
means with 95 % bootstrap CIs to the summary (`webapp.audio_judges`): the reference voice is
an uploaded clip, else the chosen system's own voice.
"""

from __future__ import annotations

import functools
import logging

from evaluation.asr import WHISPER_LANGUAGES
from evaluation.asr_judge import ASRModelUnavailable
from evaluation.report import write_csv
from evaluation.text import DEFAULT_SEGMENTATION, GRAPHEME_PACKAGE, UNICODE_CLUSTERS, segmentation_unicode_version
from rumik_app.prompt import VOICES
from rumik_app.request import DEFAULT_VOICE
from webapp.audio_judges import MAX_REFERENCE_SECONDS, AudioJudges, AudioRequest
from webapp.common import UserError, checked_choice, error_line, user_errors
from webapp.examples import LANGUAGE_CHOICES
from webapp.manifest import MAX_MANIFEST_ROWS
from webapp.scoring import PASTED, POCKETSPHINX, TABLE_HEADERS, JudgeCatalog, chart, score_uploads
from webapp.storage import ServedFolder
from webapp.systems import SYSTEM_ESPEAK, SystemUnavailable
from webapp.uploads import MAX_CLIP_MB, MAX_TOTAL_SECONDS

log = logging.getLogger(__name__)

PASTED_LABEL = "Pasted transcripts"
SPHINX_LABEL = "pocketsphinx (English, offline)"
HF_LABEL = "Hugging Face ASR model"
TABLE_DIGITS = 3  # rates in the per-clip table; the CSV keeps full precision
REFERENCE_CHARS = 200_000  # the references or transcripts of MAX_CLIPS clips, typed or pasted
JUDGE_GUIDE = f"""**Which judge for which language**
- **{PASTED_LABEL}**: any language. Transcripts from listeners or an ASR you trust; the only judge that can
  mark laughs and sighs for NoVA (write them as `<laugh>` or `(laughs)`).
- **{SPHINX_LABEL}**: English only; a small classic (HMM) model that needs no download. Good enough for a
  quick check of clean read English, unreliable on short, synthetic or expressive clips (it heard espeak-ng's
  "hello world" as "will"), and it never transcribes vocalisations: do not report its numbers.
- **{HF_LABEL}s** (the ones this app was started with, `--asr-model`), e.g. `openai/whisper-large-v3` (the
  benchmark's judge). Whisper knows {", ".join(sorted(WHISPER_LANGUAGES))} (it gets the language as a hint);
  it was not trained on the other scheduled languages (Odia, Bodo, Santali, Manipuri, ...), so expect high
  error rates there: use an ASR model made for them, or pasted transcripts. `whisper-small` is quicker but
  much weaker on Indic scripts. Downloaded on first use (large-v3: ~3 GB) unless the operator gave a local
  folder; loaded once. Whisper usually drops vocalisations."""
AUDIO_GUIDE = f"""DNSMOS (Microsoft's P.835 predictor, MOS 1-5) rates signal (SIG), background (BAK) and overall
(OVRL) quality without reference texts; it was trained on noisy human speech, so compare systems rather than
read it as a listening test. Speaker similarity is the cosine of speaker embeddings of each clip with the
reference voice: an uploaded clip (up to {MAX_REFERENCE_SECONDS:.0f} s), else the chosen system's own voice (a
few fixed sentences it speaks, made once and kept). Both take a few seconds per clip on a CPU."""


@functools.cache
def _csv_folder() -> ServedFolder:
    """This process's folder of scores.csv downloads: a temp folder, pruned by count and age,
    removed at exit (Gradio copies each returned file into its own cache)."""
    return ServedFolder()


def segmentation_choices() -> list[tuple[str, str]]:
    """(label, value) pairs for the GCER segmentation radio, with the Unicode versions installed."""
    return [
        (f"grapheme package, Unicode {segmentation_unicode_version(GRAPHEME_PACKAGE)} rules: क्ष = 2 clusters "
         "(comparable with the release's GCER)", GRAPHEME_PACKAGE),
        (f"Unicode {segmentation_unicode_version(UNICODE_CLUSTERS)} clusters (regex \\X): क्ष = 1 cluster "
         "(closer to aksharas)", UNICODE_CLUSTERS),
    ]


def judge_label(key: str) -> str:
    """The form's name for a judge key: "Pasted transcripts", "openai/whisper-small (Hugging Face)", ..."""
    if key == PASTED:
        return PASTED_LABEL
    if key == POCKETSPHINX:
        return SPHINX_LABEL
    kind, _, arg = key.partition(":")
    return f"{arg} (Hugging Face)" if kind in ("hf", "whisper") else key


class EvaluateHandlers:
    """The Evaluate tab's function over the app's judges (`JudgeCatalog`)."""

    def __init__(self, catalog: JudgeCatalog, audio_judges: AudioJudges | None = None):
        self.catalog = catalog
        self.audio_judges = audio_judges or AudioJudges()

    def choices(self) -> list[tuple[str, str]]:
        return [(judge_label(k), k) for k in self.catalog.keys]

    def evaluate(self, files, references: str = "", manifest=None, judge: str = PASTED, transcripts: str = "",
                 language: str = "", segmentation: str = DEFAULT_SEGMENTATION, quality: bool = False,
                 speaker: bool = False, reference_clip=None, reference_system: str | None = None,
                 reference_voice: str | None = None):
        """Yields (summary markdown, per-clip table {"headers", "data"}, chart, CSV path) for the
        uploaded clips; quality / speaker add the audio judges' columns (see AudioRequest).

        The first yield clears the previous result, so an error never sits under old scores;
        an error also replaces the summary (and is raised as gr.Error, the toast)."""
        import gradio as gr

        audio = AudioRequest(bool(quality), bool(speaker), _path(reference_clip), reference_system, reference_voice)
        yield _progress_line(judge, audio), None, None, None
        try:
            with user_errors("Evaluation"):
                report = self._score(files, references, manifest, judge, transcripts, language, segmentation, audio)
                out = _csv_folder().reserve("scores.csv")
                write_csv(out, report.headers(), report.rows())  # full precision; the table shows TABLE_DIGITS
        except gr.Error as exc:
            yield error_line("Not scored", exc), None, None, None
            raise
        table = {"headers": report.headers(), "data": report.table_rows(TABLE_DIGITS)}
        yield report.markdown(), table, chart(report), str(out)

    def _score(self, files, references, manifest, judge, transcripts, language, segmentation, audio=None):
        """score_uploads with the form's fields; errors as UserError worded for this form."""
        try:
            return score_uploads(_paths(files), references or "", _path(manifest), judge or PASTED, transcripts or "",
                                 language or "", segmentation or DEFAULT_SEGMENTATION, catalog=self.catalog,
                                 audio=audio, audio_judges=self.audio_judges)
        except ASRModelUnavailable as exc:  # offline, or the hub out of reach: the fix in this form's terms
            raise UserError(
                f"The ASR model {exc.model!r} is not on this machine and {exc.reason}. Choose “{PASTED_LABEL}” or, "
                f"for English, “{SPHINX_LABEL}”; the app's operator can download it once (`hf download {exc.model}`) "
                "or start the app with another --asr-model.") from None
        except ValueError as exc:
            raise UserError(str(exc)) from None
        except SystemUnavailable:  # the reference voice's system: its reason and fix
            raise
        except RuntimeError:  # ASRError: the judge could not load (a broken model folder, a missing package)
            log.exception("loading the ASR judge %s failed", judge)
            raise UserError(f"The ASR judge {judge_label(judge)} could not be loaded; "
                            "the app's log says why.") from None


def _progress_line(judge: str, audio: AudioRequest) -> str:
    """The summary while a run works: what is loading."""
    if judge not in (PASTED, "", None):
        return ("Loading the ASR judge and scoring… (a Hugging Face model loads once; the first time can take a "
                "while)")
    if audio.active:
        return "Loading the audio judges and scoring… (the first run loads them; a few seconds per clip)"
    return "Scoring…"


def _path(f) -> str | None:
    if f is None:
        return None
    return f if isinstance(f, str) else getattr(f, "name", None) or f.get("path")


def _paths(files) -> list[str]:
    return [p for p in (_path(f) for f in (files or [])) if p]


def build_evaluate_tab(handlers: EvaluateHandlers) -> None:
    """Lay out the Evaluate tab inside an open `gr.Tab` and wire its events."""
    import gradio as gr

    gr.Markdown(
        f"Upload clips (WAV, FLAC, OGG or MP3, up to {MAX_CLIP_MB} MB each, {MAX_TOTAL_SECONDS / 60:.0f} min in all) "
        "and their reference texts. "
        "Typed references and transcripts: one line per clip in file-name order, or `name.wav | text`. "
        f"A manifest (CSV with columns, or JSONL with keys, up to {MAX_MANIFEST_ROWS:,} rows) gives `file`, `text` "
        "and optionally `language` and `transcript`; the same clip uploaded twice is scored once. "
        "A reference with one inline tag (`<laugh>`, `<chuckle>`, `<sigh>`) also gets a NoVA verdict; the "
        "transcript must then mark sounds too (e.g. `(laughs)` or `<laugh>`)."
    )
    with gr.Row():
        files = gr.File(label="Clips", file_count="multiple", type="filepath", elem_id="eval-files")
        manifest = gr.File(label="Manifest CSV or JSONL (optional): file, text[, language, transcript]",
                           file_types=[".csv", ".jsonl"], type="filepath")
    with gr.Row():
        references = gr.Textbox(value="", label="References (if no manifest)", lines=4, max_length=REFERENCE_CHARS)
        transcripts = gr.Textbox(value="", label="Pasted transcripts (for 'Pasted transcripts')", lines=4,
                                 max_length=REFERENCE_CHARS)
    with gr.Row():
        judge = checked_choice(gr.Radio(handlers.choices(), value=PASTED, label="ASR judge"))  # JudgeCatalog checks
        language = gr.Dropdown([("(auto / from manifest)", "")] + LANGUAGE_CHOICES, value="", label="Language")
    with gr.Accordion("Which judge for which language", open=False):
        gr.Markdown(JUDGE_GUIDE, elem_id="judge-guide")
    segmentation = gr.Radio(segmentation_choices(), value=DEFAULT_SEGMENTATION, label="GCER clusters",
                            info="How Indic text is cut into units for GCER; the two give different numbers.")
    audio_inputs = _audio_judge_controls(handlers)
    run = gr.Button("Score", variant="primary", elem_id="eval-score")
    summary = gr.Markdown(elem_id="eval-summary")
    table = gr.Dataframe(headers=TABLE_HEADERS, label="Per clip", wrap=True, elem_id="eval-table")
    plot = gr.Plot(label="Chart")
    csv_file = gr.File(label="Scores (CSV)", interactive=False)
    run.click(handlers.evaluate,
              inputs=[files, references, manifest, judge, transcripts, language, segmentation, *audio_inputs],
              outputs=[summary, table, plot, csv_file], api_name="evaluate", concurrency_id="asr",
              concurrency_limit=1, show_progress_on=[table])  # the summary line says what is happening


def _audio_judge_controls(handlers: EvaluateHandlers) -> list:
    """The audio judges' inputs: [quality, speaker, reference clip, reference system, voice]."""
    import gradio as gr

    registry = handlers.audio_judges.registry
    with gr.Accordion("Audio judges: DNSMOS quality and speaker similarity (optional)", open=False):
        gr.Markdown(AUDIO_GUIDE)
        with gr.Row():
            quality = gr.Checkbox(False, label="DNSMOS quality (OVRL, SIG, BAK)", elem_id="eval-quality")
            speaker = gr.Checkbox(False, label="Speaker similarity to the reference voice", elem_id="eval-speaker")
        with gr.Row():
            clip = gr.File(label=f"Reference voice (optional; up to {MAX_REFERENCE_SECONDS:.0f} s)", type="filepath",
                           file_types=[".wav", ".flac", ".ogg", ".mp3"], elem_id="eval-reference")
            choices = registry.choices() if registry is not None else [("espeak-ng", SYSTEM_ESPEAK)]
            system = checked_choice(gr.Dropdown(choices, value=choices[0][1], label="else the voice of system",
                                                visible=registry is not None))  # AudioJudges checks it
            voice = checked_choice(gr.Dropdown(list(VOICES), value=DEFAULT_VOICE, label="voice",
                                               visible=registry is not None))
    return [quality, speaker, clip, system, voice]
