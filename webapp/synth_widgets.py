"""The Synthesise tab's inputs: a request setting's widget as declared, the lexicon upload and editor.

    tone = setting_widget("tone")                    # the declared Dropdown: "(none)", the tones
    seed = setting_widget("seed", elem_id="seed-a")  # Gradio keywords of the app's own replace the declared
    rest = setting_widgets(exclude=placed)           # {name: widget} of every setting not laid out by hand
    lexicon = lexicon_upload()          # a gr.File whose value reaches the handler as its path
    rows = lexicon_editor()             # a gr.Dataframe whose value reaches the handler as its rows

Each is built inside an open `gr.Blocks` (`webapp.synth_tab.build_synth_tab` lays them out). A
setting's widget comes from its declaration (`rumik_app.request`: Slider, Dropdown, Checkbox,
Textbox or NumberBox, with its label, range or choices, and its default), so a setting declared
there gets its widget here with no edit; no widget has Gradio's own check, so a value an API
caller sends goes on to the request's check and its one message.
"""

from __future__ import annotations

from collections.abc import Collection

from rumik_app.settings import Checkbox, Dropdown, NumberBox, Slider, Textbox
from webapp.common import checked_slider
from webapp.forms import form_default, form_settings
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


NONE_CHOICE = ("(none)", "")  # a dropdown's "not given" (the request reads "" so)


def setting_widget(name: str, **shown):
    """The widget the request setting `name` declares (`spec.metadata["form"]`): its label,
    range or choices, its default (`webapp.forms.form_default`) and an elem_id of its name;
    `shown`: Gradio keywords that add to or replace these (info, placement, a system's voices)."""
    import gradio as gr

    spec = form_settings()[name]
    form, value = spec.metadata["form"], form_default(spec)
    common = {"label": form.label, "elem_id": name.replace("_", "-")}
    if isinstance(form, Slider):
        return checked_slider(form.low, form.high, **{"value": value, "step": form.step, **common, **shown})
    if isinstance(form, Dropdown):
        choices = [NONE_CHOICE] * form.none + [c if isinstance(c, tuple) else (c, c) for c in form.choices]
        return gr.Dropdown(**{"choices": choices, "value": "" if value is None else value, "allow_custom_value": True,
                              **common, **shown})
    if isinstance(form, Checkbox):
        return gr.Checkbox(**{"value": value, **common, **shown})
    if isinstance(form, Textbox):
        return gr.Textbox(**{"value": value or "", "lines": form.lines, **common, **shown})
    if isinstance(form, NumberBox):
        return gr.Number(**{"value": value, "precision": 0, **common, **shown})
    raise TypeError(f"setting {name!r} declares a form the app cannot show: {form!r}")


def setting_widgets(exclude: Collection[str] = ()) -> dict:
    """{name: widget} for every setting the form shows but `exclude`, in declaration order."""
    return {name: setting_widget(name) for name in form_settings() if name not in exclude}
