"""The balance rules of `webapp.campaign.trials.dealing`, checked on a built plan: each returns
the broken rules in words ([] when the plan keeps them). A design's `check_balance` runs the
ones its plan promises; `prepare` refuses a plan that breaks one (a bug, never a user error).

Library module (no command line)::

    problems = coverage(plan) + per_slot(plan, extras_not_first, conditions_equal)
    problems += per_slot(plan, lambda s, q: extras_at_rate(s, q, "gold", 0.1))
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable

from webapp.campaign.trials.dealing import extra_count
from webapp.campaign.trials.plan import ANCHOR, REFERENCE, TEST, Trial, TrialPlan

SlotRule = Callable[[int, list[Trial]], list[str]]


def first_hearings(queue: list[Trial]) -> list[Trial]:
    """The queue's test trials that repeat nothing."""
    return [t for t in queue if t.kind == TEST and t.repeat_of is None]


def coverage(plan: TrialPlan) -> list[str]:
    """Every test unit rated by exactly k raters in k different slots; slot loads (prompts) within one."""
    problems: list[str] = []
    k = plan.raters_per_item
    tests = [t for q in plan.slots for t in first_hearings(q)]
    holders: dict[str, set[int]] = defaultdict(set)
    copies: Counter = Counter()
    for t in tests:
        holders[t.item_id].add(t.slot)
        copies[t.item_id] += 1
    for item, count in copies.items():
        if count != k or len(holders[item]) != k:
            problems.append(f"{item}: {count} copies in {len(holders[item])} slots, expected {k}")
    loads = [len({t.prompt_id for t in first_hearings(q)}) for q in plan.slots]
    if max(loads) - min(loads) > 1:
        problems.append(f"slot loads (prompts) differ by more than one block: {loads}")
    return problems


def per_slot(plan: TrialPlan, *rules: SlotRule) -> list[str]:
    """Every rule's problems over every slot of the plan."""
    return [p for s, queue in enumerate(plan.slots) for rule in rules for p in rule(s, queue)]


def extras_not_first(s: int, queue: list[Trial]) -> list[str]:
    return [f"slot {s}: an extra trial comes first"] if queue and queue[0].kind != TEST else []


def conditions_equal(s: int, queue: list[Trial]) -> list[str]:
    """A slot that holds a prompt holds all its conditions: each condition equally often."""
    per = Counter(t.conditions[0] for t in first_hearings(queue))
    return [f"slot {s}: conditions unequal {dict(per)}"] if len(set(per.values())) > 1 else []


def extras_at_rate(s: int, queue: list[Trial], kind: str, rate: float) -> list[str]:
    """`kind` trials (gold, trap) at `rate` of the test trials, when there are any."""
    n, tests = sum(t.kind == kind for t in queue), len(first_hearings(queue))
    if n and n != extra_count(rate, tests):
        return [f"slot {s}: {n} {kind} trials for {tests} test trials at rate {rate}"]
    return []


def sides_balanced(s: int, queue: list[Trial], key: Callable[[Trial], object]) -> list[str]:
    """Per `key` of a trial (its test condition, its pair of conditions), the unit's first side
    leads at most once more often than its second in the slot."""
    sides: Counter = Counter()
    for t in first_hearings(queue):
        unit, lead = key(t)
        sides[(unit, lead)] += 1
    out = []
    for unit in sorted({u for u, _ in sides}, key=str):
        if abs(sides[(unit, True)] - sides[(unit, False)]) > 1:
            out.append(f"slot {s}: {unit} led {sides[(unit, True)]}x, followed {sides[(unit, False)]}x")
    return out


def latin_places(s: int, queue: list[Trial]) -> list[str]:
    """No stimulus holds one screen place more than ceil(T / P) times (T trials of P stimuli)."""
    tests = first_hearings(queue)
    if not tests:
        return []
    limit = math.ceil(len(tests) / len(tests[0].stimuli))
    places = Counter((c, i) for t in tests for i, c in enumerate(t.conditions))
    over = {key: n for key, n in places.items() if n > limit}
    return [f"slot {s}: stimuli hold one place more than {limit} times: {over}"] if over else []


def hidden_reference_and_anchor(s: int, queue: list[Trial]) -> list[str]:
    """Every test trial holds its hidden reference and its anchor once, the rest test clips."""
    def complete(trial: Trial) -> bool:
        return sorted(trial.roles) == sorted([TEST] * (len(trial.roles) - 2) + [REFERENCE, ANCHOR])

    if not all(complete(t) for t in first_hearings(queue)):
        return [f"slot {s}: a trial lacks its hidden reference or anchor"]
    return []
