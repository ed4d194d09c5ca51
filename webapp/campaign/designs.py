"""The listening-test designs beyond blind A/B: MOS (ITU-T P.808 ACR), CMOS (comparison with a
reference condition), SMOS (similarity to a speaker reference) and MUSHRA (ITU-R BS.1534), and
the balanced, randomised queues of trials each one deals to the rater slots (docs/campaigns.md).

Library module (the command line is `python -m webapp.campaign create --design mos|cmos|smos|mushra`)::

    options = DesignOptions("mushra")
    plan = build_trials(options, prompt_ids, ["tiny", "espeak"], extras, raters_per_item=3, rater_slots=6, seed=0)
    plan.slots[0][0]     # Trial(entry_id, slot, position, item_id, prompt_id, kind, stimuli, roles, conditions, ...)

A trial is one page a rater answers. Its stimuli are clip keys ("<prompt id>|<condition id>",
`clip_key`), played in the order given; `roles` says what each one is (test, reference, anchor,
gold, trap). The balance rules, which `check_balance` verifies and the tests call:

- every design: prompts are blocks dealt round-robin over the slots in a shuffled order, each
  block copied k times into k distinct slots (as the A/B design does), so every test unit is
  rated by exactly k different raters and slot loads differ by at most one block;
- mos, smos: a slot that holds a prompt holds all of its conditions (each condition equally
  often per slot); gold and trapping trials are added at random places, never first, at
  `gold_rate`/`trap_rate` of the slot's test trials (at least one each when the rate is > 0);
- cmos: per slot and per condition the test clip plays first (A) or second (B) alternately,
  and the next slot starts on the other side when a slot ended one ahead, so
  |#A - #B| <= 1 per slot and per condition overall;
- mushra: one trial per prompt with every condition, the hidden reference and the anchor, in
  the order of a fresh random Latin square for every P pages of a slot (`latin_orders`), so no
  stimulus holds a screen position more than ceil(T / P) times and the order of one page says
  nothing about the next.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from webapp.campaign.design import DesignError, new_entry_id

DESIGNS = ("ab", "mos", "cmos", "smos", "mushra")
TRIAL_DESIGNS = DESIGNS[1:]
KINDS = ("test", "gold", "trap")
ROLES = ("test", "reference", "anchor", "gold", "trap")
REFERENCE, ANCHOR, TRAP = "reference", "anchor", "trap"
GOLD_ESPEAK, GOLD_DEGRADED = "gold:espeak", "gold:degraded"
SPEAKER_PROMPT = "speaker"  # prompt id of the one speaker-reference clip given by --speaker-ref CLIP
DEFAULT_GOLD_RATE = 0.1
DEFAULT_TRAP_RATE = 0.05
# P.808's gold clips are known very good or very bad; ours are the espeak system (robotic but clean:
# "Poor") and a deliberately degraded copy of a test clip ("Bad").
GOLD_EXPECTED = {GOLD_ESPEAK: 2.0, GOLD_DEGRADED: 1.0}
# The scales and their labels: P.808 ACR (Table 1 of its Annex A) and CCR (for CMOS), a 5-point
# similarity scale for SMOS, and BS.1534's five quality bands for MUSHRA.
ACR_LABELS = {5: "Excellent", 4: "Good", 3: "Fair", 2: "Poor", 1: "Bad"}
CCR_LABELS = {3: "Much Better", 2: "Better", 1: "Slightly Better", 0: "About the Same", -1: "Slightly Worse",
              -2: "Worse", -3: "Much Worse"}
SIMILARITY_LABELS = {5: "Same speaker, certainly", 4: "Probably the same speaker", 3: "Cannot tell",
                     2: "Probably a different speaker", 1: "Different speaker, certainly"}
MUSHRA_BANDS = ((80, "Excellent"), (60, "Good"), (40, "Fair"), (20, "Poor"), (0, "Bad"))
MUSHRA_MAX = 100
MAX_MUSHRA_STIMULI = 12  # conditions + hidden reference + anchor on one page (BS.1534 advises <= 12)


def clip_key(prompt_id: str, condition_id: str) -> str:
    """The manifest's name of a clip: one per (prompt, condition) or (prompt, extra role)."""
    return f"{prompt_id}|{condition_id}"


