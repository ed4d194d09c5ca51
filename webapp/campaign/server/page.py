"""The rating page, one builder for every design: the hearing check (where the design has one),
then each trial's prompt, reference, clips and the design's questions (`Design.questions`:
radios, sliders, NoVA's inline-tag question), and the end.

Library module behind the campaign server (`webapp.campaign.server.app`; no command line)::

    page = RatingPage(design, hearing_clips=3)    # inside a gr.Blocks: builds the components
    page.outputs()                                # the components `render` updates, in order
    page.render({"mode": "trial", "clips": [...], ...})   # a page dict (server.handlers) as updates
    page.inputs()                                 # the components whose values `answers` reads
    page.answers(values, n_clips=2)               # {"score": [4, 3], "preference": "A", ...}

Element ids name what they hold, for the browser tests: `rater-view` (with `campaign-progress`,
`qualify-view`, `trial-view`, `done-view`), `campaign-clip-<clip>` (the clip's name, lowercased:
a, b; 1, 2, ...), `campaign-<question>-<clip>` for a per-clip question, `campaign-<question>` for
a page question, `campaign-reference`, `campaign-prompt`, `campaign-submit`.
"""

from __future__ import annotations

import contextlib
import html

import gradio as gr

from webapp.campaign.designs.record import Design
from webapp.campaign.trials.questions import HEARD, WHERE, Question, where_choices
from webapp.ratings import NOT_HEARD

QUALIFY_TEXT = ("**Hearing check first.** Each clip says three digits in noise. Put on headphones, play each clip and "
                "type the digits you hear. It takes a minute and is asked once.")
SLIDER_START = 0


def progress_html(done: int, total: int) -> str:
    note = " · all done, thank you!" if total and done >= total else ""
    return (f'<progress value="{done}" max="{max(total, 1)}"></progress>'
            f"<div><b>{done} / {total}</b> rated{note}</div>")


def done_markdown(page: dict, completion_url) -> str:
    """The end of the queue; in crowd mode with the completion code and the way back to Prolific."""
    text = f"**All done, thank you!** You rated {page.get('done')} of {page.get('total')} pages."
    if page.get("code"):
        text += (f"\n\nYour completion code: **`{page['code']}`**. Enter it on your study page, or "
                 f"[return to Prolific]({completion_url(page['code'])}).")
    return text


class ClipWidgets:
    """One clip slot of the page: its player and its per-clip questions' components."""

    def __init__(self, design: Design, index: int):
        name = design.clip_label(index)
        key = name.lower()
        label = f"Clip {name}" if design.max_clips > 1 else "Clip"
        self.audio = gr.Audio(label=label, type="filepath", interactive=False, elem_id=f"campaign-clip-{key}")
        self.widgets: list[tuple[Question, object]] = []  # (question, component): radios and sliders
        self.heard = self.where = self.where_value = None
        for question in (q for q in design.questions if q.per_clip):
            if question.tag:
                self.heard = gr.Radio(list(question.choices), visible=False, label=question.label_for(name),
                                      elem_id=f"campaign-{HEARD}-{key}")
                self.where = gr.Radio([], visible=False, label="Just before which word?",
                                      elem_id=f"campaign-{WHERE}-{key}")
                # What is submitted: the clicked word's index. A plain number, so a retried
                # submission is not checked against the word choices of the next trial.
                self.where_value = gr.Number(visible=False, precision=0, elem_id=f"campaign-{WHERE}-{key}-value")
            elif question.slider:
                self.widgets.append((question, gr.Slider(question.low, question.high, value=SLIDER_START, step=1,
                                                         label=question.label_for(name),
                                                         elem_id=f"campaign-{question.name}-{key}")))
            else:
                self.widgets.append((question, gr.Radio(list(question.choices), label=question.label_for(name),
                                                        elem_id=f"campaign-{question.name}-{key}")))

    def outputs(self) -> list:
        tag = [self.heard, self.where, self.where_value] if self.heard is not None else []
        return [self.audio, *(c for _, c in self.widgets), *tag]

    def render(self, clip: str | None, tag_words: list[str] | None) -> list:
        updates = [gr.update(value=clip)]
        updates += [gr.update(value=SLIDER_START if q.slider else None) for q, _ in self.widgets]
        if self.heard is not None:
            tagged = tag_words is not None
            updates += [gr.update(value=None, visible=tagged),
                        gr.update(value=None, visible=False, choices=where_choices(tag_words) if tagged else []),
                        gr.update(value=None)]
        return updates

    def inputs(self) -> list:
        return [*(c for _, c in self.widgets), *([self.heard, self.where_value] if self.heard is not None else [])]


