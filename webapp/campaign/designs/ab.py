"""Blind A/B pairs: two clips of one prompt, each given a 1-5 expression score on the IndicEmo
rubric, a preference (A, B or none) and, for a prompt with an inline tag, NoVA's question; with
optional repeats (A and B swapped) for consistency; results with win rates, bootstrap CIs,
agreement and per-rater statistics, IndicEmo and NoVA exports, and the audio judges beside them.

    python -m webapp.campaign create --name pilot --prompts P.jsonl --systems rumik,espeak \\
        --raters-per-item 3 --rater-slots 6 --repeat-fraction 0.1        # --design ab is the default

The plan is `webapp.campaign.trials.pairs` (every pair of conditions of a prompt, k raters each,
A/B positions balanced). A rating is stored as two rows, clip A's and clip B's (score, side and
condition), with the page's other answers in `answer` ({"preference", "heard", "where"}); `table`
reads them back as one row per pair, the layout of ratings.csv (PAIR_COLUMNS). Unlike the other
designs, a trial's seconds run from its last showing, a rater need not play both clips first, and
there is no crowd mode.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from webapp.campaign.analysis.pairs import CampaignResults, clip_scores, compute_results, write_pair_exports
from webapp.campaign.data.definition import Campaign, PromptView
from webapp.campaign.designs.record import SCORE, Design, DesignResults
from webapp.campaign.trials import balance
from webapp.campaign.trials.pairs import Assignment, build_assignment, pair_plan
from webapp.campaign.trials.plan import TEST, Trial, TrialPlan
from webapp.campaign.trials.questions import HEARD, TAG_QUESTION, TAG_TEXT, WHERE, Question, number_choices
from webapp.ratings import NO_PREFERENCE

PREFERENCE = "preference"
SIDES = ("A", "B")
SCORE_RANGE = (1, 5)
PAIR_COLUMNS = ("campaign", "entry_id", "slot", "position", "rater", "item_id", "prompt_id", "repeat_of",
                "condition_a", "condition_b", "preference", "preferred_condition", "score_a", "score_b", "heard_a",
                "where_a", "heard_b", "where_b", "shown_at", "submitted_at", "seconds")
RUBRIC = ("**Expression score, 1-5**, for each clip against the intended delivery: *tone and pitch* (does the "
          "melody fit?), *energy and dynamics* (loudness and intensity), *timing and phrasing* (pauses, emphasis, "
          "pace) and *authenticity and sustainment* (sounds like a real person, and keeps it up to the end). "
          "1 = flat or wrong emotion, 3 = recognisable but uneven, 5 = convincing throughout. Play both clips in "
          "full before answering; the clips come in a random order.")
EXPORT_DESCRIPTIONS = {
    "results.md": "results (markdown)", "results.json": "results (numbers)", "ratings.csv": "every rating",
    "indicemo_judgments.jsonl": "IndicEmo judgments: python -m evaluation.indicemo aggregate --judgments FILE",
    "nova_prompts.jsonl": "NoVA prompts", "clips_manifest.jsonl": "clips: condition, seed, request, sha256",
    "campaign.json": "the campaign definition",
    "audio_judges.json": "audio judges (DNSMOS, speaker similarity, Spearman's rho with the listeners), if computed"}


def _pair_row(a: dict, b: dict) -> dict:
    """One pair row (PAIR_COLUMNS) from its clip A and clip B rows."""
    preference = a["answer"]["preference"]
    row = {**{k: a[k] for k in ("campaign", "entry_id", "slot", "position", "rater", "item_id", "prompt_id",
                                "repeat_of")},
           "condition_a": a["condition"], "condition_b": b["condition"], "preference": preference,
           "preferred_condition": {"A": a["condition"], "B": b["condition"]}.get(preference),
           "score_a": int(a["score"]), "score_b": int(b["score"]), "heard_a": a["answer"]["heard"],
           "where_a": a["answer"]["where"], "heard_b": b["answer"]["heard"], "where_b": b["answer"]["where"],
           **{k: a[k] for k in ("shown_at", "submitted_at", "seconds")}}
    return {k: row[k] for k in PAIR_COLUMNS}


@dataclass(frozen=True)
class Pairs(Design):
    def read_plan(self, data: dict, campaign: Campaign) -> TrialPlan:
        if "design" in data:
            return TrialPlan.from_json(data)
        # assignment.json of a campaign made before every design shared TrialPlan: its pairs by condition index
        return pair_plan(self.name, Assignment.from_json(data), [c.id for c in campaign.conditions])

    def build_plan(self, campaign: Campaign) -> TrialPlan:
        assignment = build_assignment([p["id"] for p in campaign.prompts], len(campaign.conditions),
                                      campaign.raters_per_item, campaign.rater_slots,
                                      float(campaign.definition["repeat_fraction"]), campaign.seed)
        return pair_plan(self.name, assignment, [c.id for c in campaign.conditions])

    def check_balance(self, plan: TrialPlan, campaign: Campaign) -> list[str]:
        index = {c.id: k for k, c in enumerate(campaign.conditions)}

        def orientation(trial: Trial) -> tuple[tuple[str, str], bool]:
            pair = tuple(sorted(trial.conditions, key=index.get))
            return pair, trial.conditions[0] == pair[0]

        return balance.coverage(plan) + balance.per_slot(plan, lambda s, q: balance.sides_balanced(s, q, orientation))

    def prompt_markdown(self, view: PromptView) -> str:
        lines = [f"**Text:** {html.escape(view.text)}"]
        if view.target_delivery or view.intent:
            lines.append("**Intended delivery:** " + " · ".join(x for x in (view.target_delivery,
                                                                            html.escape(view.intent)) if x))
        if view.request is not None:
            lines.append(f"*{TAG_TEXT}*")
        return "\n\n".join(lines)

    def rows(self, trial: Trial, answers: dict, clips: Mapping[str, dict]) -> list[dict]:
        return [{"design": self.name, "stimulus": i, "role": TEST, "condition": trial.conditions[i],
                 "clip_id": clips[trial.stimuli[i]]["clip_id"], "score": answers[SCORE][i], "side": side,
                 "answer": {PREFERENCE: answers[PREFERENCE], HEARD: answers[HEARD][i], WHERE: answers[WHERE][i]}}
                for i, side in enumerate(SIDES)]

    def table(self, rows: list[dict]) -> list[dict]:
        by_entry: dict[str, list[dict]] = defaultdict(list)
        for row in rows:  # stored in submission order, a pair's rows together
            by_entry[row["entry_id"]].append(row)
        return [_pair_row(*sorted(pair, key=lambda r: r["stimulus"])) for pair in by_entry.values()]

    def results(self, campaign: Campaign, rows: list[dict], plan: TrialPlan | None, progress: list[dict] | None,
                qualification: dict[str, bool]) -> CampaignResults:
        return compute_results(campaign, self.table(rows), plan, progress)

    def export(self, campaign: Campaign, results: DesignResults, plan: TrialPlan | None, out: Path
               ) -> tuple[list[Path], dict]:
        files, transcripts = write_pair_exports(campaign, results.table(), plan, out)
        return files, {"nova_transcripts": transcripts, "descriptions": EXPORT_DESCRIPTIONS}

    def clip_ratings(self, rows: list[dict]) -> list[tuple[str, str, float]]:
        return [(r["prompt_id"], cond, score) for r in self.table(rows) if r["repeat_of"] is None
                for cond, score in clip_scores(r)]


DESIGN = Pairs(
    name="ab", title="A/B", summary="blind pairs",
    intro="Listen to both clips, score each, then say which you prefer.",
    instructions=RUBRIC,
    questions=(Question(SCORE, "Clip {clip}: expression score (1-5)", choices=number_choices(*SCORE_RANGE),
                        per_clip=True, missing="Give clip {clip} an expression score from 1 to 5."),
               Question(PREFERENCE, "Which clip do you prefer?",
                        choices=(("A", "A"), ("B", "B"), ("No preference", NO_PREFERENCE)),
                        missing="Choose a preference: A, B or no preference."),
               TAG_QUESTION),
    min_conditions=2, max_clips=2, clip_names=SIDES, clips_side_by_side=True, repeats=True, crowd=False,
    must_play=False, clock_restarts=True, audio_judges=True,
    charts=("Mean score (95 % CI)", "Win rate (95 % CI)"),
    export_label="results, ratings, IndicEmo judgments, NoVA transcripts, audio judges",
    empty_header=("campaign", "entry_id"))
