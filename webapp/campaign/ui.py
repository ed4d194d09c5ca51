"""The campaign server: each rater signs in and rates their own queue; the admin sees progress,
results and exports.

    python -m webapp.campaign serve --name pilot --data-dir outputs/app [--host 0.0.0.0 --port 7870]

This module serves A/B campaigns; the MOS, CMOS, SMOS and MUSHRA designs get the trial page of
`webapp.campaign.trial_app` (same login, guard and launch). A separate Gradio app (not a tab
of `app.py`): Gradio's `auth` closes a whole app, and the
public demo must stay open; the campaign app also needs no model (its clips are made in
advance), so it runs on any small machine. Every page, file and API call needs a login
(`webapp.campaign.raters.CampaignLogin`). The page itself holds nothing personal: on load it
asks the server, which reads the signed-in user from Gradio's session (`request.username`),
never from a form field. Raters get their own queue only (`webapp.campaign.queues`); the
`admin` login gets the admin view only.

API (all need the session cookie of a login; `gradio_client.Client(url, auth=(user, password))`):

    /campaign_page      who is signed in, and which view to show
    /campaign_item      the rater's current item: progress, prompt, clips A and B, the questions
    /campaign_submit    entry id + answers -> status, and the next item
    /campaign_results   admin: progress per rater, results (markdown, with the audio judges as last
                        computed), charts
    /campaign_judges    admin: compute the audio judges now (DNSMOS, speaker similarity, Spearman's rho
                        with the listeners; minutes; saved in the campaign folder, webapp.campaign.judges)
    /campaign_export    admin: an export (kept in the campaign folder) as downloads
"""

from __future__ import annotations

import contextlib
import html
import secrets
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr

from evaluation import nova
from webapp.access import AccessDenied, AdminGate, throttled_auth
from webapp.audio_judges import AudioJudges
from webapp.campaign.definition import Campaign, CampaignError, raters_path
from webapp.campaign.export import export_campaign, results_for, write_charts
from webapp.campaign.judges import compute_judges, first_hearings, judges_markdown, load_judges
from webapp.campaign.queues import RaterQueues, ShownItem
from webapp.campaign.raters import ADMIN_USER, CampaignLogin, ExpiringSessions, RatersFile, is_admin
from webapp.campaign.store import Answer, CampaignStore
from webapp.campaign.trial_app import CrowdOptions, build_trial_app
from webapp.common import UserError, user_errors
from webapp.guard import QueueFairness, VisitorGuard, proxy_settings, trusted_proxies
from webapp.ratings import NO_PREFERENCE, NOT_HEARD, UNSURE_INDEX
from webapp.storage import DataLayout, ServedFolder, check_not_served, served_roots

CONCURRENCY = 8  # rating events are light (a file copy, one SQLite transaction)
QUEUE_MAX_SIZE = 128
MAX_UPLOAD = "1mb"  # the campaign app takes no uploads
SIDES = ("A", "B")
ITEM_OUTPUTS = 15  # outputs of an item; the API returns 14 (the form column's visibility is layout)
PROGRESS_HEADERS = ["slot", "rater", "done", "total", "last rating (UTC)"]
EXPORT_DOWNLOADS = ("campaign_export.zip", "results.md", "ratings.csv", "indicemo_judgments.jsonl")
TAG_QUESTION = ("This text asks for a non-verbal sound (a laugh, a chuckle or a sigh) somewhere. For each clip: did "
                "you hear one? Which, and just before which word?")
CSS = "#campaign-progress progress { width: 100%; height: 1.1em; }"
RUBRIC = ("**Expression score, 1-5**, for each clip against the intended delivery: *tone and pitch* (does the "
          "melody fit?), *energy and dynamics* (loudness and intensity), *timing and phrasing* (pauses, emphasis, "
          "pace) and *authenticity and sustainment* (sounds like a real person, and keeps it up to the end). "
          "1 = flat or wrong emotion, 3 = recognisable but uneven, 5 = convincing throughout. Play both clips in "
          "full before answering; the clips come in a random order.")


def progress_html(done: int, total: int) -> str:
    note = " · all done, thank you!" if done >= total else ""
    return (f'<progress value="{done}" max="{max(total, 1)}"></progress>'
            f"<div><b>{done} / {total}</b> rated{note}</div>")