class RatingPage:
    """The rating page's components inside a gr.Blocks being built, and `render` (module docstring)."""

    def __init__(self, design: Design, hearing_clips: int = 0):
        self.design, self.hearing_clips = design, hearing_clips
        with gr.Column(visible=False, elem_id="rater-view") as self.rater_view:
            self.progress = gr.HTML(elem_id="campaign-progress")
            self.check_clips, self.check_boxes = [], []
            with gr.Column(visible=False, elem_id="qualify-view") as self.qualify_view:
                gr.Markdown(QUALIFY_TEXT)
                for n in range(hearing_clips):
                    with gr.Row():
                        self.check_clips.append(gr.Audio(label=f"Check clip {n + 1}", type="filepath",
                                                         interactive=False, elem_id=f"qualify-clip-{n}"))
                        self.check_boxes.append(gr.Textbox(label="Digits heard", max_length=8,
                                                           elem_id=f"qualify-digits-{n}"))
                self.qualify_button = gr.Button("Submit the hearing check", variant="primary", elem_id="qualify-submit")
            with gr.Column(visible=False, elem_id="trial-view") as self.trial_view:
                gr.Markdown(design.instructions)
                self.prompt = gr.Markdown(elem_id="campaign-prompt")
                self.reference = gr.Audio(label=design.reference_label, type="filepath", interactive=False,
                                          visible=False, elem_id="campaign-reference")
                self.groups, self.slots = [], []
                with gr.Row() if design.clips_side_by_side else contextlib.nullcontext():
                    for i in range(design.max_clips):
                        # a hidden group leaves no gap where a page has fewer clips
                        group = gr.Column(visible=False) if design.clips_side_by_side else gr.Row(visible=False)
                        with group:
                            self.slots.append(ClipWidgets(design, i))
                        self.groups.append(group)
                self.page_questions = [(q, gr.Radio(list(q.choices), label=q.label, elem_id=f"campaign-{q.name}"))
                                       for q in design.questions if not q.per_clip]
                self.submit_button = gr.Button("Submit and next", variant="primary", elem_id="campaign-submit")
            with gr.Column(visible=False, elem_id="done-view") as self.done_view:
                self.done = gr.Markdown(elem_id="campaign-done")
            self.status = gr.Markdown(elem_id="campaign-status")

    def outputs(self) -> list:
        return [self.rater_view, self.progress, self.qualify_view, *self.check_clips, *self.check_boxes,
                self.trial_view, self.prompt, self.reference, *self.groups,
                *(c for slot in self.slots for c in slot.outputs()), *(c for _, c in self.page_questions),
                self.done_view, self.done]

    def render(self, page: dict, completion_url) -> list:
        """Updates for `outputs()` showing `page` (a `RatingHandlers` dict)."""
        mode = page.get("mode")
        rater, trial = mode in ("qualify", "trial", "done"), mode == "trial"
        checks = page.get("clips", []) if mode == "qualify" else []
        progress = progress_html(page.get("done", 0), page.get("total", 0)) if mode in ("trial", "done") else ""
        out = [gr.update(visible=rater), progress, gr.update(visible=mode == "qualify")]
        out += [gr.update(value=checks[n] if n < len(checks) else None) for n in range(self.hearing_clips)]
        out += [gr.update(value="") for _ in range(self.hearing_clips)]
        clips = page.get("clips", []) if trial else []
        out += [gr.update(visible=trial), page.get("prompt", "") if trial else "",
                gr.update(value=page.get("reference"), visible=trial and bool(page.get("reference")))]
        out += [gr.update(visible=i < len(clips)) for i in range(len(self.groups))]
        words = page.get("tag_words") if trial else None
        for i, slot in enumerate(self.slots):
            out += slot.render(clips[i] if i < len(clips) else None, words)
        out += [gr.update(value=None) for _ in self.page_questions]
        out += [gr.update(visible=mode == "done"), done_markdown(page, completion_url) if mode == "done" else ""]
        return out

    def inputs(self) -> list:
        return [*(c for slot in self.slots for c in slot.inputs()), *(c for _, c in self.page_questions)]

    def answers(self, values: list, n_clips: int) -> dict:
        """The values of `inputs()` as the answers the server checks, per-clip lists cut to `n_clips`."""
        values = list(values)
        per_clip: dict[str, list] = {}
        for slot in self.slots:
            for question, _ in slot.widgets:
                per_clip.setdefault(question.name, []).append(values.pop(0))
            if slot.heard is not None:
                per_clip.setdefault(HEARD, []).append(values.pop(0) or None)
                per_clip.setdefault(WHERE, []).append(values.pop(0))
        out: dict = {name: answers[:n_clips] for name, answers in per_clip.items()}
        for question, _ in self.page_questions:
            out[question.name] = values.pop(0)
        return out

    def wire(self) -> None:
        """The page's own events: the tag question's word choices appear once a sound was heard."""
        for slot in self.slots:
            if slot.heard is None:
                continue
            slot.heard.input(lambda heard: gr.update(visible=heard not in (None, "", NOT_HEARD)), inputs=slot.heard,
                             outputs=slot.where, queue=False, show_progress="hidden", api_visibility="private")
            slot.where.change(None, inputs=slot.where, outputs=slot.where_value, js="(word) => word")  # in the browser


def who_markdown(page: dict) -> str:
    return f"Signed in as **{html.escape(page['who'])}**." if page.get("who") else ""
