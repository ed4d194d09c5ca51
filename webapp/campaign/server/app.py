"""The campaign server, one app for every design: each rater signs in (or, in crowd mode, starts
from a signed link) and rates their own queue on the rating page; the admin sees progress,
results and exports.

    python -m webapp.campaign serve --name pilot --data-dir outputs/app [--host 0.0.0.0 --port 7870] [--crowd]

A separate Gradio app (not a tab of `app.py`): Gradio's `auth` closes a whole app, and the public
demo must stay open; the campaign app also needs no model (its clips are made in advance), so it
runs on any small machine. Every page, file and API call needs a login
(`webapp.campaign.data.raters.CampaignLogin`), or in crowd mode the session token of a signed
link (`webapp.campaign.data.crowd`). The page itself holds nothing personal: on load it asks the
server, which reads the signed-in user from Gradio's session (`request.username`), never from a
form field. Raters get their own queue only (`webapp.campaign.queues`); the `admin` login gets
the admin view only (none in crowd mode: results come from `python -m webapp.campaign results`).

API (login mode: the session cookie of a login, `gradio_client.Client(url, auth=(user, password))`;
crowd mode: the token /campaign_start returns, passed first to every call; login mode passes ""):

    /campaign_start      crowd mode: participant id, sig, expires, study, STUDY_ID, SESSION_ID, kept token -> token
    /campaign_item       token -> the current page (`server.handlers`): the hearing check, a trial, the end
    /campaign_qualify    token, digits heard in each check clip -> the first trial (or the polite end)
    /campaign_played     token, entry id, clip index: the page started playing that clip (refused unless
                         the clip's audio was fetched for this rater: `server.fetches`)
    /campaign_submit     token, entry id, answers ({question: value or [value per clip]}) -> the next page
    /campaign_results    admin: progress per rater slot, results (markdown), the design's charts
    /campaign_judges     admin, designs with audio judges: compute them now (DNSMOS, speaker similarity,
                         Spearman's rho with the listeners; minutes; saved in the campaign folder)
    /campaign_export     admin: an export (kept in the campaign folder) as downloads
"""

from __future__ import annotations

import contextlib
import html
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

from webapp.access import AdminGate, throttled_auth
from webapp.campaign.clips.stimuli import QUALIFICATION_SNRS_DB
from webapp.campaign.data.crowd import (
    MAX_SESSIONS_PER_ID,
    CrowdLinks,
    ParticipantStore,
    completion_code,
    default_max_participants,
    prolific_completion_url,
)
from webapp.campaign.data.crowd_gate import STUDY_STARTS_PER_ADDRESS, TIME_LIMIT_S, CrowdGate, StartLimit
from webapp.campaign.data.definition import Campaign, CampaignError, raters_path
from webapp.campaign.data.raters import ADMIN_USER, CampaignLogin, ExpiringSessions, RatersFile
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import design_of, registry
from webapp.campaign.designs.record import Design
from webapp.campaign.queues import RaterQueues
from webapp.campaign.server.fetches import ClipFetchWatch
from webapp.campaign.server.handlers import AdminHandlers, Identity, RatingHandlers
from webapp.campaign.server.page import RatingPage, who_markdown
from webapp.guard import QueueFairness, VisitorGuard, launch_app, trusted_proxies
from webapp.storage import DataLayout, ServedFolder, check_not_served, served_roots

CONCURRENCY = 8  # rating events are light (a file copy, one SQLite transaction)
QUEUE_MAX_SIZE = 128
MAX_UPLOAD = "1mb"  # the campaign app takes no uploads
PROGRESS_HEADERS = ["slot", "rater", "done", "total", "last rating (UTC)"]
CSS = "#campaign-progress progress { width: 100%; height: 1.1em; }"
PRIVATE = {"api_visibility": "private"}
# In crowd mode the page starts from its link: the participant id and signature come from the URL.
# The token is kept in the tab's sessionStorage, so a reload resumes the session instead of starting one.
TOKEN_KEY = "rumik-crowd-token"
START_JS = """() => { const p = new URLSearchParams(window.location.search);
  return ["PROLIFIC_PID", "sig", "expires", "study", "STUDY_ID", "SESSION_ID"].map((k) => p.get(k) || "")
    .concat([window.sessionStorage.getItem("%s") || ""]); }""" % TOKEN_KEY
KEEP_JS = """(token) => { if (token) { window.sessionStorage.setItem("%s", token); } return token; }""" % TOKEN_KEY


@dataclass(frozen=True)
class CrowdOptions:
    """Crowd mode's settings (`serve --crowd`)."""

    completion_code: str | None = None  # the study's code as set in Prolific (else one generated per campaign)
    max_participants: int | None = None  # default: one per rater slot
    max_sessions: int = MAX_SESSIONS_PER_ID
    time_limit_s: float = TIME_LIMIT_S  # first start to completion code; the place is given back after
    study_starts_per_address: int = STUDY_STARTS_PER_ADDRESS  # new ids per client address an hour (study link)


