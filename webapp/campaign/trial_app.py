"""The campaign server's app for the MOS, CMOS, SMOS and MUSHRA designs: the trial page
(`webapp.campaign.trial_ui`) plus the admin's results and exports, in login or crowd mode.

Library module (the command line is `python -m webapp.campaign serve --name N [--crowd]`;
`webapp.campaign.ui.build_campaign_app` calls this for every design but A/B)::

    demo = build_trial_app(layout, campaign, served, crowd=CrowdOptions(completion_code="ABCD1234"))

Crowd mode has no login and no admin view (results come from `python -m webapp.campaign results`);
its participants start from signed links (`python -m webapp.campaign links`).
"""

from __future__ import annotations

import secrets
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr

from webapp.access import AccessDenied
from webapp.campaign.crowd import (
    MAX_SESSIONS_PER_ID,
    CrowdGate,
    CrowdLinks,
    ParticipantStore,
    completion_code,
    default_max_participants,
)
from webapp.campaign.definition import Campaign, raters_path
from webapp.campaign.raters import RatersFile, is_admin
from webapp.campaign.trial_results import export_trials, trial_results, write_trial_charts
from webapp.campaign.trial_store import TrialStore
from webapp.campaign.trial_ui import Identity, TrialHandlers, build_trial_page
from webapp.campaign.trials import TrialQueues
from webapp.common import user_errors
from webapp.storage import DataLayout, ServedFolder

PROGRESS_HEADERS = ["slot", "rater", "done", "total", "last rating (UTC)"]
TITLES = {"mos": "MOS (ITU-T P.808 ACR)", "cmos": "CMOS", "smos": "Speaker similarity (SMOS)",
          "mushra": "MUSHRA (ITU-R BS.1534)"}


@dataclass(frozen=True)
class CrowdOptions:
    """Crowd mode's settings (`serve --crowd`)."""

    completion_code: str | None = None  # the study's code as set in Prolific (else one generated per campaign)
    max_participants: int | None = None  # default: one per rater slot
    max_sessions: int = MAX_SESSIONS_PER_ID


def crowd_gate(layout: DataLayout, campaign: Campaign, options: CrowdOptions) -> CrowdGate:
    return CrowdGate(CrowdLinks.for_layout(layout, campaign.name), ParticipantStore(layout.database),
                     options.max_participants or default_max_participants(campaign.rater_slots),
                     completion_code(campaign.folder, options.completion_code), options.max_sessions)


class AdminHandlers:
    """Login mode's admin view: progress, the publication table, charts and exports."""

    def __init__(self, campaign: Campaign, queues: TrialQueues, store: TrialStore, served: ServedFolder):
        self.campaign, self.queues, self.store, self.served = campaign, queues, store, served

    def _require_admin(self, request) -> None:
        if not is_admin(getattr(request, "username", None)):
            raise AccessDenied("This is the admin view: sign in as admin.")

    def results(self, request: gr.Request = None):
        with user_errors("Computing the results"):
            self._require_admin(request)
            results = trial_results(self.campaign, self.store)
            progress = [[p["slot"], p["rater"] or "(free)", p["done"], p["total"], p["last"] or ""]
                        for p in self.queues.progress()]
            with tempfile.TemporaryDirectory() as tmp:
                charts = [str(self.served.copy(p)) for p in write_trial_charts(results, Path(tmp))]
        return progress, results.markdown(), (charts[0] if charts else None)

    def export(self, request: gr.Request = None) -> list[str]:
        with user_errors("Exporting"):
            self._require_admin(request)
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            out = self.campaign.exports_dir / f"{stamp}-{secrets.token_hex(3)}"
            files = export_trials(self.campaign, self.store, out)
            return [str(p) for p in self.served.publish([f for f in files if f.parent == files[0].parent])]


def build_trial_app(layout: DataLayout, campaign: Campaign, served: ServedFolder, crowd: CrowdOptions | None = None):
    """The Gradio app of a trial-design campaign (not launched)."""
    store = TrialStore(layout.database)
    gate = crowd_gate(layout, campaign, crowd) if crowd is not None else None
    has_login = None if gate is not None else RatersFile(raters_path(layout)).has
    queues = TrialQueues(campaign, store, served, has_login=has_login)
    handlers = TrialHandlers(campaign, queues, Identity(gate))
    admin = AdminHandlers(campaign, queues, store, served)
    with gr.Blocks(title=f"Listening test: {campaign.name}") as demo:
        gr.Markdown(f"# Listening test: {TITLES[campaign.design]}\nYour answers are saved at every *Submit*"
                    + ("." if gate is not None else "; you can sign out and continue later."))
        if gate is None:
            gr.Button("Sign out", link="/logout", size="sm", scale=0, elem_id="campaign-logout")

        def admin_panel():
            with gr.Column(visible=False, elem_id="admin-view") as view:
                refresh = gr.Button("Show progress and results", elem_id="campaign-refresh")
                table = gr.Dataframe(headers=PROGRESS_HEADERS, label="Progress per rater slot", interactive=False)
                results_md = gr.Markdown(elem_id="campaign-results")
                chart = gr.Image(type="filepath", label="Scores per condition", interactive=False)
                export = gr.Button("Export (results, ratings in the reference tools' layouts)")
                files = gr.File(label="Export files", file_count="multiple", interactive=False)
            refresh.click(admin.results, outputs=[table, results_md, chart], api_name="campaign_results")
            export.click(admin.export, outputs=files, api_name="campaign_export")
            return view

        build_trial_page(demo, handlers, admin_panel)
    demo.campaign, demo.campaign_store, demo.data_layout, demo.served_folder = campaign, store, layout, served
    demo.crowd_gate = gate
    return demo