def prompt_markdown(item: ShownItem) -> str:
    v = item.view
    lines = [f"**Text:** {html.escape(v.text)}"]
    if v.target_delivery or v.intent:
        lines.append("**Intended delivery:** " + " · ".join(x for x in (v.target_delivery, html.escape(v.intent)) if x))
    if v.request is not None:
        lines.append(f"*{TAG_QUESTION}*")
    return "\n\n".join(lines)


class CampaignHandlers:
    """The event functions; each reads the signed-in user from `request.username`."""

    def __init__(self, campaign: Campaign, queues: RaterQueues, store: CampaignStore, served: ServedFolder,
                 audio_judges: AudioJudges | None = None):
        self.campaign, self.queues, self.store, self.served = campaign, queues, store, served
        self.audio_judges = audio_judges or AudioJudges()  # loaded on the first "Compute audio judges"

    def page(self, request: gr.Request = None):
        user = getattr(request, "username", None)
        if is_admin(user):
            return "Signed in as **admin**.", gr.update(visible=False), gr.update(visible=True)
        return f"Signed in as **{html.escape(user or '?')}**.", gr.update(visible=True), gr.update(visible=False)

    def item(self, request: gr.Request = None):
        """The rater's current item (nothing for the admin)."""
        user = getattr(request, "username", None)
        if is_admin(user):
            return (gr.skip(),) * ITEM_OUTPUTS
        with user_errors("Loading your next item"):
            shown = self.queues.next_item(user or "")
            if shown is None:
                done, total = self.queues.progress_of(user or "")
        if shown is None:
            return (progress_html(done, total), "", "", None, None, *[gr.update(value=None)] * 2,
                    *[gr.update(value=None, visible=False)] * 4, None, None, gr.update(value=None),
                    gr.update(visible=False))
        tagged = shown.view.request is not None
        where = []
        if tagged:
            words = shown.view.request.words
            where = [(f"“{w}”", i) for i, w in enumerate(words)]
            where += [("after the last word", len(words)), ("heard it, unsure where", UNSURE_INDEX)]
        questions = [gr.update(value=None, visible=tagged) if k % 2 == 0 else
                     gr.update(value=None, visible=False, choices=where) for k in range(4)]  # heard, where per side
        return (progress_html(shown.done, shown.total), prompt_markdown(shown), shown.entry_id, str(shown.clip_a),
                str(shown.clip_b), gr.update(value=None), gr.update(value=None), *questions, None, None,
                gr.update(value=None), gr.update(visible=True))

    def submit(self, entry_id, score_a, score_b, preference, heard_a=None, where_a=None, heard_b=None, where_b=None,
               request: gr.Request = None):
        """Store the signed-in rater's answers for `entry_id` (theirs only), then the next item."""
        user = getattr(request, "username", None)
        with user_errors("Submitting the rating"):
            if not (entry_id or "").strip():
                raise UserError("No item on this page: reload it.")
            scores = [_int_or_none(score, f"Give clip {side} an expression score from 1 to 5.")
                      for side, score in zip(SIDES, (score_a, score_b), strict=True)]
            if None in scores:
                raise UserError(f"Give clip {SIDES[scores.index(None)]} an expression score from 1 to 5.")
            where = [_int_or_none(w, "Click the word the sound came just before.") for w in (where_a, where_b)]
            answer = Answer(preference or "", *scores, heard_a or None, where[0], heard_b or None, where[1])
            stored = self.queues.submit(user or "", entry_id, answer)
        status = "✓ Stored." if stored else "Already stored (submitted before); here is your next item."
        return (status, *self.item(request))

    def _require_admin(self, request) -> None:
        if not is_admin(getattr(request, "username", None)):
            raise AccessDenied("This is the admin view: sign in as admin.")

    def results(self, request: gr.Request = None):
        """Admin: per-slot progress, the results markdown and the two charts."""
        with user_errors("Computing the results"):
            self._require_admin(request)
            results = results_for(self.campaign, self.store)
            progress = [[p["slot"], p["rater"] or "(free)", p["done"], p["total"], p["last"] or ""]
                        for p in self.queues.progress()]
            with tempfile.TemporaryDirectory() as tmp:
                charts = [str(self.served.copy(p)) for p in write_charts(results, Path(tmp))]
        charts += [None] * (2 - len(charts))
        return progress, results.markdown() + "\n\n" + self._judges_section(), *charts

    def _judges_section(self) -> str:
        return judges_markdown(load_judges(self.campaign), len(first_hearings(self.store.rows(self.campaign.name))))

    def judges(self, request: gr.Request = None) -> str:
        """Admin: judge every clip (DNSMOS, similarity to its system's voice), set them beside the
        ratings so far, save the result in the campaign folder; returns its markdown."""
        with user_errors("Computing the audio judges"):
            self._require_admin(request)
            try:
                compute_judges(self.campaign, self.store, self.audio_judges)
            except CampaignError as exc:
                raise UserError(str(exc)) from None
            return self._judges_section()

    def export(self, request: gr.Request = None) -> list[str]:
        """Admin: write an export into the campaign folder (kept) and return download copies."""
        with user_errors("Exporting"):
            self._require_admin(request)
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            out = self.campaign.exports_dir / f"{stamp}-{secrets.token_hex(3)}"
            files = export_campaign(self.campaign, self.store, out)
            main = [p for p in files if p.name in EXPORT_DOWNLOADS and p.parent == out]
            return [str(p) for p in self.served.publish(main)]


