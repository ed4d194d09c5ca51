"""SMOS: how similar a clip's voice is to a reference of the target speaker (1-5), with trapping
questions, P.808 screening, and our own CSV (no reference tool exists for it).

    python -m webapp.campaign create --name smos1 --design smos --prompts P.jsonl --systems rumik,rumik:ckpt \\
        --setting voice=Ira --speaker-ref recordings/ira_ref.wav     # or --speaker-ref-system SYSTEM

The voice reference is one clip (`--speaker-ref CLIP`, copied in) or a system's own clips
(`--speaker-ref-system SYSTEM`): prompt i is heard beside that system's clip of prompt i+1, so the
reference says other words. Balance as MOS's (no gold trials).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from evaluation.listening_tests import Scoring
from webapp.campaign.analysis.formats import write_smos
from webapp.campaign.analysis.scores import ScoreChart
from webapp.campaign.clips.extras import trap_specs
from webapp.campaign.data.conditions import DesignError
from webapp.campaign.data.definition import Campaign
from webapp.campaign.designs.record import SCORE, TRAP_RATE, DesignResults, Option, ScaleDesign
from webapp.campaign.trials import balance
from webapp.campaign.trials.dealing import deal_blocks, single_clip_trials
from webapp.campaign.trials.plan import REFERENCE, TRAP, Extras, Trial, TrialPlan, clip_key, renumber
from webapp.campaign.trials.questions import Question, scale_choices

SIMILARITY_LABELS = {5: "Same speaker, certainly", 4: "Probably the same speaker", 3: "Cannot tell",
                     2: "Probably a different speaker", 1: "Different speaker, certainly"}
SPEAKER_PROMPT = "speaker"  # prompt id of the one speaker-reference clip given by --speaker-ref CLIP
SPEAKER_REF = Option("speaker_ref", "--speaker-ref", "one reference clip of the target voice", metavar="CLIP")
SPEAKER_REF_SYSTEM = Option("speaker_ref_system", "--speaker-ref-system",
                            "a system whose own clips are the voice reference", metavar="SYSTEM")


@dataclass(frozen=True)
class Smos(ScaleDesign):
    def check_options(self, settings, condition_ids) -> None:
        if bool(settings["speaker_ref"]) == bool(settings["speaker_ref_system"]):
            raise DesignError(f"--design {self.name} needs one voice reference: --speaker-ref CLIP or "
                              "--speaker-ref-system SYSTEM.")

    def wanted_extras(self, campaign: Campaign) -> dict[str, dict]:
        settings, prompts = self.settings(campaign), [p["id"] for p in campaign.prompts]
        want = trap_specs(prompts, campaign.seed, SIMILARITY_LABELS) if settings["trap_rate"] > 0 else {}
        if settings["speaker_ref"]:
            want[clip_key(SPEAKER_PROMPT, REFERENCE)] = {"role": REFERENCE, "derive": "file", "prompt": SPEAKER_PROMPT,
                                                         "path": settings["speaker_ref"]}
        else:
            for p in prompts:
                want[clip_key(p, REFERENCE)] = {"role": REFERENCE, "system": settings["speaker_ref_system"],
                                                "prompt": p}
        return want

    def plan_extras(self, campaign: Campaign) -> Extras:
        found, prompts = super().plan_extras(campaign), [p["id"] for p in campaign.prompts]
        if self.settings(campaign)["speaker_ref"]:
            refs = {p: clip_key(SPEAKER_PROMPT, REFERENCE) for p in prompts}
        else:  # the reference says other words: the next prompt's clip
            refs = {p: clip_key(prompts[(i + 1) % len(prompts)], REFERENCE) for i, p in enumerate(prompts)}
        return Extras(found.gold, found.traps, refs)

    def build_plan(self, campaign: Campaign) -> TrialPlan:
        settings, rng = self.settings(campaign), random.Random(campaign.seed)
        dealt = deal_blocks([p["id"] for p in campaign.prompts], campaign.raters_per_item, campaign.rater_slots, rng)
        conditions, extras = [c.id for c in campaign.conditions], self.plan_extras(campaign)
        slots = [single_clip_trials(s, prompts, conditions, extras, rng, 0.0, settings["trap_rate"], {})
                 for s, prompts in enumerate(dealt)]
        return TrialPlan(self.name, campaign.seed, campaign.raters_per_item,
                         [renumber(s, queue) for s, queue in enumerate(slots)])

    def check_balance(self, plan: TrialPlan, campaign: Campaign) -> list[str]:
        rate = self.settings(campaign)["trap_rate"]
        return balance.coverage(plan) + balance.per_slot(
            plan, balance.extras_not_first, balance.conditions_equal,
            lambda s, q: balance.extras_at_rate(s, q, TRAP, rate))

    def shown_reference(self, trial: Trial) -> str | None:
        return trial.reference

    def export(self, campaign: Campaign, results: DesignResults, plan: TrialPlan | None, out: Path
               ) -> tuple[list[Path], dict]:
        return write_smos(results.table(), out, design=self.name), {}


DESIGN = Smos(
    name="smos", title="Speaker similarity (SMOS)", summary="similarity to a voice reference, 1-5",
    intro="Listen to the reference voice and to each clip, and rate how similar the voices are.",
    instructions=("**How similar is the voice of the clip to the reference voice?** Listen to both in full. Judge "
                  "only the speaker's voice, not the words, the recording quality or the way it is said."),
    questions=(Question(SCORE, "Same speaker as the reference?", choices=scale_choices(SIMILARITY_LABELS),
                        missing="Choose one answer on the scale."),),
    options=(SPEAKER_REF, SPEAKER_REF_SYSTEM, TRAP_RATE), reference_label="Reference voice",
    scoring=Scoring("smos", "SMOS", "ordinal", domain=tuple(sorted(SIMILARITY_LABELS))),
    chart=ScoreChart((0.0, 5.2)))
