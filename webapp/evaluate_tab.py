"""The Evaluate tab of `app.py`: score uploaded clips against reference texts.

Library module (run the app with `python app.py`). Upload clips (WAV/FLAC/OGG/MP3), give
references (typed or a CSV manifest), choose an ASR judge (`evaluation.asr`) or paste
transcripts, and get WER/CER/GCER per clip and corpus-pooled, NoVA verdicts where the
reference carries one inline tag, a chart and a CSV. The work is in `webapp.scoring`.
"GCER clusters" picks the segmentation (evaluation.metrics: "grapheme", the default, or
"unicode"); the summary, the table and the CSV name it with its Unicode version.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from evaluation.report import write_csv
from evaluation.text import DEFAULT_SEGMENTATION, GRAPHEME_PACKAGE, UNICODE_CLUSTERS, segmentation_unicode_version
from webapp.common import UserError, user_errors
from webapp.examples import LANGUAGE_CHOICES
from webapp.scoring import MAX_CLIP_MB, PASTED, TABLE_HEADERS, chart, score_uploads

JUDGE_CHOICES = [
    ("Pasted transcripts", PASTED),
    ("pocketsphinx (English, offline)", "pocketsphinx"),
    ("Hugging Face ASR model (model id below)", "hf"),
]
DEFAULT_HF_MODEL = "openai/whisper-small"


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
    """(summary markdown, per-clip table, chart, CSV path) for the uploaded clips."""
    with user_errors("Evaluation"):
        if judge == "hf":
            if not (hf_model or "").strip():
                raise UserError("Give the Hugging Face model id (e.g. openai/whisper-small) or a local folder.")
            spec = f"hf:{hf_model.strip()}"
        else:
            spec = judge or PASTED
        try:
            report = score_uploads(_paths(files), references or "", _path(manifest), spec, transcripts or "",
                                   language or "", segmentation or DEFAULT_SEGMENTATION)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        except RuntimeError as exc:  # ASRError: judge could not load (offline model, missing package)
            raise UserError(f"The ASR judge could not be loaded: {exc}") from None
        out = Path(tempfile.mkdtemp(prefix="rumik-eval-")) / "scores.csv"
        write_csv(out, TABLE_HEADERS, report.rows())
        return report.markdown(), report.rows(), chart(report), str(out)


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
        hf_model = gr.Textbox(value=DEFAULT_HF_MODEL, label="Hugging Face model id or folder")
        language = gr.Dropdown([("(auto / from manifest)", "")] + LANGUAGE_CHOICES, value="", label="Language")
    segmentation = gr.Radio(segmentation_choices(), value=DEFAULT_SEGMENTATION, label="GCER clusters",
                            info="How Indic text is cut into units for GCER; the two give different numbers.")
    run = gr.Button("Score", variant="primary")
    summary = gr.Markdown()
    table = gr.Dataframe(headers=TABLE_HEADERS, label="Per clip", wrap=True)
    plot = gr.Plot(label="Chart")
    csv_file = gr.File(label="Scores (CSV)", interactive=False)
    run.click(evaluate, inputs=[files, references, manifest, judge, hf_model, transcripts, language, segmentation],
              outputs=[summary, table, plot, csv_file], api_name="evaluate", concurrency_id="asr",
              concurrency_limit=1)
