"""What a rater of a MOS, CMOS, SMOS or MUSHRA campaign can do: pass the qualification (MOS),
get the next trial of their own queue, report a stimulus played, and rate the trial.

Library module behind the campaign server (`webapp.campaign.trial_ui`; no command line)::

    queues = TrialQueues(campaign, TrialStore(layout.database), ServedFolder())
    queues.qualification_clips("asha")          # MOS: the hearing check first ([] once passed)
    queues.submit_qualification("asha", ["381", "705", "264"])   # True: passed; False ends the session
    trial = queues.next_trial("asha")           # ShownTrial (clips copied to the served folder) or None: done
    queues.played("asha", trial.entry_id, 0)    # the page reports each stimulus it played
    queues.submit("asha", trial.entry_id, [4])  # True: stored; False: stored before

The rater is the signed-in user (or a crowd participant's checked token), never a form field;
an entry of another rater's queue is refused with AccessDenied, the same answer as for an
entry of nobody's. Scores are checked against the design's scale before anything is stored, and
a trial is accepted only once the page has played every one of its stimuli (P.808's and
BS.1534's must-play; the server records each play).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from rumik_app.audio import write_wav
from webapp.access import AccessDenied
from webapp.campaign.definition import Campaign, CampaignError, PromptView
from webapp.campaign.designs import REFERENCE, TrialPlan, clip_key
from webapp.campaign.queues import NOT_YOURS, claim_rater_slot
from webapp.campaign.raters import is_admin
from webapp.campaign.store import NotYourItem
from webapp.campaign.trial_store import TrialStore
from webapp.common import UserError
from webapp.storage import ServedFolder

# design -> (lowest, highest, whole numbers only)
SCALES = {"mos": (1, 5, True), "smos": (1, 5, True), "cmos": (-3, 3, True), "mushra": (0, 100, True)}
QUALIFICATION_PASS = 2  # digits-in-noise trials of the 3 that must be heard right
FAILED_QUALIFICATION = ("Thank you for your time. This test needs a quiet place and headphones, and the hearing check "
                        "did not pass, so it ends here; you will not be asked to rate clips.")


@dataclass(frozen=True)
class ShownTrial:
    entry_id: str
    design: str
    kind: str  # test | gold | trap (the page shows them alike)
    done: int
    total: int
    clips: tuple[Path, ...]  # served copies under random names, in play order
    reference: Path | None  # smos: the voice reference; mushra: the open reference; else None
    view: PromptView  # the words of the trial's prompt


class TrialQueues:
    """Every rater's queue of one trial-design campaign."""

    def __init__(self, campaign: Campaign, store: TrialStore, served: ServedFolder | None = None,
                 has_login: Callable[[str], bool] | None = None):
        plan = campaign.assignment()
        if not isinstance(plan, TrialPlan):
            raise CampaignError(f"Campaign {campaign.name!r} has no trial plan yet: some clips are missing. Run "
                                "`python -m webapp.campaign create` again with the same arguments to finish them.")
        self.campaign, self.store, self.served, self.plan, self.has_login = campaign, store, served, plan, has_login
        self.entries = plan.entries()
        self.clips = campaign.clip_by_key()
        self.design = plan.design

    # ------------------------------------------------------------------ rater side
    def slot_for(self, rater: str) -> int:
        return claim_rater_slot(self.campaign, self.store, len(self.plan.slots), rater, self.has_login)

    def needs_qualification(self) -> bool:
        return self.design == "mos" and self.campaign.options.qualification

    def qualification_clips(self, rater: str) -> list[Path]:
        """The hearing check's clips (served copies) while the rater has not taken it; [] after a
        pass; UserError (the polite end) after a fail."""
        if not rater or is_admin(rater):
            raise AccessDenied("The admin login has no rating queue; sign in as a rater.")
        if not self.needs_qualification():
            return []
        state = self.store.qualification(self.campaign.name, rater)
        if state is False:
            raise UserError(FAILED_QUALIFICATION)
        if state:
            return []
        return [self._publish(key) for key in self._qualification_keys()]

    def submit_qualification(self, rater: str, answers: list[str]) -> bool:
        """Check the digits heard; the first result is final. UserError (the polite end) on a fail."""
        self.slot_for(rater)  # the admin, a removed login or a full campaign: refused as everywhere
        if not self.needs_qualification():
            return True
        keys = self._qualification_keys()
        if self.store.qualification(self.campaign.name, rater) is None:
            if not isinstance(answers, list) or len(answers) != len(keys):
                raise UserError(f"Type the digits you heard in each of the {len(keys)} clips.")
            heard = ["".join(ch for ch in str(a or "")[:32] if ch.isdigit()) for a in answers]
            right = sum(h == self.clips[k]["answer"] for h, k in zip(heard, keys, strict=True))
            self.store.record_qualification(self.campaign.name, rater, right >= QUALIFICATION_PASS, heard)
        if not self.store.qualification(self.campaign.name, rater):
            raise UserError(FAILED_QUALIFICATION)
        return True

    def _qualification_keys(self) -> list[str]:
        return sorted((k for k, r in self.clips.items() if r.get("role") == "qualification"),
                      key=lambda k: int(k.rsplit(":", 1)[1]))

    def _require_qualified(self, rater: str) -> None:
        if self.needs_qualification() and not self.store.qualification(self.campaign.name, rater):
            if self.store.qualification(self.campaign.name, rater) is False:
                raise UserError(FAILED_QUALIFICATION)
            raise UserError("Take the hearing check first (reload the page).")

    def progress_of(self, rater: str) -> tuple[int, int]:
        slot = self.slot_for(rater)
        return len(self.store.rated_entries(self.campaign.name, slot)), len(self.plan.slots[slot])

    def next_trial(self, rater: str) -> ShownTrial | None:
        """The first unrated trial of the rater's queue, its clips published; None when done."""
        slot = self.slot_for(rater)
        self._require_qualified(rater)
        queue = self.plan.slots[slot]
        rated = self.store.rated_entries(self.campaign.name, slot)
        trial = next((t for t in queue if t.entry_id not in rated), None)
        if trial is None:
            return None
        reference = None
        if self.design == "mushra":
            # BS.1534's open reference beside the hidden one (another copy, another URL); every clip of the
            # page padded to the longest, so no duration points at the hidden reference.
            keys = [*trial.stimuli, clip_key(trial.prompt_id, REFERENCE)]
            *clips, reference = self._publish_padded(keys)
            clips = tuple(clips)
        else:
            clips = tuple(self._publish(key) for key in trial.stimuli)
            if self.design == "smos" and trial.reference:
                reference = self._publish(trial.reference)
        self.store.mark_shown(self.campaign.name, trial.entry_id, rater)
        # Gold and trapping trials show their prompt's words too: a page without them would give them away.
        view = self.campaign.prompt_view(trial.prompt_id)
        return ShownTrial(trial.entry_id, self.design, trial.kind, len(rated), len(queue), clips, reference, view)

    def _publish(self, key: str) -> Path:
        return self._served().copy(self.campaign.clip_file(self.clips[key]))

    def _publish_padded(self, keys: list[str]) -> list[Path]:
        """Served copies of the clips, each padded with silence to the longest one's length."""
        files = [self.campaign.clip_file(self.clips[key]) for key in keys]
        longest = max(sf.info(str(f)).frames for f in files)
        out = []
        with tempfile.TemporaryDirectory() as tmp:
            for k, path in enumerate(files):
                samples, rate = sf.read(str(path), dtype="float32")
                padded = write_wav(Path(tmp) / f"{k}.wav", np.pad(samples, (0, longest - len(samples))), rate)
                out.append(self._served().copy(padded))
        return out

    def _served(self) -> ServedFolder:
        if self.served is None:
            raise RuntimeError("TrialQueues was built without a served folder; it cannot show clips")
        return self.served

    def _own(self, rater: str, entry_id: str):
        slot = self.slot_for(rater)
        trial = self.entries.get((entry_id or "").strip())
        if trial is None or trial.slot != slot:
            raise AccessDenied(NOT_YOURS)
        return trial

    def played(self, rater: str, entry_id: str, stimulus: int) -> None:
        """The page started playing stimulus `stimulus` of the rater's trial."""
        trial = self._own(rater, entry_id)
        if not isinstance(stimulus, int) or not 0 <= stimulus < len(trial.stimuli):
            raise UserError(f"No stimulus {stimulus!r} on this page.")
        try:
            self.store.mark_played(self.campaign.name, trial, stimulus, rater)
        except NotYourItem:
            raise AccessDenied(NOT_YOURS) from None

    def submit(self, rater: str, entry_id: str, scores: list) -> bool:
        """Store the rater's scores for one of their trials; False if it was stored before."""
        trial = self._own(rater, entry_id)
        self._require_qualified(rater)
        values = self._checked(trial, scores)
        if trial.entry_id not in self.store.rated_entries(self.campaign.name, trial.slot):  # P.808 and BS.1534
            unplayed = sorted(set(range(len(trial.stimuli))) - self.store.played(self.campaign.name, trial.entry_id))
            if unplayed:
                raise UserError("Play every clip before you submit (not played yet: "
                                + ", ".join(str(i + 1) for i in unplayed) + ").")
        try:
            return self.store.submit_trial(self.campaign.name, trial, rater, self._rows(trial, values))
        except NotYourItem:
            raise AccessDenied(NOT_YOURS) from None

    def _checked(self, trial, scores: list) -> list[float]:
        low, high, whole = SCALES[self.design]
        wanted = len(trial.stimuli) if self.design == "mushra" else 1
        if not isinstance(scores, (list, tuple)) or len(scores) != wanted:
            raise UserError(f"Give {wanted} score(s) on this page, each from {low} to {high}.")
        out = []
        for score in scores:
            if isinstance(score, bool):  # JSON true is not a 1
                raise UserError(f"Give every score as a number from {low} to {high}.")
            try:
                value = float(score)
            except (TypeError, ValueError):
                raise UserError(f"Give every score as a number from {low} to {high}.") from None
            if not low <= value <= high or (whole and not value.is_integer()):
                raise UserError(f"Scores on this page go from {low} to {high} in whole steps; {score!r} is not one.")
            out.append(value)
        return out

    def _rows(self, trial, values: list[float]) -> list[dict]:
        """One stored row per rated stimulus (the rating-row format of docs/campaigns.md)."""
        if self.design == "cmos":
            test_at = trial.roles.index("test")
            raw = values[0]  # the second clip relative to the first (P.808 CCR)
            return [{"design": "cmos", "stimulus": 0, "role": "test", "condition": trial.conditions[test_at],
                     "reference": trial.reference, "clip_id": self.clips[trial.stimuli[test_at]]["clip_id"],
                     "score": raw if test_at == 1 else -raw, "raw_score": raw, "side": "AB"[test_at]}]
        reference = self.clips[trial.reference]["clip_id"] if self.design == "smos" and trial.reference else None
        indices = range(len(trial.stimuli)) if self.design == "mushra" else [0]
        return [{"design": self.design, "stimulus": i, "role": trial.roles[i], "condition": trial.conditions[i],
                 "reference": reference, "clip_id": self.clips[trial.stimuli[i]]["clip_id"], "score": values[i],
                 "expected": trial.expected} for i in indices]

    # ------------------------------------------------------------------ admin side
    def progress(self) -> list[dict]:
        """One row per slot: slot, rater (None: free), done, total, last submission."""
        holders = self.store.slots(self.campaign.name)
        activity = self.store.activity(self.campaign.name)
        rated: dict[int, int] = {}
        for entry_id in self.store.rated_entries(self.campaign.name):
            slot = self.entries[entry_id].slot
            rated[slot] = rated.get(slot, 0) + 1
        return [{"slot": s, "rater": holders.get(s), "done": rated.get(s, 0), "total": len(queue),
                 "last": activity.get(holders.get(s), {}).get("last")} for s, queue in enumerate(self.plan.slots)]