def crowd_gate(layout: DataLayout, campaign: Campaign, options: CrowdOptions, store: CampaignStore) -> CrowdGate:
    return CrowdGate(CrowdLinks.for_layout(layout, campaign.name), ParticipantStore(layout.database),
                     options.max_participants or default_max_participants(campaign.rater_slots),
                     completion_code(campaign.folder, options.completion_code), options.max_sessions,
                     campaign_store=store, time_limit_s=options.time_limit_s,
                     starts=StartLimit(options.study_starts_per_address))


def _admin_panel(design: Design, admin: AdminHandlers) -> gr.Column:
    with gr.Column(visible=False, elem_id="admin-view") as view:
        refresh = gr.Button("Show progress and results", elem_id="campaign-refresh")
        table = gr.Dataframe(headers=PROGRESS_HEADERS, label="Progress per rater slot", interactive=False,
                             elem_id="campaign-progress-table")
        results_md = gr.Markdown(elem_id="campaign-results")
        with gr.Row():
            charts = [gr.Image(type="filepath", label=label, interactive=False) for label in design.charts]
        if design.audio_judges:
            judge = gr.Button("Compute audio judges (DNSMOS quality, speaker similarity, their agreement with the "
                              "raters; takes about a second per clip)", elem_id="campaign-judges")
            judges_md = gr.Markdown(elem_id="campaign-judges-result")
            judge.click(admin.judges, outputs=judges_md, api_name="campaign_judges", concurrency_limit=1,
                        concurrency_id="audio_judges")  # one at a time: it holds the CPU for minutes
        export = gr.Button(f"Export ({design.export_label})", elem_id="campaign-export")
        files = gr.File(label="Export files", file_count="multiple", interactive=False)
    refresh.click(admin.results, outputs=[table, results_md, *charts], api_name="campaign_results")
    export.click(admin.export, outputs=files, api_name="campaign_export")
    return view


def _rating_events(demo: gr.Blocks, page: RatingPage, handlers: RatingHandlers, admin_view, who, crowd: bool):
    """The page's events and the API routes (module docstring) inside `demo`; `admin_view` and
    `who` (the signed-in user's line) are None in crowd mode."""
    token = gr.Textbox(visible=False, elem_id="campaign-token")
    entry = gr.Textbox(visible=False, elem_id="campaign-entry")
    page_json = gr.JSON(visible=False)
    login = [c for c in (admin_view, who) if c is not None]

    def show(result: dict) -> list:
        shown = [result, result.get("entry", ""), result.get("status", ""),
                 *page.render(result, prolific_completion_url)]
        if login:
            shown += [gr.update(visible=result.get("mode") == "admin"), who_markdown(result)]
        return shown

    outputs = [page_json, entry, page.status, *page.outputs(), *login]

    def load_page(token_value, request: gr.Request):
        return show(handlers.page(token_value, request))

    # Gradio fills a gr.Request parameter only among the positional ones before *args: first, here.
    def qualify_page(request: gr.Request, token_value, *digits):
        return show(handlers.qualify(token_value, list(digits), request))

    def submit_page(request: gr.Request, token_value, entry_id, *values):
        answers = page.answers(list(values), handlers.clip_count(entry_id))
        return show(handlers.submit(token_value, entry_id, answers, request))

    if crowd:
        link = [gr.Textbox(visible=False) for _ in range(7)]
        started = demo.load(handlers.start, inputs=link, outputs=token, js=START_JS, api_name="campaign_start")
        started.success(None, inputs=token, outputs=None, js=KEEP_JS).success(load_page, inputs=token,
                                                                               outputs=outputs, **PRIVATE)
    else:
        demo.load(load_page, inputs=token, outputs=outputs, show_progress="hidden", **PRIVATE)
    gr.Button(visible=False).click(handlers.page, inputs=token, outputs=page_json, api_name="campaign_item")
    page.qualify_button.click(qualify_page, inputs=[token, *page.check_boxes], outputs=outputs, **PRIVATE)
    gr.Button(visible=False).click(handlers.qualify, inputs=[token, gr.JSON(visible=False)], outputs=page_json,
                                   api_name="campaign_qualify")
    for i, slot in enumerate(page.slots):
        slot.audio.play(handlers.played, inputs=[token, entry, gr.Number(i, visible=False, precision=0)], outputs=None,
                        api_name="campaign_played" if i == 0 else None,
                        api_visibility="public" if i == 0 else "private", queue=False, show_progress="hidden")
    page.wire()
    # No status overlay: a refused submit (clips not played, no answer) would cover every output, players included,
    # with an "Error" box until each is closed; the toast says what is wrong.
    page.submit_button.click(submit_page, inputs=[token, entry, *page.inputs()], outputs=outputs,
                             trigger_mode="once", show_progress="hidden", **PRIVATE)
    gr.Button(visible=False).click(handlers.submit, inputs=[token, entry, gr.JSON(visible=False)], outputs=page_json,
                                   api_name="campaign_submit")


