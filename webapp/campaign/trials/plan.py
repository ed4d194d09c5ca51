"""A campaign's plan: every rater slot's queue of trials, for every design, and the names of clips.

Library module (no command line; the designs build plans, `webapp.campaign.designs.plan_of` reads one)::

    plan = TrialPlan("mos", seed=0, raters_per_item=3, slots=[[Trial(...), ...], ...])
    plan.entries()["9f3c..."]        # Trial(entry_id, slot, position, item_id, prompt_id, kind, stimuli, ...)
    TrialPlan.from_json(plan.to_json()) == plan

A trial is one page a rater answers. Its stimuli are clip keys ("<prompt id>|<condition id>",
`clip_key`), played in the order given; `roles` says what each one is (test, reference, anchor,
gold, trap) and `conditions` which condition (or extra clip) it is. An A/B pair is a trial of
two test stimuli; a repeated trial (A/B's consistency check) names the one it repeats.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

KINDS = ("test", "gold", "trap")
ROLES = ("test", "reference", "anchor", "gold", "trap")
TEST, REFERENCE, ANCHOR, GOLD, TRAP = "test", "reference", "anchor", "gold", "trap"
ENTRY_TOKEN_BYTES = 12
TRIAL_SEQUENCES = ("stimuli", "roles", "conditions")


def clip_key(prompt_id: str, condition_id: str) -> str:
    """The manifest's name of a clip: one per (prompt, condition) or (prompt, extra role)."""
    return f"{prompt_id}|{condition_id}"


def new_entry_id() -> str:
    """A random token: the handle a rater's page and the API use (it says nothing of the trial)."""
    return secrets.token_hex(ENTRY_TOKEN_BYTES)


@dataclass(frozen=True)
class Trial:
    """One page of a rater's queue."""

    entry_id: str  # random token: the handle the page and the API use
    slot: int
    position: int  # 0-based place in the queue
    item_id: str  # what k raters rate: "<prompt>/<i>-<j>" (a pair), "<prompt>/<cond>", "gold/...", ...
    prompt_id: str
    kind: str  # test | gold | trap
    stimuli: tuple[str, ...]  # clip keys in play order
    roles: tuple[str, ...]  # role of each stimulus
    conditions: tuple[str, ...]  # condition id of each stimulus (reference, anchor, gold:..., trap for extras)
    reference: str | None = None  # a clip key or condition id the design compares against
    expected: float | None = None  # gold, trap: the right answer on the design's scale
    repeat_of: str | None = None  # the trial this one repeats (A/B's consistency check), or None

    @classmethod
    def from_json(cls, data: dict) -> Trial:
        return cls(**{**data, **{k: tuple(data[k]) for k in TRIAL_SEQUENCES}})


def make_trial(slot: int, item: str, prompt: str, kind: str, stimuli: Sequence[str], roles: Sequence[str],
               conditions: Sequence[str], reference: str | None = None, expected: float | None = None,
               repeat_of: str | None = None) -> Trial:
    """A trial with a fresh entry id at position 0 (`renumber` places it)."""
    return Trial(new_entry_id(), slot, 0, item, prompt, kind, tuple(stimuli), tuple(roles), tuple(conditions),
                 reference, expected, repeat_of)


def renumber(slot: int, queue: Sequence[Trial]) -> list[Trial]:
    """The queue's trials with their slot and 0-based positions set."""
    return [replace(t, slot=slot, position=pos) for pos, t in enumerate(queue)]


@dataclass
class TrialPlan:
    """Every rater slot's queue (`slots[s]`), fixed once built: raters may hold its entry ids."""

    design: str
    seed: int
    raters_per_item: int
    slots: list[list[Trial]] = field(default_factory=list)

    def entries(self) -> dict[str, Trial]:
        return {t.entry_id: t for queue in self.slots for t in queue}

    def to_json(self) -> dict:
        return {"design": self.design, "seed": self.seed, "raters_per_item": self.raters_per_item,
                "slots": [[asdict(t) for t in queue] for queue in self.slots]}

    @classmethod
    def from_json(cls, data: dict) -> TrialPlan:
        return cls(data["design"], data["seed"], data["raters_per_item"],
                   [[Trial.from_json(t) for t in queue] for queue in data["slots"]])


@dataclass(frozen=True)
class Extras:
    """The extra clips a plan may deal, by clip key (from the manifest)."""

    gold: Sequence[str] = ()  # clip keys of gold clips ("<prompt>|gold:espeak", ...)
    traps: Sequence[tuple[str, float]] = ()  # (clip key, the answer the clip asks for)
    references: dict[str, str] = field(default_factory=dict)  # prompt id -> the clip key heard beside it
    expected: dict[str, float] = field(default_factory=dict)  # gold clip key -> its known answer
