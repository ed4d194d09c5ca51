"""The rating page of the MOS, CMOS, SMOS and MUSHRA designs, behind raters' logins or, in crowd
mode, behind a signed participant link (Prolific, MTurk) with no login.

    python -m webapp.campaign serve --name mos1 [--crowd]     (webapp.campaign.ui picks this page by design)

API (login mode: the session cookie of a login; crowd mode: the `token` that /campaign_start
returns, passed as the first argument of every call):

    /campaign_start      crowd mode: participant id, sig, study, STUDY_ID, SESSION_ID -> token
    /campaign_item       token -> the current page: the hearing check, a trial, or the end (with
                         the completion code in crowd mode, only once the queue is done)
    /campaign_qualify    token, digits heard in each check clip -> the first trial (or the polite end)
    /campaign_played     token, entry id, stimulus index: the page started playing that stimulus
    /campaign_submit     token, entry id, choice (mos/smos/cmos), slider values (mushra) -> the next page
    /campaign_results    admin (login mode): progress, the publication table and charts
    /campaign_export     admin: the export files
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr

from webapp.campaign.crowd import (
    ID_PARAM,
    SESSION_ID_PARAM,
    SIG_PARAM,
    STUDY_ID_PARAM,
    STUDY_PARAM,
    CrowdError,
    CrowdGate,
    prolific_completion_url,
)
from webapp.campaign.definition import Campaign
from webapp.campaign.designs import ACR_LABELS, CCR_LABELS, MAX_MUSHRA_STIMULI, MUSHRA_BANDS, SIMILARITY_LABELS
from webapp.campaign.raters import is_admin
from webapp.campaign.trials import ShownTrial, TrialQueues
from webapp.common import UserError, user_errors

QUALIFICATION_CLIPS = 3
INSTRUCTIONS = {
    "mos": ("**Listen to the clip, then rate the quality of the speech** (ITU-T P.808, absolute category rating). "
            "Use headphones in a quiet place; play the clip in full before answering."),
    "smos": ("**How similar is the voice of the clip to the reference voice?** Listen to both in full. Judge only "
             "the speaker's voice, not the words, the recording quality or the way it is said."),
    "cmos": ("**Listen to both clips, then rate the quality of the second clip compared with the first** "
             "(ITU-T P.808, comparison category rating)."),
    "mushra": ("**Rate each clip against the reference from 0 to 100** (ITU-R BS.1534, MUSHRA). One of the clips "
               "is the reference itself: give it 100. Play every clip (you may replay them and the reference as "
               "often as you like) before you submit; the bands are 80-100 excellent, 60-80 good, 40-60 fair, "
               "20-40 poor, 0-20 bad."),
}
QUESTION = {"mos": "Quality of the speech", "smos": "Same speaker as the reference?",
            "cmos": "The second clip compared with the first"}
LABELS = {"mos": ACR_LABELS, "smos": SIMILARITY_LABELS, "cmos": CCR_LABELS}
QUALIFY_TEXT = ("**Hearing check first.** Each clip says three digits in noise. Put on headphones, play each clip and "
                "type the digits you hear. It takes a minute and is asked once.")


def scale_choices(design: str) -> list[tuple[str, int]]:
    """The radio's (label, value) pairs, best first, as P.808's forms list them."""
    return [(f"{value}  {label}", value) for value, label in sorted(LABELS[design].items(), reverse=True)]


def band(value: float) -> str:
    return next(label for floor, label in MUSHRA_BANDS if value >= floor)


@dataclass
class Identity:
    """Who is asking: the signed-in user (login mode), or the participant the token proves (crowd mode)."""

    gate: CrowdGate | None = None

    def rater(self, request, token: str | None) -> str:
        if self.gate is None:
            return getattr(request, "username", None) or ""
        return self.gate.resume(token).rater


@contextlib.contextmanager
def visitor_errors(action: str) -> Iterator[None]:
    """`user_errors`, with a refused crowd link or token shown as its own message."""
    with user_errors(action):
        try:
            yield
        except CrowdError as exc:
            raise UserError(str(exc)) from None


class TrialHandlers:
    """The event functions of the trial page. Each returns the page as a dict ("mode": qualify,
    trial, done or admin), which `render` turns into component updates and API clients read."""

    def __init__(self, campaign: Campaign, queues: TrialQueues, identity: Identity):
        self.campaign, self.queues, self.identity = campaign, queues, identity
        self.design = campaign.design

    def start(self, participant, sig=None, study=None, study_id=None, session_id=None, saved=None) -> str:
        """Crowd mode: check the link, count the session, return the page's token. `saved`: the
        token this browser tab kept (a reload): still the participant's current session, it is
        reused, so a reload costs no session."""
        with visitor_errors("Starting the test"):
            if self.identity.gate is None:
                raise UserError("This server runs with logins; there is nothing to start.")
            if saved:
                with contextlib.suppress(CrowdError):
                    session = self.identity.gate.resume(saved)
                    if session.participant_id == participant:
                        return session.token
            query = {ID_PARAM: participant, SIG_PARAM: sig or None, STUDY_PARAM: study or None,
                     STUDY_ID_PARAM: study_id or None, SESSION_ID_PARAM: session_id or None}
            return self.identity.gate.enter(query).token

    def page(self, token=None, request: gr.Request = None) -> dict:
        """The page for the current state: hearing check, next trial, or the end."""
        with visitor_errors("Loading your next page"):
            rater = self.identity.rater(request, token)
            if is_admin(rater) and self.identity.gate is None:
                return {"mode": "admin"}
            checks = self.queues.qualification_clips(rater)
            if checks:
                return {"mode": "qualify", "clips": [str(p) for p in checks]}
            shown = self.queues.next_trial(rater)
            if shown is None:
                return self._done(rater, token)
            return {"mode": "trial", **self._trial(shown)}

    def _trial(self, shown: ShownTrial) -> dict:
        view = shown.view
        prompt = f"**Text:** {html.escape(view.text)}" if view is not None and self.design != "mushra" else ""
        return {"entry": shown.entry_id, "done": shown.done, "total": shown.total, "prompt": prompt,
                "clips": [str(p) for p in shown.clips], "reference": str(shown.reference) if shown.reference else None}

    def _done(self, rater: str, token) -> dict:
        done, total = self.queues.progress_of(rater)
        out = {"mode": "done", "done": done, "total": total, "code": None}
        if self.identity.gate is not None:
            out["code"] = self.identity.gate.finish(token, remaining=total - done)
        return out

    def qualify(self, token, answers, request: gr.Request = None) -> dict:
        with visitor_errors("Checking the hearing test"):
            rater = self.identity.rater(request, token)
            answers = answers if isinstance(answers, list) else [answers]
            self.queues.submit_qualification(rater, [str(a or "") for a in answers])
        return self.page(token, request)

    def played(self, token, entry_id, stimulus, request: gr.Request = None) -> None:
        with visitor_errors("Recording the play"):
            rater = self.identity.rater(request, token)
            try:
                index = int(stimulus)
            except (TypeError, ValueError):
                raise UserError("No such clip on this page.") from None
            self.queues.played(rater, entry_id or "", index)

    def submit(self, token, entry_id, choice, sliders, request: gr.Request = None) -> dict:
        with visitor_errors("Submitting the rating"):
            rater = self.identity.rater(request, token)
            if not (entry_id or "").strip():
                raise UserError("No trial on this page: reload it.")
            if self.design == "mushra":
                trial = self.queues.entries.get(entry_id)
                scores = list(sliders or [])[:len(trial.stimuli) if trial else None]
            else:
                if choice in (None, ""):
                    raise UserError("Choose one answer on the scale.")
                scores = [choice]
            stored = self.queues.submit(rater, entry_id, scores)
        return {"status": "✓ Stored." if stored else "Already stored; here is your next page.",
                **self.page(token, request)}


class TrialPage:
    """The components of the trial page, and `render`, which shows a page dict in them."""

    def __init__(self, design: str):
        self.design = design
        with gr.Column(visible=False, elem_id="qualify-view") as self.qualify_view:
            gr.Markdown(QUALIFY_TEXT)
            self.check_clips, self.check_boxes = [], []
            for n in range(QUALIFICATION_CLIPS):
                with gr.Row():
                    self.check_clips.append(gr.Audio(label=f"Check clip {n + 1}", type="filepath", interactive=False,
                                                     elem_id=f"qualify-clip-{n}"))
                    self.check_boxes.append(gr.Textbox(label="Digits heard", max_length=8,
                                                       elem_id=f"qualify-digits-{n}"))
            self.qualify_button = gr.Button("Submit the hearing check", variant="primary", elem_id="qualify-submit")
        with gr.Column(visible=False, elem_id="trial-view") as self.trial_view:
            self.progress = gr.HTML(elem_id="campaign-progress")
            gr.Markdown(INSTRUCTIONS[design])
            self.prompt = gr.Markdown(elem_id="campaign-prompt")
            self.reference = gr.Audio(label="Reference" if design == "mushra" else "Reference voice", type="filepath",
                                      interactive=False, visible=False, elem_id="trial-reference")
            self.rows, self.clips, self.sliders = [], [], []
            for i in range(MAX_MUSHRA_STIMULI):
                with gr.Row(visible=False) as row:  # the row hides, so unused stimuli leave no gap
                    label = f"Clip {i + 1}" if design in ("cmos", "mushra") else "Clip"
                    self.rows.append(row)
                    self.clips.append(gr.Audio(label=label, type="filepath", interactive=False, visible=False,
                                               elem_id=f"trial-clip-{i}"))
                    self.sliders.append(gr.Slider(0, 100, value=0, step=1, label=f"Clip {i + 1}: score (0-100)",
                                                  visible=False, elem_id=f"trial-slider-{i}"))
            self.scale = gr.Radio(scale_choices(design) if design in LABELS else [], label=QUESTION.get(design, ""),
                                  visible=design in LABELS, elem_id="trial-scale")
            self.submit_button = gr.Button("Submit and next", variant="primary", elem_id="trial-submit")
        with gr.Column(visible=False, elem_id="done-view") as self.done_view:
            self.done = gr.Markdown(elem_id="trial-done")
        self.status = gr.Markdown(elem_id="campaign-status")

    def outputs(self) -> list:
        return [self.qualify_view, *self.check_clips, *self.check_boxes, self.trial_view, self.progress, self.prompt,
                self.reference, *self.rows, *self.clips, *self.sliders, self.scale, self.done_view, self.done]

    def render(self, page: dict) -> list:
        """Updates for `outputs()` showing `page` (a TrialHandlers dict)."""
        mode = page.get("mode")
        checks = page.get("clips", []) if mode == "qualify" else []
        out = [gr.update(visible=mode == "qualify")]
        out += [gr.update(value=checks[n] if n < len(checks) else None) for n in range(QUALIFICATION_CLIPS)]
        out += [gr.update(value="") for _ in range(QUALIFICATION_CLIPS)]
        trial = mode == "trial"
        clips = page.get("clips", []) if trial else []
        done, total = page.get("done", 0), page.get("total", 0)
        out += [gr.update(visible=trial), progress_bar(done, total), page.get("prompt", ""),
                gr.update(value=page.get("reference"), visible=trial and bool(page.get("reference")))]
        out += [gr.update(visible=i < len(clips)) for i in range(MAX_MUSHRA_STIMULI)]
        out += [gr.update(value=clips[i] if i < len(clips) else None, visible=i < len(clips))
                for i in range(MAX_MUSHRA_STIMULI)]
        mushra = self.design == "mushra"
        out += [gr.update(value=0, visible=mushra and i < len(clips)) for i in range(MAX_MUSHRA_STIMULI)]
        out += [gr.update(value=None), gr.update(visible=mode == "done"), done_markdown(page)]
        return out


def progress_bar(done: int, total: int) -> str:
    return f'<progress value="{done}" max="{max(total, 1)}"></progress><div><b>{done} / {total}</b> rated</div>'


def done_markdown(page: dict) -> str:
    if page.get("mode") != "done":
        return ""
    text = f"**All done, thank you!** You rated {page.get('done')} of {page.get('total')} pages."
    if page.get("code"):
        text += (f"\n\nYour completion code: **`{page['code']}`**. Enter it on your study page, or "
                 f"[return to Prolific]({prolific_completion_url(page['code'])}).")
    return text


# In crowd mode the page starts from its link: the participant id and signature come from the URL.
# The token is kept in the tab's sessionStorage, so a reload resumes the session instead of starting one.
TOKEN_KEY = "rumik-crowd-token"
START_JS = """() => { const p = new URLSearchParams(window.location.search);
  return ["PROLIFIC_PID", "sig", "study", "STUDY_ID", "SESSION_ID"].map((k) => p.get(k) || "")
    .concat([window.sessionStorage.getItem("%s") || ""]); }""" % TOKEN_KEY
KEEP_JS = """(token) => { if (token) { window.sessionStorage.setItem("%s", token); } return token; }""" % TOKEN_KEY


def build_trial_page(demo: gr.Blocks, handlers: TrialHandlers, admin_panel) -> TrialPage:
    """The trial page's components and events inside `demo` (a gr.Blocks being built).
    `admin_panel()` builds the admin view (login mode) and returns its column, or None."""
    crowd = handlers.identity.gate is not None
    token = gr.Textbox(visible=False, elem_id="trial-token")
    entry = gr.Textbox(visible=False, elem_id="trial-entry")
    page_json = gr.JSON(visible=False)
    page = TrialPage(handlers.design)
    admin_view = admin_panel() if not crowd else None
    views = page.outputs() + ([admin_view] if admin_view is not None else [])

    def show(result: dict) -> list:
        shown = [result, result.get("entry", ""), result.get("status", ""), *page.render(result)]
        return shown + ([gr.update(visible=result.get("mode") == "admin")] if admin_view is not None else [])

    outputs = [page_json, entry, page.status, *views]

    def load_page(token_value, request: gr.Request):
        return show(handlers.page(token_value, request))

    # Gradio fills a gr.Request parameter only among the positional ones before *args: first, here.
    def qualify_page(request: gr.Request, token_value, *digits):
        return show(handlers.qualify(token_value, list(digits), request))

    def submit_page(request: gr.Request, token_value, entry_id, choice, *sliders):
        return show(handlers.submit(token_value, entry_id, choice, list(sliders), request))

    private = {"api_visibility": "private"}
    if crowd:
        link = [gr.Textbox(visible=False) for _ in range(6)]
        started = demo.load(handlers.start, inputs=link, outputs=token, js=START_JS, api_name="campaign_start")
        started.success(None, inputs=token, outputs=None, js=KEEP_JS).success(load_page, inputs=token,
                                                                               outputs=outputs, **private)
    else:
        demo.load(load_page, inputs=token, outputs=outputs, **private)
    gr.Button(visible=False).click(handlers.page, inputs=token, outputs=page_json, api_name="campaign_item")
    page.qualify_button.click(qualify_page, inputs=[token, *page.check_boxes], outputs=outputs, **private)
    gr.Button(visible=False).click(handlers.qualify, inputs=[token, gr.JSON(visible=False)], outputs=page_json,
                                   api_name="campaign_qualify")
    for i, clip in enumerate(page.clips):
        clip.play(handlers.played, inputs=[token, entry, gr.Number(i, visible=False, precision=0)], outputs=None,
                  api_name="campaign_played" if i == 0 else None, api_visibility="public" if i == 0 else "private",
                  queue=False, show_progress="hidden")
    # No status overlay: a refused submit (clips not played, no answer) would cover every output, players included,
    # with an "Error" box until each is closed; the toast says what is wrong.
    page.submit_button.click(submit_page, inputs=[token, entry, page.scale, *page.sliders], outputs=outputs,
                             trigger_mode="once", show_progress="hidden", **private)
    gr.Button(visible=False).click(handlers.submit, inputs=[token, entry, gr.Number(visible=False),
                                                            gr.JSON(visible=False)],
                                   outputs=page_json, api_name="campaign_submit")
    return page
