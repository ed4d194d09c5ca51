"""The campaign server's event functions, for every design: a rater's page (the hearing check, a
trial, the end), plays and answers; and the admin's progress, results, audio judges and export.

Library module behind `webapp.campaign.server.app` (no command line)::

    handlers = RatingHandlers(campaign, queues, Identity(gate_or_none))
    handlers.page(token, request)                 # {"mode": "qualify" | "trial" | "done" | "admin", ...}
    handlers.submit(token, entry_id, {"score": 4}, request)     # {"status": "✓ Stored.", **the next page}
    admin = AdminHandlers(campaign, queues, store, served)
    admin.results(request)                        # progress rows, results markdown, chart files

Each returns the page as a dict, which the page renders (`server.page.RatingPage.render`) and API
clients read: "who" (login mode), "entry", "done", "total", "prompt" (markdown), "clips" (served
paths in play order), "reference", "tag_words" (the words of the prompt's inline tag, when the
page asks about it), "code" (crowd mode, at the end), "status" (after a submission).
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr

from webapp.access import AccessDenied
from webapp.audio_judges import AudioJudges
from webapp.campaign.analysis.judges import compute_judges
from webapp.campaign.data.crowd import (
    EXPIRES_PARAM,
    ID_PARAM,
    SESSION_ID_PARAM,
    SIG_PARAM,
    STUDY_ID_PARAM,
    STUDY_PARAM,
    CrowdError,
)
from webapp.campaign.data.crowd_gate import CrowdGate
from webapp.campaign.data.definition import Campaign, CampaignError
from webapp.campaign.data.raters import is_admin
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.queues import RaterQueues, ShownTrial
from webapp.campaign.reports import clip_ratings, export_campaign, judges_section, results_for
from webapp.common import UserError, user_errors
from webapp.guard import address_key
from webapp.storage import ServedFolder

STORED, STORED_BEFORE = "✓ Stored.", "Already stored (submitted before); here is your next page."


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


class RatingHandlers:
    """A rater's events (module docstring)."""

    def __init__(self, campaign: Campaign, queues: RaterQueues, identity: Identity):
        self.campaign, self.queues, self.identity = campaign, queues, identity
        self.design = queues.design

    def start(self, participant, sig=None, expires=None, study=None, study_id=None, session_id=None, saved=None,
              request: gr.Request = None) -> str:
        """Crowd mode: check the link, count the session, return the page's token. `saved`: the
        token this browser tab kept (a reload): still the participant's current session, it is
        reused, so a reload costs no session. A new id from the study link counts against the
        client's address (`CrowdGate.enter`)."""
        with visitor_errors("Starting the test"):
            if self.identity.gate is None:
                raise UserError("This server runs with logins; there is nothing to start.")
            if saved:
                with contextlib.suppress(CrowdError):
                    session = self.identity.gate.resume(saved)
                    if session.participant_id == participant:
                        return session.token
            query = {ID_PARAM: participant, SIG_PARAM: sig or None, EXPIRES_PARAM: expires or None,
                     STUDY_PARAM: study or None, STUDY_ID_PARAM: study_id or None,
                     SESSION_ID_PARAM: session_id or None}
            client = getattr(request, "client", None)
            return self.identity.gate.enter(query, address_key(getattr(client, "host", None))).token

    def page(self, token=None, request: gr.Request = None) -> dict:
        """The page for the current state: hearing check, next trial, or the end."""
        with visitor_errors("Loading your next page"):
            rater = self.identity.rater(request, token)
            who = {"who": rater} if self.identity.gate is None else {}
            if is_admin(rater) and self.identity.gate is None:
                return {"mode": "admin", **who}
            checks = self.queues.qualification_clips(rater)
            if checks:
                return {"mode": "qualify", "clips": [str(p) for p in checks], **who}
            shown = self.queues.next_trial(rater)
            if shown is None:
                return {**self._done(rater, token), **who}
            return {"mode": "trial", **self._trial(shown), **who}

    def _trial(self, shown: ShownTrial) -> dict:
        return {"entry": shown.entry_id, "done": shown.done, "total": shown.total,
                "prompt": self.design.prompt_markdown(shown.view), "clips": [str(p) for p in shown.clips],
                "reference": str(shown.reference) if shown.reference else None,
                "tag_words": self.design.tag_words(shown.view)}

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

    def submit(self, token, entry_id, answers, request: gr.Request = None) -> dict:
        """Store the rater's answers for `entry_id` (theirs only), then the next page."""
        with visitor_errors("Submitting the rating"):
            rater = self.identity.rater(request, token)
            if not isinstance(entry_id, str) or not entry_id.strip():
                raise UserError("No trial on this page: reload it.")
            stored = self.queues.submit(rater, entry_id, answers)
        return {"status": STORED if stored else STORED_BEFORE, **self.page(token, request)}

    def clip_count(self, entry_id) -> int:
        """The number of clips of trial `entry_id` (the page's per-clip answers are cut to it)."""
        trial = self.queues.entries.get(entry_id) if isinstance(entry_id, str) else None
        return len(trial.stimuli) if trial else self.design.max_clips


class AdminHandlers:
    """The admin view (login mode): progress, results, charts, audio judges and exports."""

    def __init__(self, campaign: Campaign, queues: RaterQueues, store: CampaignStore, served: ServedFolder,
                 audio_judges: AudioJudges | None = None):
        self.campaign, self.queues, self.store, self.served = campaign, queues, store, served
        self.design = queues.design
        self.audio_judges = audio_judges or AudioJudges()  # loaded on the first "Compute audio judges"

    def _require_admin(self, request) -> None:
        if not is_admin(getattr(request, "username", None)):
            raise AccessDenied("This is the admin view: sign in as admin.")

    def results(self, request: gr.Request = None):
        """Per-slot progress, the results markdown (with the audio judges as last computed, where
        the design has them) and the design's charts."""
        with user_errors("Computing the results"):
            self._require_admin(request)
            results = results_for(self.campaign, self.store)
            progress = [[p["slot"], p["rater"] or "(free)", p["done"], p["total"], p["last"] or ""]
                        for p in self.queues.progress()]
            with tempfile.TemporaryDirectory() as tmp:
                charts = [str(self.served.copy(p)) for p in results.charts(Path(tmp))]
            markdown = results.markdown()
            if self.design.audio_judges:
                markdown += "\n\n" + judges_section(self.campaign, self.store)
        charts += [None] * (len(self.design.charts) - len(charts))
        return progress, markdown, *charts

    def judges(self, request: gr.Request = None) -> str:
        """Judge every clip (DNSMOS, similarity to its system's voice), set them beside the ratings
        so far, save the result in the campaign folder; returns its markdown."""
        with user_errors("Computing the audio judges"):
            self._require_admin(request)
            try:
                compute_judges(self.campaign, clip_ratings(self.campaign, self.store), self.audio_judges)
            except CampaignError as exc:
                raise UserError(str(exc)) from None
            return judges_section(self.campaign, self.store)

    def export(self, request: gr.Request = None) -> list[str]:
        """Write an export into the campaign folder (kept) and return download copies of its files."""
        with user_errors("Exporting"):
            self._require_admin(request)
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            out = self.campaign.exports_dir / f"{stamp}-{secrets.token_hex(3)}"
            files = export_campaign(self.campaign, self.store, out)
            return [str(p) for p in self.served.publish([f for f in files if f.parent == out])]
