"""The `Design` record: everything one listening-test design is, in one value, which the store,
the queues, the rating page, the results and the exports ask instead of comparing names.

Library module (no command line). A design is one module of this package defining `DESIGN`::

    DESIGN = MyDesign(name="pref3", title="Preference (3-point)", summary="...", intro="...",
                      instructions="...", questions=(Question("score", "Which clip is better?", choices=...),),
                      scoring=Scoring("pref3", "PREF3", "ordinal", domain=(-1, 0, 1)), max_clips=2, ...)

`Design` holds what every design declares (its page: title, instructions, questions and clips;
its rules: options, conditions, repeats, crowd mode, must-play, how the clock runs) and the
methods a design overrides: its plan (`build_plan`, `check_balance`), extra clips
(`wanted_extras`, `plan_extras`), how a page's answers become stored rows (`rows`) and how those
read back as its ratings table (`table`), its results and export. `ScaleDesign` is a design whose
rows are scores on a scale (MOS, CMOS, SMOS, MUSHRA): screening, statistics and charts by its
`scoring`, `screening` and `chart`. docs/campaigns.md has the steps to add a design.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evaluation.listening_screening import P808, Screening, screen
from evaluation.listening_tests import Scoring
from webapp.campaign.analysis.scores import ScoreChart, ScoreResults, clip_durations, score_results
from webapp.campaign.data.conditions import DesignError
from webapp.campaign.data.definition import Campaign, PromptView
from webapp.campaign.trials.plan import GOLD, TRAP, Extras, Trial, TrialPlan
from webapp.campaign.trials.questions import Question, check_answers

SCORE = "score"  # the question a ScaleDesign stores as each row's score
# The stored columns a scale design's table keeps (webapp.campaign.data.store.COLUMNS before `answer`).
SCORE_COLUMNS = ("campaign", "design", "entry_id", "stimulus", "slot", "position", "rater", "item_id", "prompt_id",
                 "kind", "role", "condition", "reference", "clip_id", "score", "raw_score", "side", "expected",
                 "shown_at", "submitted_at", "seconds")
RATE_BOUNDS = (0.0, 0.5)


class DesignResults(Protocol):
    """A design's results: what the results command prints, results.json, charts and ratings.csv."""

    def markdown(self) -> str: ...

    def numbers(self) -> dict: ...

    def charts(self, out: Path) -> list[Path]: ...

    def table(self) -> list[dict]: ...


@dataclass(frozen=True)
class Option:
    """A `create` flag a design reads, saved in campaign.json's "design_options" under `name`.
    turns_off: a `--no-...` switch that sets the option False; check: raises DesignError for a
    value no design can use (checked whatever the design)."""

    name: str
    flag: str
    help: str
    default: object = None
    type: Callable[[str], object] = str
    metavar: str | None = None
    turns_off: bool = False
    check: Callable[[str, object], None] | None = None


def check_rate(flag: str, rate: object) -> None:
    low, high = RATE_BOUNDS
    if not low <= float(rate) <= high:
        raise DesignError(f"{flag} {rate}: use a share between {low:g} and {high:g} of the test trials.")


TRAP_RATE = Option("trap_rate", "--trap-rate", "trapping trials per test trial (default %(default)s)", 0.05, float,
                   check=check_rate)


