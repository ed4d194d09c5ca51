"""Rater screening of listening tests: which raters' ratings are left out, and why.

Library module (no command line) over the rating rows of the campaigns (one dict per rated
stimulus, the `campaign_scores` table of `webapp.campaign.data.store`); pure, no webapp import,
and no design names: the caller (a campaign design's record) chooses the rules and labels the
result::

    from evaluation.listening_screening import apply_screening, screen, screen_mushra, screen_p808
    screening = screen_p808(rows, "mos", clip_durations={"9f0c...": 3.2})  # ACR, CCR, similarity rows
    screening = screen_mushra(rows, "mushra")                              # rows with a hidden reference
    screening = screen(rows, "bs1534", "mushra")                           # either, by the rules' name
    kept = apply_screening(rows, screening)                                # rows of the kept raters
    screening.raters["crowd-0a1b2c3d4e5f"]   # RaterVerdict(excluded=True, reasons=("trap: ...",))

Every reason names its rule and where the rule comes from. The P.808 rules mirror Microsoft's
P.808 toolkit (github.com/microsoft/P.808 at commit 5b8c00a, `src/result_parser.py` and the
result-parser templates in `src/assets_master_script/`). The toolkit judges a session (one HIT of
about ten clips with one trap and one gold clip); a campaign here has no such sessions, one rater's
work is the unit, so each rule is applied to all of a rater's ratings:

- trap: `check_tps` (result_parser.py l. 174-233) counts a trapping question right only when the
  answer is the one asked for, and `[acceptance_criteria] correct_tps_bigger_equal: 1` rejects a
  session with a wrong one (ITU-T P.808 §6.3.8). Here: any trap answered wrong excludes the rater.
  The answer compared is the click as given (`raw_score` where the row has one, the CMOS click;
  else `score`). The toolkit's CCR trap accepts -1..1 around its "answer 0": pass trap_tolerance=1.
- gold: `check_gold_question` (l. 553-605) counts a gold clip right when the answer lies within
  `[gold_question] variance: 1` of the known answer (docs/prep_acr.md: "+/- 1 deviation is
  accepted"); `[accept_and_use] gold_standard_bigger_equal: 1` drops a session whose gold is wrong,
  and `evaluate_rater_performance` (l. 871-947) drops every session of a rater when fewer than
  `rater_min_acceptance_rate_current_test: 50` % of the rater's sessions were usable (the p804 and
  pp835 templates' [accept_and_use]). Here each gold trial stands for a session: a rater with more
  than 50 % of gold answers off by more than 1 is excluded.
- variance: `check_variance` (l. 236-270) takes the sample variance (`statistics.variance`) of a
  session's answers to the test clips (gold and trap left out), and `[accept_and_use]
  variance_bigger_equal: 0.1` (ACR and CCR templates; `check_if_session_should_be_used`,
  l. 115-137) drops a session below it (the same answer clicked throughout). Here: over the
  rater's test answers as clicked; a rater with fewer than 2 test answers is not judged (a toolkit
  session always has about ten; it would drop one with fewer than two).
- speed: the toolkit has no speed rule (it only reports the median work time for the pay rate,
  `calc_payment_stat`, l. 1560-1585). House rule: a rater whose median trial time is shorter
  than the rated clip (`clip_durations`, clip_id -> seconds) cannot have listened, and is
  excluded; without durations an explicit `min_median_seconds` floor may be given, else the rule
  is skipped.
- not mirrored: "all clips played", the math and hearing checks (plays and qualification are
  separate tables, not rating rows: a rater who failed the qualification has no rows) and the
  per-clip z-score outlier removal (`outlier_removal`, commented out in the ACR template).

Every P.808-style test uses the same function: its trap trials (and the variance and speed rules)
apply when present; where a test has no gold clips, the gold rule has nothing to judge.

BS.1534 (MUSHRA): ITU-R BS.1534-3 §4.1.2 post-screening: a rater who rates the hidden reference
below 90 for more than 15 % of the items, or the anchor above 90 for more than 15 % of the items, is
excluded. BS.1534-3 words the anchor rule for the mid-range anchor; a campaign here has one anchor
(role "anchor") and the rule is applied to it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rumik_app.errors import RumikError

TRAP_TOLERANCE = 0.0  # toolkit ACR: the answer asked for exactly
GOLD_TOLERANCE = 1.0  # toolkit [gold_question] variance: 1
MAX_GOLD_FAIL_SHARE = 0.5  # toolkit rater_min_acceptance_rate_current_test: 50 (%)
MIN_VARIANCE = 0.1  # toolkit [accept_and_use] variance_bigger_equal: 0.1
MIN_VARIANCE_ANSWERS = 2  # a sample variance needs two answers
MUSHRA_THRESHOLD = 90.0  # BS.1534-3 §4.1.2
MUSHRA_SHARE = 0.15  # BS.1534-3 §4.1.2: more than 15 % of the items
TOOLKIT = "P.808 toolkit src/result_parser.py"
P808, BS1534 = "p808", "bs1534"  # the rule sets `screen` knows, by the standard they come from


class ScreeningError(RumikError, ValueError):
    """Rating rows or screening options that cannot be screened; the message names the fix."""


@dataclass(frozen=True)
class RaterVerdict:
    """One rater's screening result: excluded when any rule gave a reason."""

    excluded: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Screening:
    """Screening of one campaign: rules applied (by name) and a verdict per rater seen in the rows.
    `design`: the caller's label of the test (a campaign's design name), carried into `as_dict`."""

    design: str
    rules: tuple[str, ...]
    raters: Mapping[str, RaterVerdict]

    @property
    def excluded(self) -> frozenset[str]:
        return frozenset(r for r, v in self.raters.items() if v.excluded)

    @property
    def kept(self) -> frozenset[str]:
        return frozenset(r for r, v in self.raters.items() if not v.excluded)

    def as_dict(self) -> dict:
        """JSON-able: {"design", "rules", "excluded": {rater: [reasons]}, "n_raters", "n_kept"}."""
        return {"design": self.design, "rules": list(self.rules), "n_raters": len(self.raters),
                "n_kept": len(self.kept),
                "excluded": {r: list(v.reasons) for r, v in sorted(self.raters.items()) if v.excluded}}


