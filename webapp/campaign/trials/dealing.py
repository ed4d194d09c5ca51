"""The shared mechanisms of every design's plan: prompts dealt to rater slots in blocks, sides
alternated so they balance, random Latin squares of screen orders, and gold and trapping trials
mixed into a queue. A design's record says which ones it uses (`webapp.campaign.designs`).

Library module (no command line)::

    rng = random.Random(seed)
    dealt = deal_blocks(prompt_ids, k=3, n_slots=6, rng=rng)     # [[prompt id, ...] per slot]
    sides = Alternation(condition_ids, rng)                       # sides.first(key), sides.end_slot()
    orders = latin_orders(n_pages, stimuli, rng)                  # a fresh Latin square every P pages
    queue = single_clip_trials(slot, prompts, conditions, extras, rng, gold_rate=0.1, trap_rate=0.05, ...)

The rules they keep (checked by `webapp.campaign.trials.balance`):

- blocks: prompts are dealt round-robin over the slots in a shuffled order, each block copied k
  times into k distinct slots, so every test unit is rated by exactly k different raters and
  slot loads differ by at most one block;
- sides: per key (a pair of conditions, a test condition) the orientation alternates in queue
  order, and the next slot starts on the other side when a slot ended one ahead, so
  |#first - #second| <= 1 per key in every slot and overall;
- Latin squares: every item holds every screen place once per P pages, in an order that says
  nothing about the next page's;
- gold and trapping trials: at `rate` of the slot's test trials (at least one when the rate is
  above 0), at random places, never first.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

from webapp.campaign.data.conditions import DesignError
from webapp.campaign.trials.plan import GOLD, TEST, TRAP, Extras, Trial, clip_key, make_trial


def deal_blocks(prompt_ids: Sequence[str], k: int, n_slots: int, rng: random.Random) -> list[list[str]]:
    """Prompts dealt to slots: a shuffled block order, each block's k copies in k distinct slots."""
    if k < 1:
        raise DesignError("--raters-per-item must be at least 1.")
    if n_slots < k:
        raise DesignError(f"--rater-slots {n_slots} is fewer than --raters-per-item {k}: each item needs k different "
                          "raters.")
    if not prompt_ids:
        raise DesignError("The campaign has no prompts.")
    blocks = list(prompt_ids)
    rng.shuffle(blocks)
    queues: list[list[str]] = [[] for _ in range(n_slots)]
    for b, prompt in enumerate(blocks):
        for copy in range(k):
            queues[(b * k + copy) % n_slots].append(prompt)
    return queues


class Alternation:
    """Which side goes first, per key, balanced within every slot and overall (module docstring)."""

    def __init__(self, keys: Iterable[Hashable], rng: random.Random):
        self.start = {key: rng.random() < 0.5 for key in keys}  # the first slot's starting side per key
        self.seen: Counter = Counter()

    def first(self, key: Hashable) -> bool:
        """True when this unit of `key` plays its first side first (the next one alternates)."""
        out = self.start[key] ^ (self.seen[key] % 2 == 1)
        self.seen[key] += 1
        return out

    def end_slot(self) -> None:
        """A slot's queue is done: where it ended one ahead, the next slot starts on the other side."""
        for key, count in self.seen.items():
            if count % 2:
                self.start[key] = not self.start[key]
        self.seen = Counter()


def latin_orders(n_pages: int, items: Sequence, rng: random.Random) -> list[list]:
    """Screen orders of `items` for `n_pages` pages: each run of P = len(items) pages is a fresh
    random Latin square (a cyclic one with its rows, columns and symbols shuffled), so every item
    holds every place once per P pages, and no fixed shift from page to page gives the hidden
    reference away once the anchor is heard."""
    width, out = len(items), []
    while len(out) < n_pages:
        rows, cols, symbols = list(range(width)), list(range(width)), list(items)
        for part in (rows, cols, symbols):
            rng.shuffle(part)
        out += [[symbols[(r + cols[j]) % width] for j in range(width)] for r in rows]
    return out[:n_pages]


def extra_count(rate: float, n_tests: int) -> int:
    """Gold or trapping trials for `n_tests` test trials at `rate`: at least one when rate > 0."""
    return 0 if rate <= 0 or n_tests == 0 else max(1, math.floor(rate * n_tests + 0.5))


def draw(pool: Sequence, n: int, rng: random.Random) -> list:
    """n items of `pool`, without repeats while the pool lasts."""
    out: list = []
    while len(out) < n:
        out += rng.sample(list(pool), min(len(pool), n - len(out)))
    return out


def mix_in(queue: list[Trial], extra: list[Trial], rng: random.Random) -> list[Trial]:
    """Extra trials at random places, never first (a rater's first page is a real one)."""
    out = list(queue)
    for trial in extra:
        out.insert(rng.randint(1, len(out)) if out else 0, trial)
    return out


def gold_trial(slot: int, key: str, expected: Mapping[str, float]) -> Trial:
    """A gold trial of clip `key`; `expected`: the known answer per gold condition id."""
    prompt, condition = key.split("|", 1)
    return make_trial(slot, f"gold/{prompt}/{condition}", prompt, GOLD, [key], [GOLD], [condition],
                      expected=expected[condition])


def trap_trial(slot: int, key: str, answer: float, extras: Extras, rng: random.Random) -> Trial:
    """A trapping trial of clip `key` asking for `answer`; where the design hears references
    beside its clips, one of them at random, so the trap's page looks like the others."""
    prompt = key.split("|", 1)[0]
    reference = rng.choice(sorted(extras.references.values())) if extras.references else None
    return make_trial(slot, f"trap/{key.split('|', 1)[1]}", prompt, TRAP, [key], [TRAP], [TRAP], reference=reference,
                      expected=float(answer))


def single_clip_trials(slot: int, prompts: Sequence[str], conditions: Sequence[str], extras: Extras,
                       rng: random.Random, gold_rate: float, trap_rate: float,
                       gold_expected: Mapping[str, float]) -> list[Trial]:
    """One slot's queue of one-clip trials: every condition of every prompt dealt to it (each
    beside its prompt's reference, if the design has references), shuffled, then gold (at
    `gold_rate`) and trapping trials (at `trap_rate`) mixed in."""
    queue = [make_trial(slot, f"{prompt}/{cond}", prompt, TEST, [clip_key(prompt, cond)], [TEST], [cond],
                        reference=extras.references.get(prompt))
             for prompt in prompts for cond in conditions]
    rng.shuffle(queue)
    extra = []
    if extras.gold:
        extra += [gold_trial(slot, key, gold_expected)
                  for key in draw(extras.gold, extra_count(gold_rate, len(queue)), rng)]
    if extras.traps:
        extra += [trap_trial(slot, key, answer, extras, rng)
                  for key, answer in draw(extras.traps, extra_count(trap_rate, len(queue)), rng)]
    return mix_in(queue, extra, rng)