def _int_or_none(value, problem: str) -> int | None:
    """A form number as an int (None if empty); UserError(`problem`) if it is not a whole number."""
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(problem) from None
    if not number.is_integer():
        raise UserError(problem)
    return int(number)


def build_campaign_app(data_dir: str | Path, name: str, served: ServedFolder | None = None,
                       crowd: CrowdOptions | None = None):
    """The campaign's Gradio app (not launched). Raises CampaignError if it is not ready.
    MOS, CMOS, SMOS and MUSHRA campaigns get the trial page (`webapp.campaign.trial_app`), which
    also runs in crowd mode (`crowd`: signed participant links, no login)."""
    layout, served = DataLayout(data_dir), served or ServedFolder()
    check_not_served(layout, served_roots(served))
    campaign = Campaign.open(layout, name)
    if campaign.design != "ab":
        return build_trial_app(layout, campaign, served, crowd)
    if crowd is not None:
        raise CampaignError("Crowd mode (--crowd) serves the mos, cmos, smos and mushra designs; an A/B campaign "
                            "needs rater logins.")
    store = CampaignStore(layout.database)
    queues = RaterQueues(campaign, store, served, has_login=RatersFile(raters_path(layout)).has)
    h = CampaignHandlers(campaign, queues, store, served)
    with gr.Blocks(title=f"Listening test: {name}") as demo:
        gr.Markdown(f"# Listening test: {name}\nListen to both clips, score each, then say which you prefer. "
                    "Your answers are saved at every *Submit*; you can sign out and continue later.")
        with gr.Row():
            who = gr.Markdown(elem_id="campaign-who")
            gr.Button("Sign out", link="/logout", size="sm", scale=0, elem_id="campaign-logout")
        with gr.Column(visible=False, elem_id="rater-view") as rater_view:
            progress = gr.HTML(elem_id="campaign-progress")
            with gr.Column(elem_id="campaign-form") as form:
                prompt = gr.Markdown(elem_id="campaign-prompt")
                entry = gr.Textbox(visible=False, elem_id="campaign-entry")
                gr.Markdown(RUBRIC)
                sides = []
                with gr.Row():
                    for side in SIDES:
                        with gr.Column():
                            clip = gr.Audio(label=f"Clip {side}", type="filepath", interactive=False,
                                            elem_id=f"campaign-clip-{side.lower()}")
                            score = gr.Radio(list(range(1, 6)), label=f"Clip {side}: expression score (1-5)",
                                             elem_id=f"campaign-score-{side.lower()}")
                            heard = gr.Radio([("not heard", NOT_HEARD)] + [(c, c) for c in nova.CLASSES],
                                             visible=False, label=f"Clip {side}: which sound did you hear?",
                                             elem_id=f"campaign-heard-{side.lower()}")
                            where = gr.Radio([], visible=False, label="Just before which word?",
                                             elem_id=f"campaign-where-{side.lower()}")
                            # What is submitted: the clicked word's index. A plain number, so a retried
                            # submission is not checked against the word choices of the next item.
                            where_value = gr.Number(visible=False, precision=0,
                                                    elem_id=f"campaign-where-{side.lower()}-value")
                            sides.append((clip, score, heard, where, where_value))
                preference = gr.Radio([("A", "A"), ("B", "B"), ("No preference", NO_PREFERENCE)],
                                      label="Which clip do you prefer?", elem_id="campaign-preference")
                submit = gr.Button("Submit and next", variant="primary", elem_id="campaign-submit")
            status = gr.Markdown(elem_id="campaign-status")
        with gr.Column(visible=False, elem_id="admin-view") as admin_view:
            refresh = gr.Button("Show progress and results", elem_id="campaign-refresh")
            table = gr.Dataframe(headers=PROGRESS_HEADERS, label="Progress per rater slot", interactive=False,
                                 elem_id="campaign-progress-table")
            results_md = gr.Markdown(elem_id="campaign-results")
            with gr.Row():
                charts = [gr.Image(type="filepath", label=label, interactive=False)
                          for label in ("Mean score (95 % CI)", "Win rate (95 % CI)")]
            judge = gr.Button("Compute audio judges (DNSMOS quality, speaker similarity, their agreement with the "
                              "raters; takes about a second per clip)", elem_id="campaign-judges")
            judges_md = gr.Markdown(elem_id="campaign-judges-result")
            export = gr.Button("Export (results, ratings, IndicEmo judgments, NoVA transcripts, audio judges)")
            files = gr.File(label="Export files", file_count="multiple", interactive=False)

        (clip_a, score_a, heard_a, where_a, value_a), (clip_b, score_b, heard_b, where_b, value_b) = sides
        item_outputs = [progress, prompt, entry, clip_a, clip_b, score_a, score_b, heard_a, where_a, heard_b, where_b,
                        value_a, value_b, preference, form]
        assert len(item_outputs) == ITEM_OUTPUTS
        demo.load(h.page, outputs=[who, rater_view, admin_view], api_name="campaign_page", show_progress="hidden")
        demo.load(h.item, outputs=item_outputs, api_name="campaign_item")
        for _, _, heard, where, value in sides:
            heard.input(lambda heard: gr.update(visible=heard not in (None, "", NOT_HEARD)), inputs=heard,
                        outputs=where, queue=False, show_progress="hidden", api_visibility="private")
            where.change(None, inputs=where, outputs=value, js="(word) => word")  # in the browser, at once
        submit.click(h.submit, inputs=[entry, score_a, score_b, preference, heard_a, value_a, heard_b, value_b],
                     outputs=[status, *item_outputs], api_name="campaign_submit", trigger_mode="once")
        refresh.click(h.results, outputs=[table, results_md, *charts], api_name="campaign_results")
        judge.click(h.judges, outputs=judges_md, api_name="campaign_judges", concurrency_limit=1,
                    concurrency_id="audio_judges")  # one at a time: it holds the CPU for minutes
        export.click(h.export, outputs=files, api_name="campaign_export")
    demo.campaign, demo.campaign_store, demo.data_layout, demo.served_folder = campaign, store, layout, served
    return demo