@dataclass(frozen=True)
class DesignOptions:
    """What `create` chose for a design (saved in campaign.json under "design_options")."""

    design: str = "ab"
    reference_condition: str | None = None  # cmos: the condition every other is compared with
    reference: str | None = None  # mushra: the hidden reference's system spec (a system or folder:DIR)
    speaker_ref: str | None = None  # smos: one reference clip of the target voice (a file)
    speaker_ref_system: str | None = None  # smos: a system whose own clips are the voice reference
    gold_rate: float = DEFAULT_GOLD_RATE  # mos: gold trials per test trial
    trap_rate: float = DEFAULT_TRAP_RATE  # mos, smos: trapping trials per test trial
    qualification: bool = True  # mos: the hearing check before the first trial

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> DesignOptions:
        return cls(**(data or {}))


def check_options(options: DesignOptions, condition_ids: Sequence[str]) -> DesignOptions:
    """The options with the design's required fields present; DesignError naming the flag otherwise."""
    d = options.design
    if d not in DESIGNS:
        raise DesignError(f"--design {d!r}: choose one of {', '.join(DESIGNS)}.")
    for name, rate in (("--gold-rate", options.gold_rate), ("--trap-rate", options.trap_rate)):
        if not 0.0 <= rate <= 0.5:
            raise DesignError(f"{name} {rate}: use a share between 0 and 0.5 of the test trials.")
    if d == "cmos":
        if options.reference_condition not in condition_ids:
            raise DesignError(f"--design cmos needs --reference-condition, one of: {', '.join(condition_ids)}.")
        if len(condition_ids) < 2:
            raise DesignError("--design cmos needs a reference condition and at least one other condition.")
    if d == "smos" and bool(options.speaker_ref) == bool(options.speaker_ref_system):
        raise DesignError("--design smos needs one voice reference: --speaker-ref CLIP or --speaker-ref-system SYSTEM.")
    if d == "mushra":
        if not options.reference:
            raise DesignError("--design mushra needs --reference SYSTEM (a system spec or folder:DIR): the hidden "
                              "reference every condition is heard beside.")
        if len(condition_ids) + 2 > MAX_MUSHRA_STIMULI:
            raise DesignError(f"MUSHRA pages hold at most {MAX_MUSHRA_STIMULI} stimuli (conditions + reference + "
                              f"anchor); {len(condition_ids)} conditions is too many: split the test.")
    return options


@dataclass(frozen=True)
class Trial:
    """One page of a rater's queue."""

    entry_id: str  # random token: the handle the page and the API use
    slot: int
    position: int
    item_id: str  # mos/smos "<prompt>/<cond>"; cmos "<prompt>/<cond>~<ref>"; mushra "<prompt>"; "gold/..."; "trap/..."
    prompt_id: str
    kind: str  # test | gold | trap
    stimuli: tuple[str, ...]  # clip keys in play order
    roles: tuple[str, ...]  # role of each stimulus
    conditions: tuple[str, ...]  # condition id of each stimulus (reference, anchor, gold:..., trap for extras)
    reference: str | None = None  # smos: the speaker-reference clip key; cmos: the reference condition id
    expected: float | None = None  # gold, trap: the right answer on the 1-5 scale

    @classmethod
    def from_json(cls, data: dict) -> Trial:
        return cls(**{**data, **{k: tuple(data[k]) for k in ("stimuli", "roles", "conditions")}})


@dataclass
class TrialPlan:
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
    """The extra clips a plan may use, by clip key (from the manifest)."""

    gold: Sequence[str] = ()  # clip keys of gold clips ("<prompt>|gold:espeak", ...)
    traps: Sequence[tuple[str, float]] = ()  # (clip key, the answer the clip asks for)
    speaker_refs: dict[str, str] = field(default_factory=dict)  # smos: prompt id -> reference clip key


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


