"""MOS by ITU-T P.808 (absolute category rating, 1-5): one clip a page, a hearing check first,
gold and trapping questions mixed in, P.808 screening, and the P.808 toolkit's ACR files.

    python -m webapp.campaign create --name mos1 --design mos --prompts P.jsonl --systems rumik,espeak \\
        --raters-per-item 8 --rater-slots 24 --gold-rate 0.1 --trap-rate 0.05 [--no-qualification]

Balance (`check_balance`): every clip rated by k raters in k slots, loads within one prompt; a
slot that holds a prompt holds all of its conditions; gold and trapping trials at their rates,
never first. Gold clips: `gold:espeak` (the espeak system speaking the prompt: clean but robotic,
expected "Poor" = 2) and `gold:degraded` (a deliberately ruined copy of the first condition's
clip: expected "Bad" = 1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from evaluation.listening_tests import Scoring
from webapp.campaign.analysis.formats import write_p808
from webapp.campaign.analysis.scores import ScoreChart
from webapp.campaign.clips.extras import qualification_specs, trap_specs
from webapp.campaign.data.definition import Campaign
from webapp.campaign.designs.record import SCORE, TRAP_RATE, DesignResults, Option, ScaleDesign, check_rate
from webapp.campaign.trials import balance
from webapp.campaign.trials.dealing import deal_blocks, single_clip_trials
from webapp.campaign.trials.plan import GOLD, TRAP, TrialPlan, clip_key, renumber
from webapp.campaign.trials.questions import Question, scale_choices

# P.808's gold clips are known very good or very bad; ours are the espeak system (robotic but clean:
# "Poor") and a deliberately degraded copy of a test clip ("Bad").
GOLD_ESPEAK, GOLD_DEGRADED = "gold:espeak", "gold:degraded"
GOLD_EXPECTED = {GOLD_ESPEAK: 2.0, GOLD_DEGRADED: 1.0}
ESPEAK = "espeak"
# P.808 ACR, Table 1 of its Annex A.
ACR_LABELS = {5: "Excellent", 4: "Good", 3: "Fair", 2: "Poor", 1: "Bad"}
GOLD_RATE = Option("gold_rate", "--gold-rate", "gold trials per test trial (default %(default)s)", 0.1, float,
                   check=check_rate)
QUALIFICATION = Option("qualification", "--no-qualification", "no hearing check before the first trial", True,
                       turns_off=True)


@dataclass(frozen=True)
class Mos(ScaleDesign):
    def wanted_extras(self, campaign: Campaign) -> dict[str, dict]:
        settings, prompts = self.settings(campaign), [p["id"] for p in campaign.prompts]
        want: dict[str, dict] = {}
        for p in prompts:
            want[clip_key(p, GOLD_ESPEAK)] = {"role": GOLD, "system": ESPEAK, "prompt": p,
                                              "expected": GOLD_EXPECTED[GOLD_ESPEAK]}
            want[clip_key(p, GOLD_DEGRADED)] = {"role": GOLD, "derive": "degraded", "prompt": p,
                                                "expected": GOLD_EXPECTED[GOLD_DEGRADED]}
        if settings["qualification"]:
            want.update(qualification_specs(campaign.seed))
        if settings["trap_rate"] > 0:
            want.update(trap_specs(prompts, campaign.seed, ACR_LABELS))
        return want

    def build_plan(self, campaign: Campaign) -> TrialPlan:
        settings, rng = self.settings(campaign), random.Random(campaign.seed)
        dealt = deal_blocks([p["id"] for p in campaign.prompts], campaign.raters_per_item, campaign.rater_slots, rng)
        conditions, extras = [c.id for c in campaign.conditions], self.plan_extras(campaign)
        slots = [single_clip_trials(s, prompts, conditions, extras, rng, settings["gold_rate"], settings["trap_rate"],
                                    GOLD_EXPECTED) for s, prompts in enumerate(dealt)]
        return TrialPlan(self.name, campaign.seed, campaign.raters_per_item,
                         [renumber(s, queue) for s, queue in enumerate(slots)])

    def check_balance(self, plan: TrialPlan, campaign: Campaign) -> list[str]:
        settings = self.settings(campaign)
        return balance.coverage(plan) + balance.per_slot(
            plan, balance.extras_not_first, balance.conditions_equal,
            lambda s, q: balance.extras_at_rate(s, q, GOLD, settings["gold_rate"]),
            lambda s, q: balance.extras_at_rate(s, q, TRAP, settings["trap_rate"]))

    def needs_hearing_check(self, campaign: Campaign) -> bool:
        return bool(self.settings(campaign)["qualification"])

    def export(self, campaign: Campaign, results: DesignResults, plan: TrialPlan | None, out: Path
               ) -> tuple[list[Path], dict]:
        return write_p808("acr", results.table(), out, clip_ids_by_key=campaign.clip_ids(), design=self.name), {}


DESIGN = Mos(
    name="mos", title="MOS (ITU-T P.808 ACR)", summary="P.808 ACR 1-5",
    intro="Listen to each clip and rate the quality of its speech.",
    instructions=("**Listen to the clip, then rate the quality of the speech** (ITU-T P.808, absolute category "
                  "rating). Use headphones in a quiet place; play the clip in full before answering."),
    questions=(Question(SCORE, "Quality of the speech", choices=scale_choices(ACR_LABELS),
                        missing="Choose one answer on the scale."),),
    options=(GOLD_RATE, TRAP_RATE, QUALIFICATION),
    scoring=Scoring("mos", "MOS", "ordinal", domain=tuple(sorted(ACR_LABELS))),
    chart=ScoreChart((0.0, 5.2)))