@dataclass(frozen=True)
class Design:
    """One listening-test design (module docstring). Subclasses implement `build_plan`, `rows`
    and `results`; the rest has defaults a design may keep."""

    name: str  # the --design value, kept in campaign.json
    title: str  # the rating page's title, e.g. "MOS (ITU-T P.808 ACR)"
    summary: str  # --design's help: what a page holds and how it is rated
    intro: str  # under the page's title
    instructions: str  # above every trial (markdown)
    questions: tuple[Question, ...]
    options: tuple[Option, ...] = ()
    min_conditions: int = 1  # 2: a comparison
    max_clips: int = 1  # clips on one page at most
    clip_names: tuple[str, ...] = ()  # the clips' names on the page ("A", "B"); default "1", "2", ...
    clips_side_by_side: bool = False  # clips in columns (else one row each)
    reference_label: str = "Reference"  # the player above the clips, when the page has one
    show_text: bool = True  # the prompt's words above the clips
    repeats: bool = False  # takes --repeat-fraction (trials shown again for consistency)
    crowd: bool = True  # may run in crowd mode (signed links, no logins)
    must_play: bool = True  # a trial is accepted only once the page played each of its clips
    clock_restarts: bool = False  # a trial's seconds run from its last showing, not its first
    audio_judges: bool = False  # the admin may compute audio judges beside the clip ratings
    pad_clips: bool = False  # a page's clips (and its reference) padded with silence to the longest
    charts: tuple[str, ...] = ("Scores per condition",)  # the admin view's chart labels
    export_label: str = "results, ratings in the reference tools' layouts"
    empty_header: tuple[str, ...] = ("campaign", "entry_id", "stimulus")  # ratings.csv before any rating

    # ------------------------------------------------------------------ options and plan
    def settings(self, campaign: Campaign) -> dict:
        """This design's options as the campaign saved them (defaults for any saved before it had them)."""
        saved = campaign.options
        return {o.name: saved.get(o.name, o.default) for o in self.options}

    def check_options(self, settings: Mapping[str, object], condition_ids: Sequence[str]) -> None:
        """DesignError naming the flag when the design cannot run with these options."""

    def wanted_extras(self, campaign: Campaign) -> dict[str, dict]:
        """{clip key: spec} of every extra clip the design needs (`webapp.campaign.clips.extras`)."""
        return {}

    def plan_extras(self, campaign: Campaign) -> Extras:
        """The extra clips the plan deals: gold and trapping clips from the manifest."""
        extras = campaign.extra_clips()
        gold = [k for k, r in sorted(extras.items()) if r["role"] == GOLD]
        traps = [(k, float(r["expected"])) for k, r in sorted(extras.items()) if r["role"] == TRAP]
        return Extras(gold, traps)

    def build_plan(self, campaign: Campaign) -> TrialPlan:
        raise NotImplementedError

    def check_balance(self, plan: TrialPlan, campaign: Campaign) -> list[str]:
        """The balance rules the plan breaks, in words ([] when it keeps them)."""
        return []

    def read_plan(self, data: dict, campaign: Campaign) -> TrialPlan:
        """The saved plan (assignment.json) as a TrialPlan."""
        return TrialPlan.from_json(data)

    def needs_hearing_check(self, campaign: Campaign) -> bool:
        return False

    # ------------------------------------------------------------------ the page
    def clip_label(self, index: int) -> str:
        """The name of the page's clip `index` ("A", or "1", ...)."""
        return self.clip_names[index] if index < len(self.clip_names) else str(index + 1)

    def shown_reference(self, trial: Trial) -> str | None:
        """The clip key of the player shown above the trial's clips, or None."""
        return None

    def prompt_markdown(self, view: PromptView) -> str:
        """What the page says about the trial's prompt (never the system)."""
        return f"**Text:** {html.escape(view.text)}" if self.show_text else ""

    def tag_words(self, view: PromptView) -> list[str] | None:
        """The words of the prompt's inline-tag request when the page asks the tag question, else None."""
        if view.request is None or not any(q.tag for q in self.questions):
            return None
        return list(view.request.words)

    def check_answers(self, trial: Trial, answers: object, view: PromptView) -> dict:
        """The page's answers checked against its questions (UserError naming what is missing)."""
        names = [self.clip_label(i) for i in range(len(trial.stimuli))]
        return check_answers(self.questions, answers, names, self.tag_words(view))

    # ------------------------------------------------------------------ rows, results, export
    def rows(self, trial: Trial, answers: dict, clips: Mapping[str, dict]) -> list[dict]:
        """The stored rows of one answered trial (`webapp.campaign.data.store.COLUMNS`: design,
        stimulus, role, condition, reference, clip_id, score, ...; `answer` a dict or None)."""
        raise NotImplementedError

    def table(self, rows: list[dict]) -> list[dict]:
        """The stored rows as this design's ratings table (ratings.csv)."""
        return rows

    def results(self, campaign: Campaign, rows: list[dict], plan: TrialPlan | None, progress: list[dict] | None,
                qualification: dict[str, bool]) -> DesignResults:
        raise NotImplementedError

    def export(self, campaign: Campaign, results: DesignResults, plan: TrialPlan | None, out: Path
               ) -> tuple[list[Path], dict]:
        """The design's own export files under `out`, and what the export's manifest.json adds."""
        return [], {}

    def clip_ratings(self, rows: list[dict]) -> list[tuple[str, str, float]]:
        """(prompt id, condition id, score) of every clip rated in a first hearing, for the audio judges."""
        return []


@dataclass(frozen=True)
class ScaleDesign(Design):
    """A design whose stored rows are scores on one scale: the question named "score" (per page:
    the trial's first clip; per clip: every clip), screened by `screening` rules
    (`evaluation.listening_screening.screen`), analysed by `scoring` and drawn by `chart`."""

    scoring: Scoring | None = None
    screening: str = P808
    chart: ScoreChart = ScoreChart()

    def rows(self, trial: Trial, answers: dict, clips: Mapping[str, dict]) -> list[dict]:
        per_clip = isinstance(answers[SCORE], list)
        values = answers[SCORE] if per_clip else [answers[SCORE]]
        reference = clips[trial.reference]["clip_id"] if trial.reference in clips else None
        return [{"design": self.name, "stimulus": i, "role": trial.roles[i], "condition": trial.conditions[i],
                 "reference": reference, "clip_id": clips[trial.stimuli[i]]["clip_id"], "score": value,
                 "expected": trial.expected} for i, value in enumerate(values)]

    def table(self, rows: list[dict]) -> list[dict]:
        return [{k: r.get(k) for k in SCORE_COLUMNS} for r in rows]

    def screen(self, campaign: Campaign, rows: list[dict]) -> Screening:
        """The screening of the rows by the design's rules; the P.808 rules get every clip's
        duration for the speed rule."""
        options = {"clip_durations": clip_durations(campaign)} if self.screening == P808 else {}
        return screen(rows, self.screening, self.name, **options)

    def results(self, campaign: Campaign, rows: list[dict], plan: TrialPlan | None, progress: list[dict] | None,
                qualification: dict[str, bool]) -> ScoreResults:
        table = self.table(rows)
        screening = self.screen(campaign, table) if table else None
        return score_results(campaign.name, table, qualification, self.scoring, screening, self.chart, campaign.seed)
