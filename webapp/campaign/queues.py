"""What a signed-in rater can do: get the next item of their own queue, and rate it.

Library module behind the campaign server (`webapp.campaign.ui`; no command line)::

    queues = RaterQueues(campaign, CampaignStore(layout.database), ServedFolder())
    item = queues.next_item("asha")         # ShownItem (clips copied to the served folder) or None: done
    queues.submit("asha", item.entry_id, Answer("A", 4, 2))     # True: stored; False: stored before
    queues.progress()                       # per slot: rater, done, total (the admin view)

The rater is always the signed-in user (Gradio's `request.username`), never a form field.
An entry id that is not in that rater's queue is refused with AccessDenied, the same answer
whether it belongs to another rater or to nobody. Clips reach the page as copies under
random names in the served folder, made when the item is shown, so the URL says nothing
about the system and cannot be guessed by anyone else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evaluation import nova
from webapp.access import AccessDenied
from webapp.campaign.definition import Campaign, CampaignError, PromptView
from webapp.campaign.design import Entry
from webapp.campaign.raters import is_admin
from webapp.campaign.store import PREFERENCES, Answer, CampaignStore, NotYourItem
from webapp.common import UserError
from webapp.ratings import NOT_HEARD, SCORES, UNSURE_INDEX
from webapp.storage import ServedFolder

REMOVED = "Your rater login was removed from this campaign server; ask the campaign admin if that is a mistake."
NOT_YOURS = "That item is not in your queue (sign in as yourself; reload the page to get your next item)."


@dataclass(frozen=True)
class ShownItem:
    entry_id: str
    done: int  # items of the queue rated so far
    total: int  # items in the queue (repeats included)
    clip_a: Path  # served copies under random names
    clip_b: Path
    view: PromptView


class RaterQueues:
    """Every rater's queue of one campaign."""

    def __init__(self, campaign: Campaign, store: CampaignStore, served: ServedFolder | None = None,
                 has_login: Callable[[str], bool] | None = None):
        """`served`: where clips are published for raters (None: progress and rating only, no clips).
        `has_login`: whether a rater's login still exists (the server passes `RatersFile.has`), so
        a session signed in before `remove-rater` can neither rate nor claim a freed slot."""
        self.has_login = has_login
        plan = campaign.assignment()
        if plan is None:
            raise CampaignError(f"Campaign {campaign.name!r} has no assignment yet: some clips are missing. Run "
                                "`python -m webapp.campaign create` again with the same arguments to finish them.")
        self.campaign, self.store, self.served, self.plan = campaign, store, served, plan
        self.entries = plan.entries()
        self.clips = campaign.clips()

    # ------------------------------------------------------------------ rater side
    def slot_for(self, rater: str) -> int:
        """The rater's slot (claimed on first use); UserError for the admin or when all are taken."""
        return claim_rater_slot(self.campaign, self.store, len(self.plan.slots), rater, self.has_login)

    def queue(self, rater: str) -> list[Entry]:
        return self.plan.slots[self.slot_for(rater)]

    def progress_of(self, rater: str) -> tuple[int, int]:
        slot = self.slot_for(rater)
        return len(self.store.rated_entries(self.campaign.name, slot)), len(self.plan.slots[slot])

    def next_item(self, rater: str) -> ShownItem | None:
        """The first unrated entry of the rater's queue, its clips published; None when done."""
        slot = self.slot_for(rater)
        queue = self.plan.slots[slot]
        rated = self.store.rated_entries(self.campaign.name, slot)
        entry = next((e for e in queue if e.entry_id not in rated), None)
        if entry is None:
            return None
        if self.served is None:
            raise RuntimeError("RaterQueues was built without a served folder; it cannot show clips")
        clip_a, clip_b = (self.served.copy(self.campaign.clip_file(self._clip(entry.prompt_id, side)))
                          for side in (entry.left, entry.right))
        self.store.mark_shown(self.campaign.name, entry.entry_id, rater)
        return ShownItem(entry.entry_id, len(rated), len(queue), clip_a, clip_b,
                         self.campaign.prompt_view(entry.prompt_id))

    def submit(self, rater: str, entry_id: str, answer: Answer) -> bool:
        """Store the rater's answer for one of their entries; False if it was stored before."""
        slot = self.slot_for(rater)
        entry = self.entries.get((entry_id or "").strip())
        if entry is None or entry.slot != slot:
            raise AccessDenied(NOT_YOURS)
        answer = self._checked(entry, answer)
        conditions = (self.campaign.conditions[entry.left].id, self.campaign.conditions[entry.right].id)
        try:
            return self.store.submit(self.campaign.name, entry, rater, answer, conditions)
        except NotYourItem:
            raise AccessDenied(NOT_YOURS) from None

    def _clip(self, prompt_id: str, condition: int) -> dict:
        return self.clips[(prompt_id, condition)]

    def _checked(self, entry: Entry, a: Answer) -> Answer:
        """The answer with the NoVA fields normalised; UserError naming what is missing."""
        for side, score in (("A", a.score_a), ("B", a.score_b)):
            if score not in SCORES:
                raise UserError(f"Give clip {side} an expression score from 1 to 5.")
        if a.preference not in PREFERENCES:
            raise UserError("Choose a preference: A, B or no preference.")
        request = self.campaign.prompt_view(entry.prompt_id).request
        if request is None:
            return Answer(a.preference, a.score_a, a.score_b)
        heard = []
        for side, cls, where in (("A", a.heard_a, a.where_a), ("B", a.heard_b, a.where_b)):
            if cls not in (*nova.CLASSES, NOT_HEARD):
                raise UserError(f"Clip {side}: say whether you heard a laugh, chuckle or sigh (or 'not heard').")
            if cls == NOT_HEARD:
                heard += [cls, None]
            elif where is None or not UNSURE_INDEX <= int(where) <= len(request.words):
                raise UserError(f"Clip {side}: click the word the sound came just before (or 'unsure where').")
            else:
                heard += [cls, int(where)]
        return Answer(a.preference, a.score_a, a.score_b, *heard)

    # ------------------------------------------------------------------ admin side
    def progress(self) -> list[dict]:
        """One row per slot: slot, rater (None: free), done, total, last submission."""
        holders = self.store.slots(self.campaign.name)
        activity = self.store.activity(self.campaign.name)
        rated_by_slot: dict[int, int] = {}
        for entry_id in self.store.rated_entries(self.campaign.name):
            slot = self.entries[entry_id].slot
            rated_by_slot[slot] = rated_by_slot.get(slot, 0) + 1
        return [{"slot": s, "rater": holders.get(s), "done": rated_by_slot.get(s, 0), "total": len(queue),
                 "last": activity.get(holders.get(s), {}).get("last")} for s, queue in enumerate(self.plan.slots)]


def claim_rater_slot(campaign: Campaign, store: CampaignStore, n_slots: int, rater: str,
                     has_login: Callable[[str], bool] | None) -> int:
    """The rater's slot of any design's queues (claimed on first use): AccessDenied for the admin or
    a removed login, UserError when every slot is taken."""
    if not rater or is_admin(rater):
        raise AccessDenied("The admin login has no rating queue; sign in as a rater.")
    if has_login is not None and not has_login(rater):
        raise AccessDenied(REMOVED)
    slot = store.claim_slot(campaign.name, rater, n_slots)
    if slot is None:
        raise UserError(f"Every rater slot of campaign {campaign.name!r} is taken; ask the admin to add slots "
                        "(a new campaign with more --rater-slots).")
    return slot