def build_trials(options: DesignOptions, prompt_ids: Sequence[str], condition_ids: Sequence[str], extras: Extras,
                 raters_per_item: int, rater_slots: int, seed: int = 0) -> TrialPlan:
    """The balanced, randomised queues of a mos, cmos, smos or mushra campaign (module docstring)."""
    check_options(options, condition_ids)
    rng = random.Random(seed)
    dealt = deal_blocks(prompt_ids, raters_per_item, rater_slots, rng)
    build = {"mos": _single_trials, "smos": _single_trials, "cmos": _cmos_trials, "mushra": _mushra_trials}
    if options.design not in build:
        raise DesignError(f"build_trials: {options.design!r} is not a trial design ({', '.join(TRIAL_DESIGNS)}).")
    slots = build[options.design](options, dealt, list(condition_ids), extras, rng)
    return TrialPlan(options.design, seed, raters_per_item, [_renumber(s, queue) for s, queue in enumerate(slots)])


def _single_trials(options, dealt, conditions, extras: Extras, rng) -> list[list[Trial]]:
    """mos and smos: one clip per trial, then gold (mos) and trapping trials mixed in."""
    slots = []
    for s, prompts in enumerate(dealt):
        queue = []
        for prompt in prompts:
            for cond in conditions:
                ref = extras.speaker_refs.get(prompt) if options.design == "smos" else None
                queue.append(_trial(s, f"{prompt}/{cond}", prompt, "test", [clip_key(prompt, cond)], ["test"], [cond],
                                    reference=ref))
        rng.shuffle(queue)
        extra = []
        if options.design == "mos" and extras.gold:
            extra += [_gold(s, key) for key in _draw(extras.gold, _count(options.gold_rate, len(queue)), rng)]
        if extras.traps:
            extra += [_trap(s, key, answer, options, extras, rng)
                      for key, answer in _draw(extras.traps, _count(options.trap_rate, len(queue)), rng)]
        slots.append(_mix_in(queue, extra, rng))
    return slots


def _cmos_trials(options, dealt, conditions, extras, rng) -> list[list[Trial]]:
    ref = options.reference_condition
    tests = [c for c in conditions if c != ref]
    start = {c: rng.random() < 0.5 for c in tests}  # True: the test clip plays first (A)
    slots = []
    for s, prompts in enumerate(dealt):
        units = [(p, c) for p in prompts for c in tests]
        rng.shuffle(units)
        seen: Counter = Counter()
        queue = []
        for prompt, cond in units:
            test_first = start[cond] ^ (seen[cond] % 2 == 1)
            seen[cond] += 1
            order = [(cond, "test"), (ref, "reference")] if test_first else [(ref, "reference"), (cond, "test")]
            queue.append(_trial(s, f"{prompt}/{cond}~{ref}", prompt, "test", [clip_key(prompt, c) for c, _ in order],
                                [r for _, r in order], [c for c, _ in order], reference=ref))
        for cond, count in seen.items():
            if count % 2:
                start[cond] = not start[cond]
        slots.append(queue)
    return slots


def _mushra_trials(options, dealt, conditions, extras, rng) -> list[list[Trial]]:
    stimuli = [(c, "test") for c in conditions] + [(REFERENCE, "reference"), (ANCHOR, "anchor")]
    slots = []
    for s, prompts in enumerate(dealt):
        order = list(prompts)
        rng.shuffle(order)
        queue = []
        for prompt, page in zip(order, latin_orders(len(order), stimuli, rng), strict=True):
            queue.append(_trial(s, prompt, prompt, "test", [clip_key(prompt, c) for c, _ in page],
                                [r for _, r in page], [c for c, _ in page]))
        slots.append(queue)
    return slots


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


def _trial(slot, item, prompt, kind, stimuli, roles, conditions, reference=None, expected=None) -> Trial:
    return Trial(new_entry_id(), slot, 0, item, prompt, kind, tuple(stimuli), tuple(roles), tuple(conditions),
                 reference, expected)


def _gold(slot: int, key: str) -> Trial:
    prompt, cond = key.split("|", 1)
    return _trial(slot, f"gold/{prompt}/{cond}", prompt, "gold", [key], ["gold"], [cond],
                  expected=GOLD_EXPECTED[cond])


