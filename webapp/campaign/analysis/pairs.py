"""The results of blind A/B pairs (the A/B design's): per-condition scores and win rates with 95 %
bootstrap CIs, Krippendorff's alpha, per-rater statistics, charts, and the IndicEmo / NoVA views
and files.

Library module (the command lines are `python -m webapp.campaign results|export`, through the A/B
design's record)::

    res = compute_results(campaign, pair_rows, plan, progress)   # pair rows: webapp.campaign.designs.ab
    print(res.markdown()); res.numbers()          # the same figures as JSON-ready dicts
    res.charts(out_dir)                           # charts/scores.png, charts/win_rate.png
    files, transcripts = write_pair_exports(campaign, pair_rows, plan, out_dir)   # IndicEmo and NoVA files

Definitions (first hearings only; repeated items feed the consistency columns alone):

- Score of a condition: the mean over prompts of the prompt's mean 1-5 expression score
  for it; the 95 % CI is a percentile bootstrap over prompts (`scipy.stats.bootstrap` via
  `evaluation.listening_stats`), so it reflects how much the result depends on the prompts.
- Win rate of a condition: per rating of a pair holding it, 1 if preferred, 0.5 for "no
  preference", 0 otherwise; mean over prompts of the prompt's mean, CI as above. The pair
  table gives the same for each pair of conditions (0.5 = no difference).
- Agreement: Krippendorff's alpha (the `krippendorff` package), ordinal over the 1-5
  scores (unit = one clip of one pair) and nominal over the preferences (unit = one pair;
  values = the preferred condition or "none", so A/B positions do not matter).
- Per rater: share of their preferences equal to the other raters' majority on the same
  pair (pairs with a tie among the others are skipped); mean absolute difference between
  their score and the others' mean on the same clip; score alpha without them (a careless
  rater is one whose removal raises alpha); median seconds per item (from showing to
  submitting); the share of A among their A/B choices (A and B are balanced, so far from 0.5
  is a position bias); on repeated items, the share with the same preferred condition and the mean
  absolute score change.
- IndicEmo and NoVA: each pair is rated by k raters, and the design gives every copy of a
  prompt's pairs to one rater, so the k raters of a prompt are its "panels" 1..k (judge_id
  `panel<n>`; the rater is kept in a `rater` field). A panel's IndicEmo score for a condition
  on a prompt is the mean of its ratings of that condition there (one rating with two
  conditions). NoVA listeners are the panels too; the n-th hearing of a clip is run n.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.charts import ci_bar_chart
from evaluation.listening_stats import Estimate, bootstrap_mean, krippendorff_alpha
from evaluation.report import markdown_table, write_jsonl
from webapp.campaign.data.definition import Campaign, spoken_text
from webapp.campaign.trials.plan import TrialPlan
from webapp.common import safe_file_name
from webapp.ratings import NO_PREFERENCE, NOT_HEARD, aggregate_exports

SCORE_DOMAIN = (1, 2, 3, 4, 5)
TIE_WIN = 0.5


@dataclass(frozen=True)
class ConditionStats:
    condition: str
    score: Estimate
    win_rate: Estimate
    ratings: int  # clip ratings behind the score


@dataclass(frozen=True)
class PairStats:
    a: str
    b: str
    win_rate_a: Estimate  # a over b
    wins_a: int
    wins_b: int
    ties: int


@dataclass(frozen=True)
class RaterStats:
    rater: str
    slot: int | None
    done: int
    total: int
    median_seconds: float | None
    chose_a: float | None  # share of A among their A/B choices: far from 0.5 = position bias
    preference_agreement: float | None
    score_deviation: float | None
    score_alpha_without: float | None
    repeats: int
    repeat_same_preference: float | None
    repeat_score_change: float | None


@dataclass
class CampaignResults:
    campaign: str
    conditions: list[ConditionStats]
    pairs: list[PairStats]
    alpha_scores: float | None
    alpha_preferences: float | None
    raters: list[RaterStats]
    ratings: int  # all stored ratings (repeats included)
    first_hearings: int
    expected: int  # entries in all queues
    emo_markdown: str = ""
    emo_numbers: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # every pair row (repeats included): ratings.csv

    def table(self) -> list[dict]:
        return self.rows

    def charts(self, out: Path) -> list[Path]:
        """Mean score and win rate per condition with their CIs; [] when nothing is rated yet."""
        conds = [c for c in self.conditions if c.score.mean is not None]
        if not conds:
            return []
        labels = [c.condition for c in conds]
        score = ci_bar_chart(out / "charts" / "scores.png", f"{self.campaign}: mean expression score (95 % CI)",
                             labels, [c.score.mean for c in conds], [c.score.low for c in conds],
                             [c.score.high for c in conds], ylabel="score (1-5)", ylim=(0, 5.2))
        wins = ci_bar_chart(out / "charts" / "win_rate.png", f"{self.campaign}: preference win rate (95 % CI)",
                            labels, [c.win_rate.mean for c in conds], [c.win_rate.low for c in conds],
                            [c.win_rate.high for c in conds], ylabel="win rate", ylim=(0, 1), reference=0.5)
        return [score, wins]

    def numbers(self) -> dict:
        return {
            "campaign": self.campaign, "ratings": self.ratings, "first_hearings": self.first_hearings,
            "expected": self.expected,
            "conditions": {c.condition: {"score": c.score.as_dict(), "win_rate": c.win_rate.as_dict(),
                                         "ratings": c.ratings} for c in self.conditions},
            "pairs": [{"a": p.a, "b": p.b, "win_rate_a": p.win_rate_a.as_dict(), "wins_a": p.wins_a,
                       "wins_b": p.wins_b, "ties": p.ties} for p in self.pairs],
            "alpha": {"scores_ordinal": self.alpha_scores, "preferences_nominal": self.alpha_preferences},
            "raters": [r.__dict__ for r in self.raters],
            **self.emo_numbers,
        }

    def markdown(self) -> str:
        lines = [f"# Campaign {self.campaign}", "",
                 f"{self.ratings} of {self.expected} queue items rated ({self.first_hearings} first hearings, "
                 f"{self.ratings - self.first_hearings} repeats). 95 % CIs: percentile bootstrap over prompts.", "",
                 "## Conditions", "",
                 markdown_table(["condition", "mean score [95 % CI] (prompts)", "win rate [95 % CI] (prompts)",
                                 "clip ratings"],
                                [[c.condition, c.score.text(), c.win_rate.text(), c.ratings] for c in self.conditions]),
                 "", "## Pairs", "",
                 markdown_table(["A", "B", "A's win rate over B [95 % CI]", "A preferred", "B preferred",
                                 "no preference"],
                                [[p.a, p.b, p.win_rate_a.text(), p.wins_a, p.wins_b, p.ties] for p in self.pairs]),
                 "", "## Agreement (Krippendorff's alpha)", "",
                 f"- scores, ordinal: {_fmt(self.alpha_scores)}",
                 f"- preferences, nominal: {_fmt(self.alpha_preferences)}",
                 "", "## Raters", "",
                 markdown_table(["rater", "slot", "done", "median s/item", "chose A", "agrees with others' preference",
                                 "mean score distance to others", "score alpha without them", "repeats",
                                 "same preference on repeat", "mean score change on repeat"],
                                [[r.rater, r.slot, f"{r.done} / {r.total}", r.median_seconds, r.chose_a,
                                  r.preference_agreement,
                                  r.score_deviation, r.score_alpha_without, r.repeats, r.repeat_same_preference,
                                  r.repeat_score_change] for r in self.raters])]
        if self.emo_markdown:
            lines += ["", self.emo_markdown]
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "n/a (too few overlapping ratings, or no variation)" if value is None else f"{value:.3f}"


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def clip_scores(row: dict) -> list[tuple[str, int]]:
    """[(condition, score)] of one rating: A's and B's."""
    return [(row["condition_a"], row["score_a"]), (row["condition_b"], row["score_b"])]


def preference_value(row: dict) -> str:
    """The preferred condition, or "none": position-free, for agreement."""
    return row["preferred_condition"] or NO_PREFERENCE


def win_of(row: dict, condition: str) -> float:
    pref = row["preferred_condition"]
    return TIE_WIN if pref is None else float(pref == condition)


def _per_prompt_mean(pairs: list[tuple[str, float]]) -> list[float]:
    by_prompt: dict[str, list[float]] = defaultdict(list)
    for prompt, value in pairs:
        by_prompt[prompt].append(value)
    return [statistics.fmean(v) for _, v in sorted(by_prompt.items())]


def compute_results(campaign: Campaign, rows: list[dict], plan: TrialPlan | None, progress: list[dict] | None = None,
                    seed: int | None = None) -> CampaignResults:
    """Every figure of the module docstring from the pair rows (`webapp.campaign.designs.ab`)."""
    seed = campaign.seed if seed is None else seed
    first = [r for r in rows if r["repeat_of"] is None]
    ids = [c.id for c in campaign.conditions]
    conditions = []
    for cid in ids:
        scored = [(r["prompt_id"], s) for r in first for c, s in clip_scores(r) if c == cid]
        wins = [(r["prompt_id"], win_of(r, cid)) for r in first if cid in (r["condition_a"], r["condition_b"])]
        conditions.append(ConditionStats(cid, bootstrap_mean(_per_prompt_mean(scored), seed=seed),
                                         bootstrap_mean(_per_prompt_mean(wins), seed=seed), len(scored)))
    pairs = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            held = [r for r in first if {r["condition_a"], r["condition_b"]} == {a, b}]
            prefs = Counter(r["preferred_condition"] for r in held)
            pairs.append(PairStats(a, b,
                                   bootstrap_mean(_per_prompt_mean([(r["prompt_id"], win_of(r, a)) for r in held]),
                                                  seed=seed), prefs[a], prefs[b], prefs[None]))
    scores = score_ratings(first)
    prefs_by_rater = preference_ratings(first)
    judgments = indicemo_judgments(campaign, rows, plan)
    prompts, runs = nova_sets(campaign, rows, plan)
    emo_md, emo_numbers = aggregate_exports(judgments, prompts, runs) if (judgments or runs) else ("", {})
    expected = sum(len(q) for q in plan.slots) if plan else 0
    return CampaignResults(campaign.name, conditions, pairs,
                           krippendorff_alpha(scores, "ordinal", SCORE_DOMAIN),
                           krippendorff_alpha(prefs_by_rater, "nominal"),
                           rater_stats(rows, scores, prefs_by_rater, progress), len(rows), len(first), expected,
                           emo_md, {k: v for k, v in emo_numbers.items() if k in ("indicemo", "nova")}, rows)


def score_ratings(first: list[dict]) -> dict[str, dict[str, int]]:
    """{rater: {"<item>|<condition>": score}}: the reliability data of the scores."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for r in first:
        for cond, score in clip_scores(r):
            out[r["rater"]][f"{r['item_id']}|{cond}"] = score
    return dict(out)