def launch_campaign(demo, admin: AdminGate, host: str = "127.0.0.1", port: int = 7870, share: bool = False,
                    prevent_thread_lock: bool = False, allowed_hosts: tuple[str, ...] = (),
                    forwarded_allow_ips: str | None = None):
    """Serve the campaign app behind the raters' and the admin's logins, and behind the
    visitor guard (`webapp.guard`: no URL fetches, bounded bodies, our hosts and origins only,
    a share of the queue per session and address, X-Forwarded-For from `forwarded_allow_ips`
    only: None = nobody, or on a Space its proxies). A sign-in's wait (`webapp.access`) is
    awaited in the event loop, before the login's scrypt check runs on a thread."""
    layout, served = demo.data_layout, demo.served_folder
    check_not_served(layout, served_roots(served))
    login = CampaignLogin(RatersFile(raters_path(layout)), admin)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_MAX_SIZE, api_open=False)
    QueueFairness().install(demo)
    app_kwargs = VisitorGuard.options(host, allowed_hosts, share)

    @contextlib.asynccontextmanager
    async def sessions_end(app):  # Gradio's session table, replaced by one whose sessions expire
        app.tokens = ExpiringSessions(login.fingerprint)
        yield

    app_kwargs["lifespan"] = sessions_end
    demo.campaign_login = login
    crowd = getattr(demo, "crowd_gate", None) is not None  # signed participant links instead of logins
    proxies = trusted_proxies(None) if forwarded_allow_ips is None else forwarded_allow_ips
    with proxy_settings(proxies):
        return demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=prevent_thread_lock,
                           allowed_paths=[str(served.root)], blocked_paths=[str(p) for p in layout.private_paths()],
                           auth=None if crowd else throttled_auth(login.throttle, login.acheck),
                           auth_message=f"Sign in with your rater name and password (admin: user '{ADMIN_USER}').",
                           run_history=False, max_file_size=MAX_UPLOAD, ssr_mode=False, css=CSS,
                           quiet=prevent_thread_lock, app_kwargs=app_kwargs)