def _trap(slot, key, answer, options, extras: Extras, rng) -> Trial:
    prompt = key.split("|", 1)[0]
    ref = None
    if options.design == "smos" and extras.speaker_refs:
        ref = rng.choice(sorted(extras.speaker_refs.values()))
    return _trial(slot, f"trap/{key.split('|', 1)[1]}", prompt, "trap", [key], ["trap"], [TRAP], reference=ref,
                  expected=float(answer))


def _count(rate: float, n: int) -> int:
    return 0 if rate <= 0 or n == 0 else max(1, math.floor(rate * n + 0.5))


def _draw(pool: Sequence, n: int, rng: random.Random) -> list:
    """n items of `pool`, without repeats while the pool lasts."""
    out: list = []
    while len(out) < n:
        out += rng.sample(list(pool), min(len(pool), n - len(out)))
    return out


def _mix_in(queue: list[Trial], extra: list[Trial], rng: random.Random) -> list[Trial]:
    """Extra trials at random places, never first (a rater's first page is a real one)."""
    out = list(queue)
    for trial in extra:
        out.insert(rng.randint(1, len(out)) if out else 0, trial)
    return out


def _renumber(slot: int, queue: list[Trial]) -> list[Trial]:
    return [Trial(t.entry_id, slot, pos, t.item_id, t.prompt_id, t.kind, t.stimuli, t.roles, t.conditions,
                  t.reference, t.expected) for pos, t in enumerate(queue)]


def check_balance(plan: TrialPlan, options: DesignOptions, prompt_ids: Sequence[str],
                  condition_ids: Sequence[str]) -> list[str]:
    """Every broken balance rule of the module docstring, in words ([] when the plan holds them)."""
    problems: list[str] = []
    k = plan.raters_per_item
    tests = [t for q in plan.slots for t in q if t.kind == "test"]
    holders: dict[str, set[int]] = defaultdict(set)
    copies: Counter = Counter()
    for t in tests:
        holders[t.item_id].add(t.slot)
        copies[t.item_id] += 1
    for item, count in copies.items():
        if count != k or len(holders[item]) != k:
            problems.append(f"{item}: {count} copies in {len(holders[item])} slots, expected {k}")
    loads = [len({t.prompt_id for t in q if t.kind == "test"}) for q in plan.slots]
    if max(loads) - min(loads) > 1:
        problems.append(f"slot loads (prompts) differ by more than one block: {loads}")
    for s, queue in enumerate(plan.slots):
        problems += _slot_problems(s, queue, plan.design, options, condition_ids)
    return problems


def _slot_problems(s, queue: list[Trial], design, options, condition_ids) -> list[str]:
    tests = [t for t in queue if t.kind == "test"]
    out = []
    if queue and queue[0].kind != "test":
        out.append(f"slot {s}: an extra trial comes first")
    if design in ("mos", "smos"):
        per = Counter(t.conditions[0] for t in tests)
        if len(set(per.values())) > 1:
            out.append(f"slot {s}: conditions unequal {dict(per)}")
        for kind, rate in (("gold", options.gold_rate if design == "mos" else 0.0), ("trap", options.trap_rate)):
            n = sum(t.kind == kind for t in queue)
            if n and n != _count(rate, len(tests)):
                out.append(f"slot {s}: {n} {kind} trials for {len(tests)} test trials at rate {rate}")
    if design == "cmos":
        sides = Counter((t.conditions[t.roles.index("test")], t.roles.index("test")) for t in tests)
        for cond in {c for c, _ in sides}:
            if abs(sides[(cond, 0)] - sides[(cond, 1)]) > 1:
                out.append(f"slot {s}: {cond} played first {sides[(cond, 0)]}x, second {sides[(cond, 1)]}x")
    if design == "mushra" and tests:
        limit = math.ceil(len(tests) / len(tests[0].stimuli))
        places = Counter((c, i) for t in tests for i, c in enumerate(t.conditions))
        over = {key: n for key, n in places.items() if n > limit}
        if over:
            out.append(f"slot {s}: stimuli hold one place more than {limit} times: {over}")
        if any(sorted(t.roles) != sorted(["test"] * (len(t.roles) - 2) + ["reference", "anchor"]) for t in tests):
            out.append(f"slot {s}: a trial lacks its hidden reference or anchor")
    return out
