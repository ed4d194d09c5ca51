"""CMOS by ITU-T P.808 (comparison category rating, -3..+3): every test condition heard beside a
reference condition, sides balanced; the answer rates the second clip against the first and is
stored as test against reference; P.808 screening and the P.808 toolkit's CCR files.

    python -m webapp.campaign create --name cmos1 --design cmos --prompts P.jsonl \\
        --systems rumik,rumik:checkpoints/new --reference-condition rumik

Balance (`check_balance`): every (prompt, test condition) rated by k raters in k slots; per slot
and per condition the test clip plays first and second alternately (`dealing.Alternation`), so
|#first - #second| <= 1 per slot and per condition overall.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from evaluation.listening_tests import Scoring
from webapp.campaign.analysis.formats import write_p808
from webapp.campaign.analysis.scores import ScoreChart
from webapp.campaign.data.conditions import DesignError
from webapp.campaign.data.definition import Campaign
from webapp.campaign.designs.record import SCORE, DesignResults, Option, ScaleDesign
from webapp.campaign.trials import balance
from webapp.campaign.trials.dealing import Alternation, deal_blocks
from webapp.campaign.trials.plan import REFERENCE, TEST, Trial, TrialPlan, clip_key, make_trial, renumber
from webapp.campaign.trials.questions import Question, scale_choices

CCR_LABELS = {3: "Much Better", 2: "Better", 1: "Slightly Better", 0: "About the Same", -1: "Slightly Worse",
              -2: "Worse", -3: "Much Worse"}
SIDES = "AB"  # the stored `side`: where the test clip played
REFERENCE_CONDITION = Option("reference_condition", "--reference-condition", "the condition compared with",
                             metavar="CONDITION")


@dataclass(frozen=True)
class Cmos(ScaleDesign):
    def check_options(self, settings, condition_ids) -> None:
        if settings["reference_condition"] not in condition_ids:
            raise DesignError(f"--design {self.name} needs --reference-condition, one of: {', '.join(condition_ids)}.")
        if len(condition_ids) < 2:
            raise DesignError(f"--design {self.name} needs a reference condition and at least one other condition.")

    def build_plan(self, campaign: Campaign) -> TrialPlan:
        rng, ref = random.Random(campaign.seed), self.settings(campaign)["reference_condition"]
        dealt = deal_blocks([p["id"] for p in campaign.prompts], campaign.raters_per_item, campaign.rater_slots, rng)
        tests = [c.id for c in campaign.conditions if c.id != ref]
        sides = Alternation(tests, rng)  # True: the test clip plays first (A)
        slots = []
        for s, prompts in enumerate(dealt):
            units = [(p, c) for p in prompts for c in tests]
            rng.shuffle(units)
            queue = []
            for prompt, cond in units:
                pair = [(cond, TEST), (ref, REFERENCE)]
                order = pair if sides.first(cond) else pair[::-1]
                queue.append(make_trial(s, f"{prompt}/{cond}~{ref}", prompt, TEST,
                                        [clip_key(prompt, c) for c, _ in order], [r for _, r in order],
                                        [c for c, _ in order], reference=ref))
            sides.end_slot()
            slots.append(renumber(s, queue))
        return TrialPlan(self.name, campaign.seed, campaign.raters_per_item, slots)

    def check_balance(self, plan: TrialPlan, campaign: Campaign) -> list[str]:
        def test_side(trial: Trial) -> tuple[str, bool]:
            at = trial.roles.index(TEST)
            return trial.conditions[at], at == 0

        return balance.coverage(plan) + balance.per_slot(
            plan, balance.extras_not_first, lambda s, q: balance.sides_balanced(s, q, test_side))

    def rows(self, trial: Trial, answers: dict, clips) -> list[dict]:
        test_at = trial.roles.index(TEST)
        raw = answers[SCORE]  # the second clip relative to the first (P.808 CCR)
        return [{"design": self.name, "stimulus": 0, "role": TEST, "condition": trial.conditions[test_at],
                 "reference": trial.reference, "clip_id": clips[trial.stimuli[test_at]]["clip_id"],
                 "score": raw if test_at == 1 else -raw, "raw_score": raw, "side": SIDES[test_at]}]

    def export(self, campaign: Campaign, results: DesignResults, plan: TrialPlan | None, out: Path
               ) -> tuple[list[Path], dict]:
        return write_p808("ccr", results.table(), out, clip_ids_by_key=campaign.clip_ids(), design=self.name), {}


DESIGN = Cmos(
    name="cmos", title="CMOS", summary="-3..+3 against --reference-condition",
    intro="Listen to both clips of each page and compare them.",
    instructions=("**Listen to both clips, then rate the quality of the second clip compared with the first** "
                  "(ITU-T P.808, comparison category rating)."),
    questions=(Question(SCORE, "The second clip compared with the first", choices=scale_choices(CCR_LABELS),
                        missing="Choose one answer on the scale."),),
    options=(REFERENCE_CONDITION,), min_conditions=2, max_clips=2,
    scoring=Scoring("cmos", "CMOS", "interval", against_reference=True),
    chart=ScoreChart((-3.2, 3.2), reference=0.0))