def apply_screening(rows: Iterable[Mapping], screening: Screening) -> list[Mapping]:
    """The rows of the raters the screening kept (rows of raters it never saw are kept too)."""
    out = screening.excluded
    return [r for r in rows if r["rater"] not in out]


def answer(row: Mapping) -> float:
    """The answer as clicked: CMOS `raw_score` (before the side correction), else `score`."""
    raw = row.get("raw_score")
    return float(raw if raw is not None else row["score"])


def _verdicts(rows: Sequence[Mapping], label: str, rules: dict[str, dict[str, list[str]]]) -> Screening:
    """Merge {rule: {rater: [reasons]}} into a Screening over every rater in `rows`."""
    raters = sorted({r["rater"] for r in rows})
    verdicts = {}
    for rater in raters:
        reasons = tuple(reason for per in rules.values() for reason in per.get(rater, []))
        verdicts[rater] = RaterVerdict(bool(reasons), reasons)
    return Screening(label, tuple(rules), verdicts)


def trap_reasons(rows: Sequence[Mapping], tolerance: float = TRAP_TOLERANCE) -> dict[str, list[str]]:
    """{rater: [reason]} for raters who answered any trap trial (kind "trap") off its `expected`."""
    wrong: dict[str, int] = defaultdict(int)
    seen: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["kind"] != "trap" or r.get("expected") is None:
            continue
        seen[r["rater"]] += 1
        wrong[r["rater"]] += abs(answer(r) - float(r["expected"])) > tolerance
    return {rater: [f"trap: {w} of {seen[rater]} trapping question(s) answered wrong (ITU-T P.808 §6.3.8; "
                    f"{TOOLKIT} check_tps, [acceptance_criteria] correct_tps_bigger_equal: 1)"]
            for rater, w in wrong.items() if w > 0}


def gold_reasons(rows: Sequence[Mapping], tolerance: float = GOLD_TOLERANCE,
                 max_fail_share: float = MAX_GOLD_FAIL_SHARE) -> dict[str, list[str]]:
    """{rater: [reason]} for raters whose gold answers (kind "gold") are off their `expected` by more
    than `tolerance` on more than `max_fail_share` of their gold trials."""
    wrong: dict[str, int] = defaultdict(int)
    seen: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["kind"] != "gold" or r.get("expected") is None:
            continue
        seen[r["rater"]] += 1
        wrong[r["rater"]] += abs(float(r["score"]) - float(r["expected"])) > tolerance
    return {rater: [f"gold: {w} of {seen[rater]} gold clip(s) off the known answer by more than {tolerance:g} "
                    f"(more than {max_fail_share:.0%}; {TOOLKIT} check_gold_question with [gold_question] "
                    f"variance: 1, evaluate_rater_performance with rater_min_acceptance_rate_current_test: 50)"]
            for rater, w in wrong.items() if w / seen[rater] > max_fail_share}


def variance_reasons(rows: Sequence[Mapping], min_variance: float = MIN_VARIANCE) -> dict[str, list[str]]:
    """{rater: [reason]} for raters whose test answers (kind and role "test", as clicked) have a
    sample variance below `min_variance`; raters with fewer than 2 test answers are not judged."""
    answers: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["kind"] == "test" and r["role"] == "test":
            answers[r["rater"]].append(answer(r))
    out = {}
    for rater, xs in answers.items():
        if len(xs) < MIN_VARIANCE_ANSWERS:
            continue
        var = float(np.var(xs, ddof=1))
        if var < min_variance:
            out[rater] = [f"variance: sample variance {var:.3f} of {len(xs)} test answers is below {min_variance:g} "
                          f"(straight-lining; {TOOLKIT} check_variance, [accept_and_use] variance_bigger_equal: 0.1)"]
    return out


