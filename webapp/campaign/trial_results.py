"""Results and exports of the MOS, CMOS, SMOS and MUSHRA designs: screening by each standard's
rules, then the publication table, pairwise tests, agreement, charts and the reference tools'
CSV layouts.

Library module (the command lines are `python -m webapp.campaign results|export`, which call
this for every design but A/B)::

    results = trial_results(campaign, store)       # TrialResults: .markdown(), .numbers()
    files = export_trials(campaign, store, out)     # [zip, results.md, results.json, ratings.csv, ...]

Screening (`evaluation.listening_screening`): P.808's trapping, gold, variance and speed rules
for mos, cmos and smos (the speed rule uses each clip's duration from the manifest); ITU-R
BS.1534-3's post-screening for mushra. The statistics (`evaluation.listening_tests`) are
computed over the raters the screening keeps; excluded raters stay in every export, marked,
with the reason.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from evaluation.charts import ci_bar_chart
from evaluation.listening_screening import Screening, screen
from evaluation.listening_tests import Analysis, analyse, mushra_boxplot, publication_table, results_numbers
from evaluation.report import markdown_table, write_csv
from rumik_app.files import atomic_write
from webapp.campaign.definition import DEFINITION, Campaign
from webapp.campaign.export import bundle_files
from webapp.campaign.formats import write_design_exports
from webapp.campaign.trial_store import TrialStore
from webapp.ratings import now_iso

SCALE_LIMITS = {"mos": (0, 5.2), "smos": (0, 5.2), "cmos": (-3.2, 3.2), "mushra": (0, 102)}


@dataclass
class TrialResults:
    campaign: str
    design: str
    rows: list[dict]  # every stored rating row, excluded raters included
    screening: Screening | None
    analysis: Analysis | None  # None until something is rated
    qualification: dict[str, bool]

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


def trial_results(campaign: Campaign, store: TrialStore) -> TrialResults:
    """Screening and statistics over every stored rating of the campaign."""
    rows = store.rows(campaign.name)
    qualification = store.qualifications(campaign.name)
    if not rows:
        return TrialResults(campaign.name, campaign.design, rows, None, None, qualification)
    options = {}
    if campaign.design != "mushra":
        options["clip_durations"] = {r["clip_id"]: float(r["duration"]) for r in campaign.clip_by_key().values()
                                     if r.get("clip_id") and r.get("duration")}
    screening = screen(rows, campaign.design, **options)
    analysis = analyse(rows, campaign.design, screening, seed=campaign.seed)
    return TrialResults(campaign.name, campaign.design, rows, screening, analysis, qualification)


def write_trial_charts(results: TrialResults, out: Path) -> list[Path]:
    """MUSHRA: boxplots per condition; the others: score per condition with its 95 % CI."""
    if results.analysis is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    if results.design == "mushra":
        kept = [r for r in results.rows if r["rater"] not in results.screening.excluded]
        return [mushra_boxplot(kept, out / "charts" / "mushra_boxplot.png", f"{results.campaign}: MUSHRA scores")]
    scores = results.analysis.scores
    labels = [s.condition for s in scores]
    return [ci_bar_chart(out / "charts" / "scores.png", f"{results.campaign}: {results.design.upper()} (95 % CI)",
                         labels, [s.ci.mean for s in scores], [s.ci.low for s in scores], [s.ci.high for s in scores],
                         ylabel=results.design.upper(), ylim=SCALE_LIMITS[results.design],
                         reference=0.0 if results.design == "cmos" else None)]


def marked_rows(results: TrialResults) -> list[dict]:
    """Every row with `excluded` (0/1) and `exclusion_reason`: screened-out raters stay, marked."""
    verdicts = results.screening.raters if results.screening else {}
    out = []
    for row in results.rows:
        verdict = verdicts.get(row["rater"])
        excluded = bool(verdict and verdict.excluded)
        out.append({**row, "excluded": int(excluded), "exclusion_reason": "; ".join(verdict.reasons) if excluded
                    else ""})
    return out


def export_trials(campaign: Campaign, store: TrialStore, out_dir: str | Path) -> list[Path]:
    """results.md/json, charts, ratings.csv (ours, marked), the reference tools' CSVs, the clip
    manifest, the definition and a zip of them all; returns [zip, *files]."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = trial_results(campaign, store)
    files = [out / "results.md", out / "results.json"]
    atomic_write(files[0], results.markdown() + "\n")
    atomic_write(files[1], json.dumps(results.numbers(), ensure_ascii=False, indent=1))
    files += write_trial_charts(results, out)
    rows = marked_rows(results)
    headers = list(rows[0]) if rows else ["campaign", "entry_id", "stimulus"]
    files.append(write_csv(out / "ratings.csv", headers, [list(r.values()) for r in rows]))
    clip_ids = {key: r["clip_id"] for key, r in campaign.clip_by_key().items() if r.get("clip_id")}
    files += write_design_exports(campaign.design, rows, out, clip_ids_by_key=clip_ids)
    if campaign.manifest_path.is_file():
        files.append(Path(shutil.copyfile(campaign.manifest_path, out / "clips_manifest.jsonl")))
    files.append(Path(shutil.copyfile(campaign.folder / DEFINITION, out / "campaign.json")))
    manifest = {"campaign": campaign.name, "design": campaign.design, "created_at": now_iso(), "ratings": len(rows),
                "files": sorted(str(f.relative_to(out)) for f in files)}
    atomic_write(out / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1))
    files.append(out / "manifest.json")
    return [bundle_files(out, files), *files]