def preference_ratings(first: list[dict]) -> dict[str, dict[str, str]]:
    """{rater: {item: preferred condition or "none"}}."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for r in first:
        out[r["rater"]][r["item_id"]] = preference_value(r)
    return dict(out)


def rater_stats(rows: list[dict], scores: dict, prefs: dict, progress: list[dict] | None) -> list[RaterStats]:
    by_entry = {r["entry_id"]: r for r in rows}
    slots = {p["rater"]: p for p in (progress or []) if p["rater"]}
    raters = sorted(set(slots) | {r["rater"] for r in rows})
    out = []
    for rater in raters:
        mine = [r for r in rows if r["rater"] == rater]
        seconds = [r["seconds"] for r in mine if r["seconds"] is not None]
        sided = [float(r["preference"] == "A") for r in mine if r["preference"] in ("A", "B")]
        agree, deviations = [], []
        for item, value in prefs.get(rater, {}).items():
            others = Counter(v[item] for o, v in prefs.items() if o != rater and item in v)
            top = others.most_common(2)
            if top and (len(top) == 1 or top[0][1] > top[1][1]):
                agree.append(float(value == top[0][0]))
        for unit, score in scores.get(rater, {}).items():
            others = [v[unit] for o, v in scores.items() if o != rater and unit in v]
            if others:
                deviations.append(abs(score - statistics.fmean(others)))
        without = {o: v for o, v in scores.items() if o != rater}
        same, change = [], []
        for r in mine:
            orig = by_entry.get(r["repeat_of"]) if r["repeat_of"] else None
            if orig is None or orig["rater"] != rater:  # a slot taken over after `remove-rater`: not a repeat
                continue
            same.append(float(preference_value(r) == preference_value(orig)))
            before = dict(clip_scores(orig))
            change += [abs(s - before[c]) for c, s in clip_scores(r) if c in before]
        slot = slots.get(rater, {})
        out.append(RaterStats(rater, slot.get("slot"), slot.get("done", len(mine)), slot.get("total", len(mine)),
                              statistics.median(seconds) if seconds else None, _mean(sided), _mean(agree),
                              _mean(deviations),
                              krippendorff_alpha(without, "ordinal", SCORE_DOMAIN) if len(without) > 1 else None,
                              len(same), _mean(same), _mean(change)))
    return out


def panels(plan: TrialPlan | None) -> dict[str, dict[int, int]]:
    """{prompt id: {slot: panel number 1..k}}: the k slots holding a prompt, in slot order."""
    holders: dict[str, set[int]] = defaultdict(set)
    for queue in plan.slots if plan else []:
        for e in queue:
            holders[e.prompt_id].add(e.slot)
    return {p: {s: n for n, s in enumerate(sorted(slots), 1)} for p, slots in holders.items()}


def indicemo_judgments(campaign: Campaign, rows: list[dict], plan: TrialPlan | None) -> list[dict]:
    """IndicEmo judgment lines (see the module docstring), for prompts with a target delivery."""
    panel_of = panels(plan)
    grouped: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    raters: dict[tuple[str, int], str] = {}
    for r in rows:
        if r["repeat_of"] is None:
            for cond, score in clip_scores(r):
                grouped[(r["prompt_id"], r["slot"], cond)].append(score)
            raters[(r["prompt_id"], r["slot"])] = r["rater"]
    out = []
    for (prompt, slot, cond), values in sorted(grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        delivery = campaign.prompt_view(prompt).target_delivery
        if delivery:
            out.append({"prompt_id": prompt, "judge_id": f"panel{panel_of[prompt][slot]}", "system_id": cond,
                        "expression_quality_score": statistics.fmean(values), "target_delivery": delivery,
                        "rater": raters[(prompt, slot)], "ratings": len(values)})
    return out


def nova_sets(campaign: Campaign, rows: list[dict], plan: TrialPlan | None
              ) -> tuple[list[dict], dict[str, dict[str, list[list[dict]]]]]:
    """(NoVA prompts, {condition: {panel: [run transcripts, ...]}}) from the tagged prompts' answers."""
    panel_of = panels(plan)
    prompts: dict[str, dict] = {}
    runs: dict[str, dict[str, list[list[dict]]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted((r for r in rows if r["repeat_of"] is None), key=lambda r: (r["slot"], r["position"])):
        view = campaign.prompt_view(r["prompt_id"])
        if view.request is None:
            continue
        prompts.setdefault(r["prompt_id"], view.request.nova_prompt(r["prompt_id"],
                                                                   spoken_text(campaign.prompt(r["prompt_id"]))))
        listener = f"panel{panel_of[r['prompt_id']][r['slot']]}"
        for cond, heard, where in ((r["condition_a"], r["heard_a"], r["where_a"]),
                                   (r["condition_b"], r["heard_b"], r["where_b"])):
            if heard is None:
                continue
            tags = [] if heard == NOT_HEARD else [{"cls": heard, "index": where}]
            by_run = runs[cond][listener]
            run = next((k for k, lines in enumerate(by_run) if all(x["id"] != r["prompt_id"] for x in lines)), None)
            if run is None:
                by_run.append([])
                run = len(by_run) - 1
            by_run[run].append({"id": r["prompt_id"], "hyp_tags": tags})
    return list(prompts.values()), {c: dict(v) for c, v in runs.items()}


def write_pair_exports(campaign: Campaign, rows: list[dict], plan: TrialPlan | None, out: Path
                       ) -> tuple[list[Path], list[dict]]:
    """indicemo_judgments.jsonl (read by `python -m evaluation.indicemo aggregate --judgments`),
    nova_prompts.jsonl and nova_transcripts/<condition>/<panel>_run<n>.jsonl (for `evaluation.nova`)
    under `out`; returns (files, one {"system", "listener", "run", "path"} per transcript)."""
    files = [write_jsonl(out / "indicemo_judgments.jsonl", indicemo_judgments(campaign, rows, plan))]
    prompts, runs = nova_sets(campaign, rows, plan)
    files.append(write_jsonl(out / "nova_prompts.jsonl", prompts))
    transcripts = []
    for cond, listeners in sorted(runs.items()):
        for listener, listener_runs in sorted(listeners.items()):
            for k, lines in enumerate(listener_runs, 1):
                path = out / "nova_transcripts" / safe_file_name(cond) / f"{safe_file_name(listener)}_run{k}.jsonl"
                files.append(write_jsonl(path, lines))
                transcripts.append({"system": cond, "listener": listener, "run": k,
                                    "path": str(path.relative_to(out))})
    return files, transcripts
