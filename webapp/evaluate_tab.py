"""The Evaluate tab of `app.py`: score uploaded clips against reference texts.

Library module (run the app with `python app.py`). Upload clips (WAV/FLAC/OGG/MP3), give
references (typed or a CSV manifest), choose an ASR judge (`evaluation.asr`) or paste
transcripts, and get WER/CER/GCER per clip and corpus-pooled, NoVA verdicts where the
reference carries one inline tag, a chart and a CSV. The work is in `webapp.scoring`.
"GCER clusters" picks the segmentation (evaluation.metrics: "grapheme", the default, or
"unicode"); the summary, the table and the CSV name it with its Unicode version.
A run first clears the previous result (an error never sits under old scores); a guide
says which judge suits which language and what its limits are.
"""

from __future__ import annotations

import functools

from evaluation.asr import WHISPER_LANGUAGES, ASRModelUnavailable
from evaluation.report import write_csv
from evaluation.text import DEFAULT_SEGMENTATION, GRAPHEME_PACKAGE, UNICODE_CLUSTERS, segmentation_unicode_version
from webapp.common import UserError, error_line, user_errors
from webapp.examples import LANGUAGE_CHOICES
from webapp.scoring import MAX_CLIP_MB, PASTED, TABLE_HEADERS, chart, score_uploads
from webapp.storage import ServedFolder

PASTED_LABEL = "Pasted transcripts"
SPHINX_LABEL = "pocketsphinx (English, offline)"
HF_LABEL = "Hugging Face ASR model (model id below)"
HF_MODEL_LABEL = "Hugging Face model id or folder"
JUDGE_CHOICES = [(PASTED_LABEL, PASTED), (SPHINX_LABEL, "pocketsphinx"), (HF_LABEL, "hf")]
DEFAULT_HF_MODEL = "openai/whisper-small"
TABLE_DIGITS = 3  # rates in the per-clip table; the CSV keeps full precision
JUDGE_GUIDE = f"""**Which judge for which language**
- **{PASTED_LABEL}**: any language. Transcripts from listeners or an ASR you trust; the only judge that can
  mark laughs and sighs for NoVA (write them as `<laugh>` or `(laughs)`).
- **{SPHINX_LABEL}**: English only; a small classic (HMM) model that needs no download. Good enough for a
  quick check of clean read English, unreliable on short, synthetic or expressive clips (it heard espeak-ng's
  "hello world" as "will"), and it never transcribes vocalisations: do not report its numbers.
- **{HF_LABEL}**: any transformers ASR model, e.g. `openai/whisper-large-v3` (the benchmark's judge).
  Whisper knows {", ".join(sorted(WHISPER_LANGUAGES))} (it gets the language as a hint); it was not trained
  on the other scheduled languages (Odia, Bodo, Santali, Manipuri, ...), so expect high error rates there:
  use an ASR model made for them, or pasted transcripts. `whisper-small` is quicker but much weaker on Indic
  scripts. Downloaded on first use (large-v3: ~3 GB) unless you give a local folder; loaded once per app.
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


def evaluate(files, references: str = "", manifest=None, judge: str = PASTED, hf_model: str = DEFAULT_HF_MODEL,
             transcripts: str = "", language: str = "", segmentation: str = DEFAULT_SEGMENTATION):
    """Yields (summary markdown, per-clip table, chart, CSV path) for the uploaded clips.

    The first yield clears the previous result, so an error never sits under old scores;
    an error also replaces the summary (and is raised as gr.Error, the toast)."""
    import gradio as gr

    loading = judge not in (PASTED, "", None)
    yield ("Loading the ASR judge and scoring… (a Hugging Face model loads once; the first time can take a while)"
           if loading else "Scoring…"), None, None, None
    try:
        with user_errors("Evaluation"):
            report = _score(files, references, manifest, judge, hf_model, transcripts, language, segmentation)
            out = _csv_folder().reserve("scores.csv")
            write_csv(out, TABLE_HEADERS, report.rows())  # full precision; the table shows TABLE_DIGITS
    except gr.Error as exc:
        yield error_line("Not scored", exc), None, None, None
        raise
    yield report.markdown(), report.table_rows(TABLE_DIGITS), chart(report), str(out)


def _score(files, references, manifest, judge, hf_model, transcripts, language, segmentation):
    """score_uploads with the form's fields; errors as UserError worded for this form."""
    if judge == "hf":
        if not (hf_model or "").strip():
            raise UserError("Give the Hugging Face model id (e.g. openai/whisper-small) or a local folder.")
        spec = f"hf:{hf_model.strip()}"
    else:
        spec = judge or PASTED
    try:
        return score_uploads(_paths(files), references or "", _path(manifest), spec, transcripts or "",
                             language or "", segmentation or DEFAULT_SEGMENTATION)
    except ASRModelUnavailable as exc:  # offline, or the hub out of reach: the fix in this form's terms
        raise UserError(
            f"The ASR model {exc.model!r} is not on this machine and {exc.reason}. Fix: type the path of a local "
            f"model folder in “{HF_MODEL_LABEL}”; or choose “{PASTED_LABEL}” or, for English, “{SPHINX_LABEL}” "
            f"as the ASR judge; or download it once where there is internet (`hf download {exc.model}`) and copy "
            "the Hugging Face cache to this machine.") from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    except RuntimeError as exc:  # ASRError: judge could not load (a broken model folder, a missing package)
        raise UserError(f"The ASR judge could not be loaded: {exc}") from None


def _path(f) -> str | None:
    if f is None:
        return None
    return f if isinstance(f, str) else getattr(f, "name", None) or f.get("path")


def _paths(files) -> list[str]:
    return [p for p in (_path(f) for f in (files or [])) if p]


def build_evaluate_tab() -> None:
    """Lay out the Evaluate tab inside an open `gr.Tab` and wire its events."""
    import gradio as gr

    gr.Markdown(
        f"Upload clips (WAV, FLAC, OGG or MP3, up to {MAX_CLIP_MB} MB each) and their reference texts. "
        "Typed references and transcripts: one line per clip in file-name order, or `name.wav | text`. "
        "A reference with one inline tag (`<laugh>`, `<chuckle>`, `<sigh>`) also gets a NoVA verdict; the "
        "transcript must then mark sounds too (e.g. `(laughs)` or `<laugh>`)."
    )
    with gr.Row():
        files = gr.File(label="Clips", file_count="multiple", type="filepath", elem_id="eval-files")
        manifest = gr.File(label="Manifest CSV (optional): file, text[, language, transcript]", file_types=[".csv"],
                           type="filepath")
    with gr.Row():
        references = gr.Textbox(value="", label="References (if no manifest)", lines=4)
        transcripts = gr.Textbox(value="", label="Pasted transcripts (for 'Pasted transcripts')", lines=4)
    with gr.Row():
        judge = gr.Radio(JUDGE_CHOICES, value=PASTED, label="ASR judge")
        hf_model = gr.Textbox(value=DEFAULT_HF_MODEL, label=HF_MODEL_LABEL)
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
    run.click(evaluate, inputs=[files, references, manifest, judge, hf_model, transcripts, language, segmentation],
              outputs=[summary, table, plot, csv_file], api_name="evaluate", concurrency_id="asr",
              concurrency_limit=1, show_progress_on=[table])  # the summary line says what is happening
