"""What a rater can do, for every design: pass the hearing check (when the design has one), get
the next trial of their own queue, report a clip played, and answer the trial; and the admin's
progress per slot.

Library module behind the campaign server (`webapp.campaign.server`; no command line)::

    queues = RaterQueues(campaign, CampaignStore(layout.database), ServedFolder())
    queues.qualification_clips("asha")           # the hearing check first ([] once passed, or none)
    queues.submit_qualification("asha", ["381", "705", "264"])   # True: passed; a fail ends the session
    shown = queues.next_trial("asha")            # ShownTrial (clips copied to the served folder) or None: done
    queues.clip_fetched(shown.clips[0].name)     # the served copy was sent (server.fetches)
    queues.played("asha", shown.entry_id, 0)     # the page reports each clip it played
    queues.submit("asha", shown.entry_id, {"score": 4})          # True: stored; False: stored before
    queues.progress()                            # per slot: rater, done, total (the admin view)

The rater is the signed-in user (Gradio's `request.username`) or a crowd participant's checked
token, never a form field. An entry that is not in that rater's queue is refused with
AccessDenied, the same answer whether it belongs to another rater or to nobody. Answers are
checked against the design's questions before anything is stored, and where the design says
so (`Design.must_play`) a trial is accepted only once the page has played each of its clips
(P.808's and BS.1534's must-play) and no sooner than the clips' length after it was shown. A
play counts only for a clip whose audio was fetched for this rater: clips reach the page as
copies under random names in the served folder, made when the trial is shown (so a URL says
nothing about the system and cannot be guessed by anyone else), and the server records when
such a copy was sent to its end (`server.fetches`); a play reported without that is refused.
The hearing check's clips are drawn per rater, one of each level's pool.
"""

from __future__ import annotations

import secrets
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from rumik_app.audio import write_wav
from webapp.access import AccessDenied
from webapp.campaign.clips.extras import qualification_pool
from webapp.campaign.data.definition import Campaign, CampaignError, PromptView
from webapp.campaign.data.raters import is_admin
from webapp.campaign.data.store import CampaignStore, NotFetched, NotYourItem
from webapp.campaign.designs import design_of, plan_of
from webapp.campaign.trials.plan import Trial
from webapp.common import UserError
from webapp.storage import ServedFolder

REMOVED = "Your rater login was removed from this campaign server; ask the campaign admin if that is a mistake."
NOT_YOURS = "That item is not in your queue (sign in as yourself; reload the page to get your next item)."
QUALIFICATION_PASS = 2  # digits-in-noise trials of the 3 that must be heard right
FAILED_QUALIFICATION = ("Thank you for your time. This test needs a quiet place and headphones, and the hearing check "
                        "did not pass, so it ends here; you will not be asked to rate clips.")
NOT_FETCHED = "Clip {n} has not loaded on this page; wait until it has loaded, then play it."
TOO_SOON = "Listen to every clip to its end before you submit ({seconds:.0f} s of audio on this page)."
MAX_SHOWN_CLIPS = 50_000  # served clip names remembered for their fetch (the oldest forgotten first)


@dataclass(frozen=True)
class ShownTrial:
    entry_id: str
    trial: Trial
    done: int  # trials of the queue rated so far
    total: int  # trials in the queue (repeats included)
    clips: tuple[Path, ...]  # served copies under random names, in play order
    reference: Path | None  # the player above the clips (`Design.shown_reference`), or None
    view: PromptView  # the words of the trial's prompt (gold and trap trials show theirs too)


