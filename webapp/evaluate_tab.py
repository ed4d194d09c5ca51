"""The Evaluate tab of `app.py`: score uploaded clips against reference texts.

Library module (run the app with `python app.py`). Upload clips (WAV/FLAC/OGG/MP3), give
references (typed or a CSV manifest), choose one of the ASR judges the app was started with
(`app.py --asr-model`; `webapp.scoring.JudgeCatalog`) or paste transcripts, and get
WER/CER/GCER per clip and corpus-pooled, NoVA verdicts where the
reference carries one inline tag, a chart and a CSV. The work is in `webapp.scoring`.
"GCER clusters" picks the segmentation (evaluation.metrics: "grapheme", the default, or
"unicode"); the summary, the table and the CSV name it with its Unicode version.
A run first clears the previous result (an error never sits under old scores); a guide
says which judge suits which language and what its limits are.
"""

from __future__ import annotations

import functools
import logging

from evaluation.asr import WHISPER_LANGUAGES, ASRModelUnavailable
from evaluation.report import write_csv
from evaluation.text import DEFAULT_SEGMENTATION, GRAPHEME_PACKAGE, UNICODE_CLUSTERS, segmentation_unicode_version
from webapp.common import UserError, checked_choice, error_line, user_errors
from webapp.examples import LANGUAGE_CHOICES
from webapp.scoring import MAX_CLIP_MB, MAX_TOTAL_SECONDS, PASTED, POCKETSPHINX, TABLE_HEADERS, JudgeCatalog, chart, \
    score_uploads
from webapp.storage import ServedFolder

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
  benchmark's judge). Whisper knows {", ".join(sorted(WHISPER_LANGUAGES))} (it gets the language as a hint); it was not trained
  on the other scheduled languages (Odia, Bodo, Santali, Manipuri, ...), so expect high error rates there:
  use an ASR model made for them, or pasted transcripts. `whisper-small` is quicker but much weaker on Indic
  scripts. Downloaded on first use (large-v3: ~3 GB) unless the operator gave a local folder; loaded once.
  Whisper usually drops vocalisations."""


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

    def __init__(self, catalog: JudgeCatalog):
        self.catalog = catalog

    def choices(self) -> list[tuple[str, str]]:
        return [(judge_label(k), k) for k in self.catalog.keys]

    def evaluate(self, files, references: str = "", manifest=None, judge: str = PASTED, transcripts: str = "",
                 language: str = "", segmentation: str = DEFAULT_SEGMENTATION):
        """Yields (summary markdown, per-clip table, chart, CSV path) for the uploaded clips.

        The first yield clears the previous result, so an error never sits under old scores;
        an error also replaces the summary (and is raised as gr.Error, the toast)."""
        import gradio as gr

        loading = judge not in (PASTED, "", None)
        yield ("Loading the ASR judge and scoring… (a Hugging Face model loads once; the first time can take a "
               "while)" if loading else "Scoring…"), None, None, None
        try:
            with user_errors("Evaluation"):
                report = self._score(files, references, manifest, judge, transcripts, language, segmentation)
                out = _csv_folder().reserve("scores.csv")
                write_csv(out, TABLE_HEADERS, report.rows())  # full precision; the table shows TABLE_DIGITS
        except gr.Error as exc:
            yield error_line("Not scored", exc), None, None, None
            raise
        yield report.markdown(), report.table_rows(TABLE_DIGITS), chart(report), str(out)

    def _score(self, files, references, manifest, judge, transcripts, language, segmentation):
        """score_uploads with the form's fields; errors as UserError worded for this form."""
        try:
            return score_uploads(_paths(files), references or "", _path(manifest), judge or PASTED, transcripts or "",
                                 language or "", segmentation or DEFAULT_SEGMENTATION, catalog=self.catalog)
        except ASRModelUnavailable as exc:  # offline, or the hub out of reach: the fix in this form's terms
            raise UserError(
                f"The ASR model {exc.model!r} is not on this machine and {exc.reason}. Choose “{PASTED_LABEL}” or, "
                f"for English, “{SPHINX_LABEL}”; the app's operator can download it once (`hf download {exc.model}`) "
                "or start the app with another --asr-model.") from None
        except ValueError as exc:
            raise UserError(str(exc)) from None
        except RuntimeError:  # ASRError: the judge could not load (a broken model folder, a missing package)
            log.exception("loading the ASR judge %s failed", judge)
            raise UserError(f"The ASR judge {judge_label(judge)} could not be loaded; the app's log says why.") from None


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
        "A reference with one inline tag (`<laugh>`, `<chuckle>`, `<sigh>`) also gets a NoVA verdict; the "
        "transcript must then mark sounds too (e.g. `(laughs)` or `<laugh>`)."
    )
    with gr.Row():
        files = gr.File(label="Clips", file_count="multiple", type="filepath", elem_id="eval-files")
        manifest = gr.File(label="Manifest CSV (optional): file, text[, language, transcript]", file_types=[".csv"],
                           type="filepath")
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
    run = gr.Button("Score", variant="primary", elem_id="eval-score")
    summary = gr.Markdown(elem_id="eval-summary")
    table = gr.Dataframe(headers=TABLE_HEADERS, label="Per clip", wrap=True, elem_id="eval-table")
    plot = gr.Plot(label="Chart")
    csv_file = gr.File(label="Scores (CSV)", interactive=False)
    run.click(handlers.evaluate, inputs=[files, references, manifest, judge, transcripts, language, segmentation],
              outputs=[summary, table, plot, csv_file], api_name="evaluate", concurrency_id="asr",
              concurrency_limit=1, show_progress_on=[table])  # the summary line says what is happening
