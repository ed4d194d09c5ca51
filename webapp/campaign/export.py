"""Write a campaign's results and exports to a folder (and a zip of it).

Library module (the command line is `python -m webapp.campaign export --name N --out DIR`)::

    files = export_campaign(campaign, store, out_dir)      # [zip, results.md, ...]

Files, all under `out_dir`:

    results.md, results.json          the figures of webapp.campaign.results (CIs, alpha, raters), and
                                      the audio judges' section when they were computed
    audio_judges.json                 the audio judges as last computed (webapp.campaign.judges), if ever
    charts/scores.png, win_rate.png   mean score and win rate per condition with 95 % CIs
    ratings.csv                       every stored rating (rater, entry, item, A/B conditions, answers, times)
    indicemo_judgments.jsonl          IndicEmo format (`python -m evaluation.indicemo aggregate --judgments`)
    nova_prompts.jsonl                NoVA requests of the tagged prompts
    nova_transcripts/<condition>/<panel>_run<n>.jsonl   verifier-style NoVA lines per listener and run
    clips_manifest.jsonl              the clip manifest: condition, system, seed, request, sha256
    campaign.json                     the definition (prompts, conditions, k, slots, seed)
    manifest.json                     which file is which
    campaign_export.zip               all of the above
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

from evaluation.charts import ci_bar_chart
from evaluation.report import write_csv, write_jsonl
from webapp.campaign.definition import DEFINITION, Campaign
from webapp.campaign.judges import JUDGES_FILE, first_hearings, judges_markdown, judges_path, load_judges
from webapp.campaign.queues import RaterQueues
from webapp.campaign.results import CampaignResults, compute_results, indicemo_judgments, nova_sets
from webapp.campaign.store import CampaignStore
from webapp.common import safe_file_name
from webapp.ratings import now_iso

ZIP_NAME = "campaign_export.zip"
SCORE_RANGE = (1.0, 5.0)


def results_for(campaign: Campaign, store: CampaignStore) -> CampaignResults:
    """Results over every stored rating, with the per-slot progress."""
    progress = RaterQueues(campaign, store).progress() if campaign.assignment() else None
    return compute_results(campaign, store.rows(campaign.name), progress)


def write_charts(results: CampaignResults, out: Path) -> list[Path]:
    """The two CI bar charts; [] when nothing is rated yet."""
    conds = [c for c in results.conditions if c.score.mean is not None]
    if not conds:
        return []
    labels = [c.condition for c in conds]
    score = ci_bar_chart(out / "charts" / "scores.png", f"{results.campaign}: mean expression score (95 % CI)", labels,
                         [c.score.mean for c in conds], [c.score.low for c in conds], [c.score.high for c in conds],
                         ylabel="score (1-5)", ylim=(0, 5.2))
    wins = ci_bar_chart(out / "charts" / "win_rate.png", f"{results.campaign}: preference win rate (95 % CI)", labels,
                        [c.win_rate.mean for c in conds], [c.win_rate.low for c in conds],
                        [c.win_rate.high for c in conds], ylabel="win rate", ylim=(0, 1), reference=0.5)
    return [score, wins]


def write_results(campaign: Campaign, results: CampaignResults, rows: list[dict], out: Path) -> list[Path]:
    """results.md and results.json, each with the saved audio judges (and a copy of their file)."""
    saved = load_judges(campaign)
    numbers = results.numbers()
    if saved is not None:
        numbers["audio_judges"] = {k: saved[k] for k in ("computed_at", "clip_ratings", "judges", "notes", "results")}
    files = [out / "results.md", out / "results.json"]
    files[0].write_text(results.markdown() + "\n\n" + judges_markdown(saved, len(first_hearings(rows))) + "\n",
                        encoding="utf-8")
    files[1].write_text(json.dumps(numbers, ensure_ascii=False, indent=1), encoding="utf-8")
    if saved is not None:
        files.append(Path(shutil.copyfile(judges_path(campaign), out / JUDGES_FILE)))
    return files


def export_campaign(campaign: Campaign, store: CampaignStore, out_dir: str | Path) -> list[Path]:
    """Write every file of the module docstring; returns [zip, *files]."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = store.rows(campaign.name)
    results = results_for(campaign, store)
    files = write_results(campaign, results, rows, out)
    files += write_charts(results, out)
    headers = list(rows[0]) if rows else ["campaign", "entry_id"]
    files.append(write_csv(out / "ratings.csv", headers, [list(r.values()) for r in rows]))
    files.append(write_jsonl(out / "indicemo_judgments.jsonl", indicemo_judgments(campaign, rows)))
    prompts, runs = nova_sets(campaign, rows)
    files.append(write_jsonl(out / "nova_prompts.jsonl", prompts))
    manifest: dict = {"campaign": campaign.name, "created_at": now_iso(), "ratings": len(rows), "nova_transcripts": []}
    for cond, listeners in sorted(runs.items()):
        for listener, listener_runs in sorted(listeners.items()):
            for k, lines in enumerate(listener_runs, 1):
                path = out / "nova_transcripts" / safe_file_name(cond) / f"{safe_file_name(listener)}_run{k}.jsonl"
                files.append(write_jsonl(path, lines))
                manifest["nova_transcripts"].append({"system": cond, "listener": listener, "run": k,
                                                     "path": str(path.relative_to(out))})
    if campaign.manifest_path.is_file():
        files.append(Path(shutil.copyfile(campaign.manifest_path, out / "clips_manifest.jsonl")))
    files.append(Path(shutil.copyfile(campaign.folder / DEFINITION, out / "campaign.json")))
    manifest["files"] = {
        "results.md": "results (markdown)", "results.json": "results (numbers)", "ratings.csv": "every rating",
        "indicemo_judgments.jsonl": "IndicEmo judgments: python -m evaluation.indicemo aggregate --judgments FILE",
        "nova_prompts.jsonl": "NoVA prompts", "clips_manifest.jsonl": "clips: condition, seed, request, sha256",
        "campaign.json": "the campaign definition",
        JUDGES_FILE: "audio judges (DNSMOS, speaker similarity, Spearman's rho with the listeners), if computed"}
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1), encoding="utf-8")
    files.append(out / "manifest.json")
    return [bundle_files(out, files), *files]


def bundle_files(out: Path, files: list[Path]) -> Path:
    """`out`/campaign_export.zip holding `files` under their paths relative to `out`."""
    bundle = out / ZIP_NAME
    with zipfile.ZipFile(bundle, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            zf.write(f, f.relative_to(out))
    return bundle
