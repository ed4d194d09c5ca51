"""Results of the designs whose rows are scores on a scale (MOS, CMOS, SMOS, MUSHRA, ...):
screening by the design's rules, then the publication table, pairwise tests, agreement, charts,
and the rating rows with the screening's verdict.

Library module (no command line; a design's record calls it, `python -m webapp.campaign results|export`
reach it through the record)::

    results = score_results(campaign.name, rows, qualification, MOS_SCORING, screening, ScoreChart((0, 5.2)),
                            seed=campaign.seed)
    results.markdown(); results.numbers(); results.charts(out_dir); results.table()

The statistics (`evaluation.listening_tests`) are computed over the raters the screening
(`evaluation.listening_screening`) keeps; excluded raters stay in the table (ratings.csv), marked,
with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluation.charts import ci_bar_chart
from evaluation.listening_screening import Screening
from evaluation.listening_tests import Analysis, Scoring, analyse, mushra_boxplot, publication_table, results_numbers
from evaluation.report import markdown_table
from webapp.campaign.data.definition import Campaign


@dataclass(frozen=True)
class ScoreChart:
    """How a design draws its scores: a box plot per condition, or means with their 95 % CIs
    within `ylim` and a line at `reference` (e.g. 0 for a comparison)."""

    ylim: tuple[float, float] = (0.0, 100.0)
    reference: float | None = None
    boxplot: bool = False


@dataclass
class ScoreResults:
    campaign: str
    scoring: Scoring
    rows: list[dict]  # every stored rating row, excluded raters included
    screening: Screening | None
    analysis: Analysis | None  # None until something is rated
    qualification: dict[str, bool]
    chart: ScoreChart

    @property
    def design(self) -> str:
        return self.scoring.name

    def markdown(self) -> str:
        lines = [f"# Campaign {self.campaign} ({self.design})", ""]
        if self.analysis is None:
            return "\n".join(lines + ["Nothing rated yet."])
        n_raters = len({r["rater"] for r in self.rows})
        lines += [f"{len({r['entry_id'] for r in self.rows})} trials rated by {n_raters} raters; "
                  f"{len(self.screening.excluded)} excluded by screening. 95 % CIs: ITU-T P.808's t interval over "
                  "ratings; letters: conditions sharing a letter do not differ (Wilcoxon signed-rank, Holm, "
                  "p < 0.05).", "", publication_table(self.analysis), ""]
        if self.analysis.pairs:
            lines += ["## Pairwise tests", "", markdown_table(
                ["A", "B", "paired by", "N pairs", "p", "p (Holm)", "significant"],
                [[p.a, p.b, p.paired_by, p.n_pairs, f"{p.p_raw:.3g}", f"{p.p_holm:.3g}", "yes" if p.significant else
                  "no"] for p in self.analysis.pairs]), ""]
        alpha = self.analysis.alpha
        lines += [f"Agreement (Krippendorff's alpha): {'n/a' if alpha is None else f'{alpha:.3f}'}", "",
                  "## Screening", "", f"Rules: {', '.join(self.screening.rules)}", ""]
        excluded = self.screening.as_dict()["excluded"]
        lines += [f"- **{rater}** excluded: {'; '.join(reasons)}" for rater, reasons in excluded.items()]
        failed = sorted(r for r, ok in self.qualification.items() if not ok)
        if failed:
            lines += ["", f"Failed the hearing check (no ratings): {', '.join(failed)}"]
        return "\n".join(lines)

    def numbers(self) -> dict:
        out = {"campaign": self.campaign, "design": self.design, "ratings": len(self.rows),
               "qualification": self.qualification}
        if self.analysis is not None:
            out.update(results_numbers(self.analysis))
        return out

    def charts(self, out: Path) -> list[Path]:
        """The box plot per condition, or the score per condition with its 95 % CI; [] before any rating."""
        if self.analysis is None:
            return []
        out.mkdir(parents=True, exist_ok=True)
        label = self.scoring.label
        if self.chart.boxplot:
            kept = [r for r in self.rows if r["rater"] not in self.screening.excluded]
            return [mushra_boxplot(kept, out / "charts" / f"{self.design}_boxplot.png",
                                   f"{self.campaign}: {label} scores")]
        scores = self.analysis.scores
        return [ci_bar_chart(out / "charts" / "scores.png", f"{self.campaign}: {label} (95 % CI)",
                             [s.condition for s in scores], [s.ci.mean for s in scores], [s.ci.low for s in scores],
                             [s.ci.high for s in scores], ylabel=label, ylim=self.chart.ylim,
                             reference=self.chart.reference)]

    def table(self) -> list[dict]:
        """Every row with `excluded` (0/1) and `exclusion_reason`: screened-out raters stay, marked."""
        verdicts = self.screening.raters if self.screening else {}
        out = []
        for row in self.rows:
            verdict = verdicts.get(row["rater"])
            excluded = bool(verdict and verdict.excluded)
            out.append({**row, "excluded": int(excluded),
                        "exclusion_reason": "; ".join(verdict.reasons) if excluded else ""})
        return out


def clip_durations(campaign: Campaign) -> dict[str, float]:
    """{clip id: seconds} of every clip in the manifest (for the speed rule)."""
    return {r["clip_id"]: float(r["duration"]) for r in campaign.clip_by_key().values()
            if r.get("clip_id") and r.get("duration")}


def score_results(campaign: str, rows: Sequence[dict], qualification: dict[str, bool], scoring: Scoring,
                  screening: Screening | None, chart: ScoreChart, seed: int) -> ScoreResults:
    """The statistics of `rows` over the raters `screening` keeps (None: nothing rated yet)."""
    rows = list(rows)
    if not rows:
        return ScoreResults(campaign, scoring, rows, None, None, qualification, chart)
    analysis = analyse(rows, scoring, screening, seed=seed)
    return ScoreResults(campaign, scoring, rows, screening, analysis, qualification, chart)
