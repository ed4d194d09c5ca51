"""A campaign's results and its export, for every design: the design's record computes them from
the stored rows; this module adds what every design shares and writes the files.

Library module (the command lines are `python -m webapp.campaign results|export`)::

    results = results_for(campaign, store)       # the design's results: .markdown(), .numbers(), .table()
    files = export_campaign(campaign, store, out_dir)      # [zip, results.md, ...]

Files, all under `out_dir`:

    results.md, results.json          the design's figures (CIs, agreement, screening, raters), and the
                                      audio judges' section when the design has them and they were computed
    audio_judges.json                 the audio judges as last computed (webapp.campaign.analysis.judges), if ever
    charts/...                        the design's charts
    ratings.csv                       every rating in the design's table layout
    (the design's own files)          e.g. the P.808 toolkit's or webMUSHRA's CSVs, IndicEmo and NoVA files
    clips_manifest.jsonl              the clip manifest: condition, system, seed, request, sha256
    campaign.json                     the definition (prompts, conditions, k, slots, seed, design)
    manifest.json                     which file is which
    campaign_export.zip               all of the above
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

from evaluation.report import write_csv
from rumik_app.files import atomic_write
from webapp.campaign.analysis.judges import JUDGES_FILE, judges_markdown, judges_path, load_judges
from webapp.campaign.data.definition import DEFINITION, Campaign
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import design_of, plan_of
from webapp.campaign.designs.record import DesignResults
from webapp.campaign.queues import RaterQueues
from webapp.ratings import now_iso

ZIP_NAME = "campaign_export.zip"


def results_for(campaign: Campaign, store: CampaignStore) -> DesignResults:
    """The design's results over every stored rating, with the per-slot progress."""
    plan = plan_of(campaign)
    progress = RaterQueues(campaign, store).progress() if plan is not None else None
    return design_of(campaign).results(campaign, store.stored_rows(campaign.name), plan, progress,
                                       store.qualifications(campaign.name))


def clip_ratings(campaign: Campaign, store: CampaignStore) -> list[tuple[str, str, float]]:
    """The clip ratings the audio judges are set beside (`Design.clip_ratings`)."""
    return design_of(campaign).clip_ratings(store.stored_rows(campaign.name))


def judges_section(campaign: Campaign, store: CampaignStore) -> str:
    """The audio judges' section as last computed, saying whether ratings came in since."""
    return judges_markdown(load_judges(campaign), len(clip_ratings(campaign, store)))


def write_results(campaign: Campaign, results: DesignResults, store: CampaignStore, out: Path) -> list[Path]:
    """results.md and results.json, with the saved audio judges (and a copy of their file) where
    the design has them."""
    markdown, numbers, saved = results.markdown(), results.numbers(), None
    if design_of(campaign).audio_judges:
        saved = load_judges(campaign)
        markdown += "\n\n" + judges_section(campaign, store)
        if saved is not None:
            numbers["audio_judges"] = {k: saved[k] for k in ("computed_at", "clip_ratings", "judges", "notes",
                                                            "results")}
    files = [atomic_write(out / "results.md", markdown + "\n"),
             atomic_write(out / "results.json", json.dumps(numbers, ensure_ascii=False, indent=1))]
    if saved is not None:
        files.append(Path(shutil.copyfile(judges_path(campaign), out / JUDGES_FILE)))
    return files


def export_campaign(campaign: Campaign, store: CampaignStore, out_dir: str | Path) -> list[Path]:
    """Write every file of the module docstring; returns [zip, *files]."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    design, plan = design_of(campaign), plan_of(campaign)
    results = results_for(campaign, store)
    files = write_results(campaign, results, store, out)
    files += results.charts(out)
    table = results.table()
    headers = list(table[0]) if table else list(design.empty_header)
    files.append(write_csv(out / "ratings.csv", headers, [list(r.values()) for r in table]))
    own, described = design.export(campaign, results, plan, out)
    files += own
    if campaign.manifest_path.is_file():
        files.append(Path(shutil.copyfile(campaign.manifest_path, out / "clips_manifest.jsonl")))
    files.append(Path(shutil.copyfile(campaign.folder / DEFINITION, out / "campaign.json")))
    manifest = {"campaign": campaign.name, "design": design.name, "created_at": now_iso(), "ratings": len(table),
                **described, "files": sorted(str(f.relative_to(out)) for f in files)}
    files.append(atomic_write(out / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1)))
    return [bundle_files(out, files), *files]


def bundle_files(out: Path, files: list[Path]) -> Path:
    """`out`/campaign_export.zip holding `files` under their paths relative to `out`."""
    bundle = out / ZIP_NAME
    with zipfile.ZipFile(bundle, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            zf.write(f, f.relative_to(out))
    return bundle