def speed_reasons(rows: Sequence[Mapping], clip_durations: Mapping[str, float] | None = None,
                  min_median_seconds: float | None = None) -> dict[str, list[str]]:
    """{rater: [reason]} for raters too fast to have listened: with `clip_durations` (clip_id ->
    seconds), the median over their trials of (trial seconds - longest rated clip) is below 0;
    else with `min_median_seconds`, their median trial seconds is below it; else nothing."""
    if clip_durations is None and min_median_seconds is None:
        return {}
    trials: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:  # one entry per trial: its seconds, then each rated clip's duration
        if r.get("seconds") is None:
            continue
        trial = trials[r["rater"]][r["entry_id"]]
        if not trial:
            trial.append(float(r["seconds"]))
        if clip_durations is not None:
            trial.append(float(clip_durations.get(r["clip_id"], np.nan)))
    out = {}
    for rater, per in trials.items():
        if clip_durations is not None:
            slack = [t[0] - max(t[1:]) for t in per.values() if not np.isnan(max(t[1:]))]
            if slack and float(np.median(slack)) < 0:
                out[rater] = [f"speed: median trial time is {-float(np.median(slack)):.2f} s shorter than the rated "
                              f"clip over {len(slack)} trials (house rule; the P.808 toolkit has no speed rule)"]
        else:
            med = float(np.median([t[0] for t in per.values()]))
            if med < min_median_seconds:
                out[rater] = [f"speed: median trial time {med:.2f} s is below {min_median_seconds:g} s "
                              f"over {len(per)} trials (house rule; the P.808 toolkit has no speed rule)"]
    return out


def screen_p808(rows: Sequence[Mapping], label: str = P808, *, trap_tolerance: float = TRAP_TOLERANCE,
                gold_tolerance: float = GOLD_TOLERANCE, max_gold_fail_share: float = MAX_GOLD_FAIL_SHARE,
                min_variance: float = MIN_VARIANCE, clip_durations: Mapping[str, float] | None = None,
                min_median_seconds: float | None = None) -> Screening:
    """P.808-toolkit screening: trap, gold, variance and speed rules (module docstring); a rater is
    excluded by any of them. `label` names the test in the result."""
    rules = {"trap": trap_reasons(rows, trap_tolerance),
             "gold": gold_reasons(rows, gold_tolerance, max_gold_fail_share),
             "variance": variance_reasons(rows, min_variance)}
    if clip_durations is not None or min_median_seconds is not None:
        rules["speed"] = speed_reasons(rows, clip_durations, min_median_seconds)
    return _verdicts(rows, label, rules)


def screen_mushra(rows: Sequence[Mapping], label: str = BS1534, threshold: float = MUSHRA_THRESHOLD,
                  share: float = MUSHRA_SHARE) -> Screening:
    """ITU-R BS.1534-3 §4.1.2 post-screening: exclude a rater who rates the hidden reference (role
    "reference") below `threshold` on more than `share` of their items, or the anchor (role
    "anchor") above `threshold` on more than `share` of their items. `label` names the test."""
    hits: dict[str, dict[str, list[bool]]] = defaultdict(lambda: {"reference": [], "anchor": []})
    for r in rows:
        if r["role"] == "reference":
            hits[r["rater"]]["reference"].append(float(r["score"]) < threshold)
        elif r["role"] == "anchor":
            hits[r["rater"]]["anchor"].append(float(r["score"]) > threshold)
    rules: dict[str, dict[str, list[str]]] = {"reference": {}, "anchor": {}}
    words = {"reference": "the hidden reference below", "anchor": "the anchor above"}
    for rater, per in hits.items():
        for role, flags in per.items():
            if flags and sum(flags) / len(flags) > share:
                rules[role][rater] = [f"{role}: rated {words[role]} {threshold:g} on {sum(flags)} of {len(flags)} "
                                      f"items (more than {share:.0%}; ITU-R BS.1534-3 §4.1.2 post-screening)"]
    return _verdicts(rows, label, rules)


RULES = {P808: screen_p808, BS1534: screen_mushra}


def screen(rows: Sequence[Mapping], rules: str, label: str | None = None, **options) -> Screening:
    """The screening `rules` name ("p808": `screen_p808`, "bs1534": `screen_mushra`), labelled
    `label` (default: the rules' name); `options` go to that function."""
    if rules not in RULES:
        raise ScreeningError(f"screen: unknown screening rules {rules!r}; use one of {', '.join(RULES)}.")
    return RULES[rules](rows, label or rules, **options)