def build_campaign_app(data_dir: str | Path, name: str, served: ServedFolder | None = None,
                       crowd: CrowdOptions | None = None):
    """The campaign's Gradio app (not launched), in login mode or crowd mode (`crowd`: signed
    participant links, no logins). Raises CampaignError if it is not ready."""
    layout, served = DataLayout(data_dir), served or ServedFolder()
    check_not_served(layout, served_roots(served))
    campaign = Campaign.open(layout, name)
    design = design_of(campaign)
    if crowd is not None and not design.crowd:
        takers = ", ".join(d.name for d in registry().values() if d.crowd)
        raise CampaignError(f"Crowd mode (--crowd) serves the {takers} designs; a {design.title} campaign needs "
                            "rater logins.")
    store = CampaignStore(layout.database, layout=design)
    gate = crowd_gate(layout, campaign, crowd, store) if crowd is not None else None
    has_login = None if gate is not None else RatersFile(raters_path(layout)).has
    queues = RaterQueues(campaign, store, served, has_login=has_login)
    handlers = RatingHandlers(campaign, queues, Identity(gate))
    hearing_clips = len(QUALIFICATION_SNRS_DB) if queues.needs_qualification() else 0
    with gr.Blocks(title=f"Listening test: {campaign.name}") as demo:
        gr.Markdown(f"# Listening test: {html.escape(design.title)}\n{design.intro} Your answers are saved at every "
                    "*Submit*" + ("." if gate is not None else "; you can sign out and continue later."))
        who = None
        if gate is None:
            with gr.Row():
                who = gr.Markdown(elem_id="campaign-who")
                gr.Button("Sign out", link="/logout", size="sm", scale=0, elem_id="campaign-logout")
        page = RatingPage(design, hearing_clips)
        admin_view = _admin_panel(design, AdminHandlers(campaign, queues, store, served)) if gate is None else None
        _rating_events(demo, page, handlers, admin_view, who, crowd=gate is not None)
    demo.campaign, demo.campaign_store, demo.data_layout, demo.served_folder = campaign, store, layout, served
    demo.crowd_gate, demo.rater_queues = gate, queues
    return demo


def launch_campaign(demo, admin: AdminGate, host: str = "127.0.0.1", port: int = 7870, share: bool = False,
                    prevent_thread_lock: bool = False, allowed_hosts: tuple[str, ...] = (),
                    forwarded_allow_ips: str | None = None):
    """Serve the campaign app behind the raters' and the admin's logins (none in crowd mode), and
    behind the visitor guard (`webapp.guard`: no URL fetches, bounded bodies, our hosts and origins
    only, a share of the queue per session and address, X-Forwarded-For from `forwarded_allow_ips`
    only: None = nobody, or on a Space its proxies). A sign-in's wait (`webapp.access`) is awaited
    in the event loop, before the login's scrypt check runs on a thread."""
    layout, served = demo.data_layout, demo.served_folder
    check_not_served(layout, served_roots(served))
    login = CampaignLogin(RatersFile(raters_path(layout)), admin)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_MAX_SIZE, api_open=False)
    QueueFairness().install(demo)
    app_kwargs = VisitorGuard.options(host, allowed_hosts, share)
    # Inside the guard: a trial clip sent to its page is what makes its play count (server.fetches).
    app_kwargs["middleware"].append(Middleware(ClipFetchWatch, queues=demo.rater_queues))

    @contextlib.asynccontextmanager
    async def sessions_end(app):  # Gradio's session table, replaced by one whose sessions expire
        app.tokens = ExpiringSessions(login.fingerprint)
        yield

    app_kwargs["lifespan"] = sessions_end
    demo.campaign_login = login
    crowd = getattr(demo, "crowd_gate", None) is not None  # signed participant links instead of logins
    proxies = trusted_proxies(None) if forwarded_allow_ips is None else forwarded_allow_ips
    return launch_app(demo, proxies, server_name=host, server_port=port, share=share,
                      prevent_thread_lock=prevent_thread_lock,
                      allowed_paths=[str(served.root)], blocked_paths=[str(p) for p in layout.private_paths()],
                      auth=None if crowd else throttled_auth(login.throttle, login.acheck),
                      auth_message=f"Sign in with your rater name and password (admin: user '{ADMIN_USER}').",
                      run_history=False, max_file_size=MAX_UPLOAD, ssr_mode=False, css=CSS,
                      quiet=prevent_thread_lock, app_kwargs=app_kwargs)