class RaterQueues:
    """Every rater's queue of one campaign."""

    def __init__(self, campaign: Campaign, store: CampaignStore, served: ServedFolder | None = None,
                 has_login: Callable[[str], bool] | None = None):
        """`served`: where clips are published for raters (None: progress and rating only, no clips).
        `has_login`: whether a rater's login still exists (the server passes `RatersFile.has`), so
        a session signed in before `remove-rater` can neither rate nor claim a freed slot."""
        plan = plan_of(campaign)
        if plan is None:
            raise CampaignError(f"Campaign {campaign.name!r} has no plan yet: some clips are missing. Run "
                                "`python -m webapp.campaign create` again with the same arguments to finish them.")
        self.campaign, self.store, self.served, self.plan, self.has_login = campaign, store, served, plan, has_login
        self.design = design_of(campaign)
        self.entries = plan.entries()
        self.clips = campaign.clip_by_key()
        self._shown: OrderedDict[str, tuple[str, str, int]] = OrderedDict()  # served name -> rater, entry, stimulus
        self._shown_lock = threading.Lock()

    # ------------------------------------------------------------------ rater side
    def slot_for(self, rater: str) -> int:
        """The rater's slot (claimed on first use): AccessDenied for the admin or a removed login,
        UserError when every slot is taken."""
        if not rater or is_admin(rater):
            raise AccessDenied("The admin login has no rating queue; sign in as a rater.")
        if self.has_login is not None and not self.has_login(rater):
            raise AccessDenied(REMOVED)
        slot = self.store.claim_slot(self.campaign.name, rater, len(self.plan.slots))
        if slot is None:
            raise UserError(f"Every rater slot of campaign {self.campaign.name!r} is taken; ask the admin to add "
                            "slots (a new campaign with more --rater-slots).")
        return slot

    def queue(self, rater: str) -> list[Trial]:
        return self.plan.slots[self.slot_for(rater)]

    def needs_qualification(self) -> bool:
        return self.design.needs_hearing_check(self.campaign)

    def qualification_clips(self, rater: str) -> list[Path]:
        """The hearing check's clips (served copies) while the rater has not taken it; [] after a
        pass or without one; UserError (the polite end) after a fail."""
        if not rater or is_admin(rater):
            raise AccessDenied("The admin login has no rating queue; sign in as a rater.")
        if not self.needs_qualification():
            return []
        state = self.store.qualification(self.campaign.name, rater)
        if state is False:
            raise UserError(FAILED_QUALIFICATION)
        if state:
            return []
        return [self._publish(key) for key in self._hearing_keys(rater)]

    def _hearing_keys(self, rater: str) -> list[str]:
        """The rater's hearing-check clips, dealt once and kept: of each level's pool, a clip dealt
        least often so far (ties at random), so raters who start one after the other never share a
        clip while the pool lasts, and one rater's answers do not pass another's check."""

        def deal(uses) -> list[str]:
            return [min(level, key=lambda key: (uses[key], secrets.randbelow(1 << 30)))
                    for level in qualification_pool(self.campaign)]

        return self.store.hearing_draw(self.campaign.name, rater, deal)

    def submit_qualification(self, rater: str, answers: list[str]) -> bool:
        """Check the digits heard; the first result is final. UserError (the polite end) on a fail."""
        self.slot_for(rater)  # the admin, a removed login or a full campaign: refused as everywhere
        if not self.needs_qualification():
            return True
        keys = self._hearing_keys(rater)
        if self.store.qualification(self.campaign.name, rater) is None:
            if not isinstance(answers, list) or len(answers) != len(keys):
                raise UserError(f"Type the digits you heard in each of the {len(keys)} clips.")
            heard = ["".join(ch for ch in str(a or "")[:32] if ch.isdigit()) for a in answers]
            right = sum(h == self.clips[k]["answer"] for h, k in zip(heard, keys, strict=True))
            self.store.record_qualification(self.campaign.name, rater, right >= QUALIFICATION_PASS, heard)
        if not self.store.qualification(self.campaign.name, rater):
            raise UserError(FAILED_QUALIFICATION)
        return True

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
        reference_key = self.design.shown_reference(trial)
        keys = [*trial.stimuli, *([reference_key] if reference_key else [])]
        published = self._publish_padded(keys) if self.design.pad_clips else [self._publish(k) for k in keys]
        clips, reference = published[:len(trial.stimuli)], (published[-1] if reference_key else None)
        self._remember_shown(rater, trial.entry_id, clips)
        self.store.mark_shown(self.campaign.name, trial.entry_id, rater, restart=self.design.clock_restarts)
        return ShownTrial(trial.entry_id, trial, len(rated), len(queue), tuple(clips), reference,
                          self.campaign.prompt_view(trial.prompt_id))

    def _remember_shown(self, rater: str, entry_id: str, clips: list[Path]) -> None:
        with self._shown_lock:
            for stimulus, path in enumerate(clips):
                self._shown[path.name] = (rater, entry_id, stimulus)
            while len(self._shown) > MAX_SHOWN_CLIPS:
                self._shown.popitem(last=False)

    def is_shown_clip(self, name: str) -> bool:
        """Whether `name` is a served clip of a trial page (the fetch watch records only those)."""
        with self._shown_lock:
            return name in self._shown

    def clip_fetched(self, name: str) -> None:
        """The served clip `name` was sent to its end: that stimulus of that page counts as fetched
        for the rater it was shown to (nothing for a name that is not a shown trial clip)."""
        with self._shown_lock:
            shown = self._shown.get(name)
        if shown is not None:
            rater, entry_id, stimulus = shown
            self.store.mark_fetched(self.campaign.name, entry_id, stimulus, rater)

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
            raise RuntimeError("RaterQueues was built without a served folder; it cannot show clips")
        return self.served

    def _own(self, rater: str, entry_id: str) -> Trial:
        slot = self.slot_for(rater)
        trial = self.entries.get((entry_id or "").strip()) if isinstance(entry_id, str) else None
        if trial is None or trial.slot != slot:
            raise AccessDenied(NOT_YOURS)
        return trial

    def played(self, rater: str, entry_id: str, stimulus: int) -> None:
        """The page started playing clip `stimulus` of the rater's trial."""
        trial = self._own(rater, entry_id)
        if not isinstance(stimulus, int) or not 0 <= stimulus < len(trial.stimuli):
            raise UserError(f"No stimulus {stimulus!r} on this page.")
        try:
            self.store.mark_played(self.campaign.name, trial, stimulus, rater)
        except NotYourItem:
            raise AccessDenied(NOT_YOURS) from None
        except NotFetched:
            raise UserError(NOT_FETCHED.format(n=stimulus + 1)) from None

    def submit(self, rater: str, entry_id: str, answers: object) -> bool:
        """Store the rater's answers (`Design.questions`) for one of their trials; False if stored before."""
        trial = self._own(rater, entry_id)
        self._require_qualified(rater)
        values = self.design.check_answers(trial, answers, self.campaign.prompt_view(trial.prompt_id))
        if self.design.must_play and trial.entry_id not in self.store.rated_entries(self.campaign.name, trial.slot):
            unplayed = sorted(set(range(len(trial.stimuli))) - self.store.played(self.campaign.name, trial.entry_id))
            if unplayed:
                raise UserError("Play every clip before you submit (not played yet: "
                                + ", ".join(str(i + 1) for i in unplayed) + ").")
            self._require_listening_time(trial)
        try:
            return self.store.submit(self.campaign.name, trial, rater, self.design.rows(trial, values, self.clips))
        except NotYourItem:
            raise AccessDenied(NOT_YOURS) from None

    def listening_seconds(self, trial: Trial) -> float:
        """The audio a page of `trial` plays, in seconds: each clip once (padded clips as the longest)."""
        durations = [float(self.clips[key].get("duration") or 0.0) for key in trial.stimuli]
        return max(durations, default=0.0) * len(durations) if self.design.pad_clips else sum(durations)

    def _require_listening_time(self, trial: Trial) -> None:
        """UserError when less time passed since the page was shown than its clips last."""
        needed = self.listening_seconds(trial)
        elapsed = self.store.seconds_since_shown(self.campaign.name, trial.entry_id)
        if elapsed is None or elapsed < needed:
            raise UserError(TOO_SOON.format(seconds=needed))

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
