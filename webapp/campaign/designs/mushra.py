"""MUSHRA by ITU-R BS.1534: an open reference, then every condition, the hidden reference and a
3.5 kHz low-pass anchor on one page, rated 0-100 with sliders; BS.1534-3 post-screening, box
plots, and webMUSHRA's results CSV.

    python -m webapp.campaign create --name mushra1 --design mushra --prompts P.jsonl \\
        --systems rumik,rumik:checkpoints/new --reference folder:recordings/natural

Balance (`check_balance`): one page per prompt, rated by k raters in k slots; every P pages of a
slot follow a fresh random Latin square (`dealing.latin_orders`), so no stimulus holds a screen
place more than ceil(T / P) times; every page holds its hidden reference and anchor. A page's
clips and its open reference are padded with silence to the longest, so no duration points at
the hidden reference.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from evaluation.listening_screening import BS1534
from evaluation.listening_tests import HIDDEN_ROLES, Scoring
from webapp.campaign.analysis.formats import write_webmushra
from webapp.campaign.analysis.scores import ScoreChart
from webapp.campaign.data.conditions import DesignError
from webapp.campaign.data.definition import Campaign
from webapp.campaign.designs.record import SCORE, DesignResults, Option, ScaleDesign
from webapp.campaign.trials import balance
from webapp.campaign.trials.dealing import deal_blocks, latin_orders
from webapp.campaign.trials.plan import ANCHOR, REFERENCE, TEST, Trial, TrialPlan, clip_key, make_trial, renumber
from webapp.campaign.trials.questions import Question

MUSHRA_MAX = 100
MAX_STIMULI = 12  # conditions + hidden reference + anchor on one page (BS.1534 advises <= 12)
REFERENCE_SYSTEM = Option("reference", "--reference", "the hidden reference (a system spec or folder:DIR); the "
                          "anchor is its 3.5 kHz low-pass", metavar="SYSTEM")


@dataclass(frozen=True)
class Mushra(ScaleDesign):
    def check_options(self, settings, condition_ids) -> None:
        if not settings["reference"]:
            raise DesignError(f"--design {self.name} needs --reference SYSTEM (a system spec or folder:DIR): the "
                              "hidden reference every condition is heard beside.")
        if len(condition_ids) + 2 > MAX_STIMULI:
            raise DesignError(f"MUSHRA pages hold at most {MAX_STIMULI} stimuli (conditions + reference + "
                              f"anchor); {len(condition_ids)} conditions is too many: split the test.")

    def wanted_extras(self, campaign: Campaign) -> dict[str, dict]:
        system, want = self.settings(campaign)["reference"], {}
        for p in (p["id"] for p in campaign.prompts):
            want[clip_key(p, REFERENCE)] = {"role": REFERENCE, "system": system, "prompt": p}
            want[clip_key(p, ANCHOR)] = {"role": ANCHOR, "derive": "anchor", "prompt": p, "from": REFERENCE}
        return want

    def build_plan(self, campaign: Campaign) -> TrialPlan:
        rng = random.Random(campaign.seed)
        dealt = deal_blocks([p["id"] for p in campaign.prompts], campaign.raters_per_item, campaign.rater_slots, rng)
        stimuli = [(c.id, TEST) for c in campaign.conditions] + [(REFERENCE, REFERENCE), (ANCHOR, ANCHOR)]
        slots = []
        for s, prompts in enumerate(dealt):
            order = list(prompts)
            rng.shuffle(order)
            queue = [make_trial(s, prompt, prompt, TEST, [clip_key(prompt, c) for c, _ in page], [r for _, r in page],
                                [c for c, _ in page])
                     for prompt, page in zip(order, latin_orders(len(order), stimuli, rng), strict=True)]
            slots.append(renumber(s, queue))
        return TrialPlan(self.name, campaign.seed, campaign.raters_per_item, slots)

    def check_balance(self, plan: TrialPlan, campaign: Campaign) -> list[str]:
        return balance.coverage(plan) + balance.per_slot(
            plan, balance.extras_not_first, balance.latin_places, balance.hidden_reference_and_anchor)

    def shown_reference(self, trial: Trial) -> str | None:
        return clip_key(trial.prompt_id, REFERENCE)  # BS.1534's open reference beside the hidden one

    def export(self, campaign: Campaign, results: DesignResults, plan: TrialPlan | None, out: Path
               ) -> tuple[list[Path], dict]:
        return write_webmushra(results.table(), out, design=self.name), {}


DESIGN = Mushra(
    name="mushra", title="MUSHRA (ITU-R BS.1534)", summary="BS.1534 0-100 with hidden reference and anchor",
    intro="Listen to the reference and to every clip of each page, and rate each clip against the reference.",
    instructions=("**Rate each clip against the reference from 0 to 100** (ITU-R BS.1534, MUSHRA). One of the clips "
                  "is the reference itself: give it 100. Play every clip (you may replay them and the reference as "
                  "often as you like) before you submit; the bands are 80-100 excellent, 60-80 good, 40-60 fair, "
                  "20-40 poor, 0-20 bad."),
    questions=(Question(SCORE, "Clip {clip}: score (0-100)", low=0, high=MUSHRA_MAX, per_clip=True),),
    options=(REFERENCE_SYSTEM,), max_clips=MAX_STIMULI, show_text=False, pad_clips=True,
    scoring=Scoring("mushra", "MUSHRA", "interval", roles=HIDDEN_ROLES, paired_by_trial=True),
    screening=BS1534, chart=ScoreChart((0.0, 102.0), boxplot=True))
