"""The Synthesise tab's custom inputs: the lexicon upload and editor, and the sampling sliders.

    lexicon = lexicon_upload()          # a gr.File whose value reaches the handler as its path
    rows = lexicon_editor()             # a gr.Dataframe whose value reaches the handler as its rows
    sliders = sampling_sliders()        # {setting name: slider}, one per wire setting

Each is built inside an open `gr.Blocks` (`webapp.synth_tab.build_synth_tab` lays them out).
"""

from __future__ import annotations

from rumik_app.request import wire_settings
from webapp.common import checked_slider
from webapp.scripts import EDITOR_COLUMNS, EDITOR_ROWS, LEXICON_SUFFIXES, MAX_EDITOR_ROWS


def lexicon_upload():
    """The lexicon upload, handed on as its path: the handler's own check (`read_lexicon_upload`)
    gives the one message for a wrong type or size (Gradio's type check would refuse it before
    the handler, with its own words, and fail the live preview's event too). The page's file
    picker still offers only LEXICON_SUFFIXES."""
    import gradio as gr

    component = gr.File(label="Pronunciation lexicon (optional): PLS, TSV or JSON, for your requests only",
                        file_types=list(LEXICON_SUFFIXES), file_count="single", type="filepath",
                        elem_id="lexicon-file", height=90)

    def path_of(payload):
        if payload is None:
            return None
        files = getattr(payload, "root", None)
        first = files[0] if isinstance(files, list) and files else payload
        return getattr(first, "path", None)

    component.preprocess = path_of
    return component


def lexicon_editor():
    """The lexicon editor (*My words*): a table of EDITOR_COLUMNS, EDITOR_ROWS blank rows to
    start, three fixed columns, rows added by the visitor (the handler refuses more than
    MAX_EDITOR_ROWS: Gradio's own row limits are not enforced). Handed on as its rows (lists of
    cells), read by `read_lexicon_editor`; None (an API caller without it) is no table."""
    import gradio as gr

    component = gr.Dataframe(
        value=[["" for _ in EDITOR_COLUMNS] for _ in range(EDITOR_ROWS)], headers=list(EDITOR_COLUMNS),
        datatype="str", type="array", row_count=EDITOR_ROWS,
        column_count=(len(EDITOR_COLUMNS), "fixed"),  # as Gradio keeps it: the page offers no column to add
        interactive=True, show_row_numbers=True, wrap=True, max_height=300, elem_id="lexicon-editor",
        label=f"My words (optional, up to {MAX_EDITOR_ROWS} rows): the word, how to say it, and languages "
              "(optional codes such as hi, mr); for your requests only")

    def rows_of(payload):
        return None if payload is None else payload.data

    component.preprocess = rows_of
    return component


def sampling_sliders() -> dict:
    """One slider per sampling setting a client sets (`rumik_app.request.wire_settings`): the
    declared range, step, label and default."""
    sliders = {}
    for spec in wire_settings():
        slider = spec.metadata["slider"]
        sliders[spec.name] = checked_slider(slider.low, slider.high, value=spec.default, step=slider.step,
                                            label=slider.label, elem_id=spec.name.replace("_", "-"))
    return sliders
