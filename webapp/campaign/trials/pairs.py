"""Blind pairs: every pair of conditions of a prompt, dealt to rater slots with A/B positions
balanced and optional repeats, as the A/B design's plan (docs/ARCHITECTURE.md §13).

Library module (no command line)::

    assignment = build_assignment(prompt_ids, n_conditions=2, raters_per_item=3, rater_slots=6,
                                  repeat_fraction=0.1, seed=0)
    assignment.slots[0]       # the first rater's queue: [Entry(entry_id, slot, position, item_id, left, right, ...)]
    plan = pair_plan("ab", assignment, condition_ids)   # the same queues as a TrialPlan of two-clip trials

The scheme (what listening tests such as P.800/P.808 crowdsourcing and MUSHRA lists do): the
design is fixed before anyone rates. Each prompt is a block holding every pair of conditions
(C(n, 2) blind A/B items), dealt as every design's blocks are (`dealing.deal_blocks`: k copies in
k distinct slots, loads within one block), so a rater who gets a prompt hears all of its pairs
and each pair is heard by k different raters. A/B positions: within each slot, the items of one
condition pair alternate orientation in queue order, balanced across slots (`dealing.Alternation`):
per pair of conditions, |#A - #B| <= 1 in every slot and overall (so per condition, <= n - 1
overall). Repeated items (consistency checks, a share `repeat_fraction` of each queue) come from
the first half of the queue and are shown again in the second half with A and B swapped. The
order and orientations come from a seeded `random.Random(seed)`; entry ids are random tokens.

`Assignment` is also the layout of assignment.json files written before every design shared
`TrialPlan`; `pair_plan` reads them.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from webapp.campaign.data.conditions import DesignError
from webapp.campaign.trials.dealing import Alternation, deal_blocks
from webapp.campaign.trials.plan import TEST, Trial, TrialPlan, clip_key, new_entry_id

MAX_REPEAT_FRACTION = 0.5  # repeats come from the first half of a queue


@dataclass(frozen=True)
class Entry:
    """One place in one rater slot's queue: a blind pair with its A/B orientation."""

    entry_id: str  # random token; the handle a rater's page and the API use
    slot: int
    position: int  # 0-based place in the queue
    item_id: str  # "<prompt id>/<i>-<j>": the pair of conditions i < j on that prompt
    prompt_id: str
    left: int  # condition index played as A
    right: int  # condition index played as B
    repeat_of: str | None = None  # the entry this one repeats (A and B swapped), or None

    @property
    def pair(self) -> tuple[int, int]:
        return (min(self.left, self.right), max(self.left, self.right))


@dataclass
class Assignment:
    seed: int
    raters_per_item: int
    repeat_fraction: float
    slots: list[list[Entry]]

    def entries(self) -> dict[str, Entry]:
        return {e.entry_id: e for queue in self.slots for e in queue}

    def to_json(self) -> dict:
        return {"seed": self.seed, "raters_per_item": self.raters_per_item, "repeat_fraction": self.repeat_fraction,
                "slots": [[asdict(e) for e in queue] for queue in self.slots]}

    @classmethod
    def from_json(cls, data: dict) -> Assignment:
        return cls(data["seed"], data["raters_per_item"], data["repeat_fraction"],
                   [[Entry(**e) for e in queue] for queue in data["slots"]])


def item_id(prompt_id: str, i: int, j: int) -> str:
    return f"{prompt_id}/{i}-{j}"


def build_assignment(prompt_ids: Sequence[str], n_conditions: int, raters_per_item: int, rater_slots: int,
                     repeat_fraction: float = 0.0, seed: int = 0) -> Assignment:
    """The balanced, randomised queues of blind pairs (see the module docstring for the scheme)."""
    if not 0.0 <= repeat_fraction <= MAX_REPEAT_FRACTION:
        raise DesignError("--repeat-fraction must be between 0 and 0.5 (repeats come from the first half of a queue).")
    rng = random.Random(seed)
    dealt = deal_blocks(prompt_ids, raters_per_item, rater_slots, rng)
    pairs = list(itertools.combinations(range(n_conditions), 2))
    sides = Alternation(pairs, rng)  # True: the lower condition index plays A
    slots = []
    for s, prompts in enumerate(dealt):
        queue = [(prompt, pair) for prompt in prompts for pair in pairs]
        rng.shuffle(queue)
        entries = []
        for prompt, (i, j) in queue:
            left, right = (i, j) if sides.first((i, j)) else (j, i)
            entries.append(Entry(new_entry_id(), s, 0, item_id(prompt, i, j), prompt, left, right))
        sides.end_slot()
        slots.append(_renumber(_add_repeats(entries, repeat_fraction, rng)))
    return Assignment(seed, raters_per_item, repeat_fraction, slots)


def _add_repeats(entries: list[Entry], fraction: float, rng: random.Random) -> list[Entry]:
    """Insert repeats of items from the first half into the second half, A and B swapped."""
    n_repeats = math.floor(fraction * len(entries) + 0.5) if entries else 0
    half = len(entries) // 2
    n_repeats = min(n_repeats, half)
    if n_repeats == 0:
        return entries
    originals = rng.sample(entries[:half], n_repeats)
    out = list(entries)
    for orig in originals:
        at = rng.randint(max(half, out.index(orig) + 2), len(out))  # never right after the original
        out.insert(at, Entry(new_entry_id(), orig.slot, 0, orig.item_id, orig.prompt_id, orig.right, orig.left,
                             repeat_of=orig.entry_id))
    return out


def _renumber(entries: list[Entry]) -> list[Entry]:
    return [replace(e, position=pos) for pos, e in enumerate(entries)]


def pair_trial(entry: Entry, condition_ids: Sequence[str]) -> Trial:
    """An entry as a trial of two test clips, A first."""
    ids = [condition_ids[entry.left], condition_ids[entry.right]]
    return Trial(entry.entry_id, entry.slot, entry.position, entry.item_id, entry.prompt_id, TEST,
                 tuple(clip_key(entry.prompt_id, c) for c in ids), (TEST, TEST), tuple(ids),
                 repeat_of=entry.repeat_of)


def pair_plan(design: str, assignment: Assignment, condition_ids: Sequence[str]) -> TrialPlan:
    """The assignment's queues as a TrialPlan of `design` (condition indices named by their ids)."""
    return TrialPlan(design, assignment.seed, assignment.raters_per_item,
                     [[pair_trial(e, condition_ids) for e in queue] for queue in assignment.slots])
