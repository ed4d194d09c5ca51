"""Audio judges beside a campaign's listeners: DNSMOS and speaker similarity per condition next
to the human scores, and Spearman's rho of clip mean ratings with DNSMOS OVRL with a paired
bootstrap CI (`evaluation.campaign_judges`; docs/ARCHITECTURE.md §8, §13).

Library module (the command line is `python -m webapp.campaign judges --name N`; the admin's
"Compute audio judges" button on the campaign server runs the same)::

    saved = compute_judges(campaign, ratings, AudioJudges())  # writes campaigns/NAME/audio_judges.json
    saved = load_judges(campaign)                            # the last saved result, or None
    judges_markdown(saved, clip_ratings=12)                  # the section shown, and exported

It is an explicit action because it takes time: DNSMOS and one embedding per clip (about a
second each on a CPU), and once per checkpoint a system's voice reference. Clips: every
manifest record with a clip (`Campaign.clips()`); human scores: each clip's mean score over the
ratings given, (prompt id, condition id, score) of every clip rated in a first hearing, which
the design's record reads from its rows (`Design.clip_ratings`;
`evaluation.campaign_judges.human_scores`). A clip's speaker similarity is to
the voice reference of its condition's system speaking the voice the clip asked for
(`evaluation.voice_ref`, cached per checkpoint), or to one reference clip for every condition
(`reference_clip`, the command line's --speaker-ref). A `folder:` system has no voice of its
own, so without a reference clip its similarity is n/a (the saved notes say so). Each clip's
values are saved with its sha256 and the judges that made them and reused by the next run, so
computing again after more ratings costs only the statistics. The file is JSON written
atomically (temp file, fsync, rename) next to campaign.json; exports include it.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path

from rumik_app.errors import RumikError
from webapp.campaign.data.definition import Campaign, CampaignError, write_json_atomic
from webapp.ratings import now_iso

ClipRating = tuple[str, str, float]  # (prompt id, condition id, score) of one clip rated in a first hearing

log = logging.getLogger(__name__)

JUDGES_FILE = "audio_judges.json"
FILE_VERSION = 1


def judges_path(campaign: Campaign) -> Path:
    return campaign.folder / JUDGES_FILE


def load_judges(campaign: Campaign) -> dict | None:
    """The saved result (see `compute_judges`), or None if never computed or unreadable."""
    path = judges_path(campaign)
    try:
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        log.warning("%s is unreadable; compute the audio judges again", path)
        return None
    return saved if isinstance(saved, dict) and saved.get("version") == FILE_VERSION else None


def campaign_clips(campaign: Campaign) -> dict[str, list[tuple]]:
    """{condition id: [(evaluation.campaign_judges.Clip, sha256), ...]} for every manifest record
    that has its clip."""
    from evaluation.campaign_judges import Clip

    out: dict[str, list[tuple]] = defaultdict(list)
    for rec in campaign.clips().values():
        if rec.get("error") is None and rec.get("clip_id"):
            voice = (rec.get("request") or {}).get("voice")
            out[rec["condition_id"]].append((Clip(rec["prompt_id"], rec["condition_id"], campaign.clip_file(rec),
                                                  voice), rec["sha256"]))
    return dict(out)


def _references(campaign: Campaign, encoder, voices: dict[str, set], reference_clip, systems: dict):
    """({condition id: VoiceReferences or None}, notes): every voice's reference made now, so a
    condition whose system cannot speak one loses only its similarity."""
    from evaluation.systems import load_system
    from evaluation.voice_ref import VoiceReferences

    if reference_clip is not None:
        refs = VoiceReferences(encoder, clip=reference_clip)
        return {cond: refs for cond in voices}, []
    out, notes = {}, []
    for cond in campaign.conditions:
        if cond.id not in voices:
            continue
        try:
            system = systems.get(cond.system) or load_system(cond.system)
            refs = VoiceReferences(encoder, system=system)
            for voice in sorted(voices[cond.id], key=str):
                refs.get(voice)
            out[cond.id] = refs
        except RumikError as exc:
            log.warning("no voice reference for %s: %s", cond.id, exc)
            out[cond.id] = None
            notes.append(f"{cond.id}: no speaker similarity ({str(exc).splitlines()[0]})")
    return out, notes


def _signature(quality, encoder, refs) -> str:
    """What a clip's values depend on besides the clip itself, per judge."""
    speaker = None if encoder is None or refs is None else f"{encoder.name} vs {refs.source}"
    # "loading": clips are read at their own rate and converted once, with soxr; values
    # judged before that are judged again.
    return json.dumps({"quality": getattr(quality, "name", None), "speaker": speaker, "loading": "native-soxr-hq"},
                      sort_keys=True)


def _reusable(prev: dict | None, sha: str, sig: str) -> dict:
    """The values of `prev` (a saved clip entry) still right for the clip `sha` under `sig`, judge by
    judge: a new speaker reference judges speaker similarity again, not DNSMOS (the slow judge)."""
    if not prev or prev.get("sha256") != sha or "error" in prev["values"]:
        return {}
    try:
        then, now = json.loads(prev.get("judges") or "{}"), json.loads(sig)
    except (TypeError, ValueError):
        return {}
    if then.get("loading") != now["loading"]:
        return {}
    from evaluation.campaign_judges import JUDGE_GROUPS

    kept = {}
    for judge, keys in JUDGE_GROUPS:
        if now[judge] is not None and then.get(judge) == now[judge] and all(k in prev["values"] for k in keys):
            kept.update({k: prev["values"][k] for k in keys})
    return kept


def _judge_condition(items: list[tuple], quality, encoder, refs, old: dict) -> list[dict]:
    """Saved clip entries of one condition: each judge's values reused where sha256 and that judge
    match, else judged now (clips grouped by the judges they still need, each file decoded once)."""
    from evaluation.campaign_judges import JUDGE_GROUPS, judge_clips

    sig = _signature(quality, encoder, refs)
    speaker = encoder if refs is not None else None
    wanted = {"quality": quality, "speaker": speaker}
    kept = {clip: _reusable(old.get((clip.prompt, clip.condition)), sha, sig) for clip, sha in items}
    groups: dict[tuple[str, ...], list] = {}
    for clip, _ in items:
        missing = tuple(judge for judge, keys in JUDGE_GROUPS
                        if wanted[judge] is not None and not all(k in kept[clip] for k in keys))
        groups.setdefault(missing, []).append(clip)
    values = dict(kept)
    for missing, clips in groups.items():
        if not missing:
            continue
        judged = judge_clips(clips, quality=quality if "quality" in missing else None,
                             speaker=speaker if "speaker" in missing else None, references=refs)
        for clip in clips:
            new = judged[(clip.prompt, clip.condition)]
            values[clip] = new if "error" in new else {**values[clip], **new}
    return [{"prompt": clip.prompt, "condition": clip.condition, "sha256": sha, "judges": sig,
             "values": _ordered(values[clip])} for clip, sha in items]


def _ordered(values: dict) -> dict:
    """A clip's values in judge_clips's key order, however many were reused."""
    from evaluation.campaign_judges import JUDGE_KEYS

    order = {k: i for i, k in enumerate(JUDGE_KEYS)}
    return dict(sorted(values.items(), key=lambda kv: order.get(kv[0], len(order))))


def compute_judges(campaign: Campaign, ratings: list[ClipRating], audio_judges, quality: bool = True,
                   speaker: bool = True, reference_clip: str | Path | None = None,
                   systems: dict | None = None) -> dict:
    """Judge the campaign's clips, set them beside the human scores (`ratings`, the design's
    `clip_ratings`), save and return the result.

    audio_judges: `webapp.audio_judges.AudioJudges` (the loaded DNSMOS and encoder); systems:
    {system spec: Synthesizer} to reuse (else `evaluation.systems.load_system`). The result:
    {"version", "campaign", "computed_at", "rated_clips", "clip_ratings", "judges", "notes", "results"
    (`JudgeResults.as_dict()`), "markdown", "clips" (per-clip values with sha256)}."""
    from evaluation.campaign_judges import human_scores, judge_results

    if not (quality or speaker):
        raise CampaignError("Ask for at least one audio judge (DNSMOS quality or speaker similarity).")
    clips = campaign_clips(campaign)
    if not clips:
        raise CampaignError(f"Campaign {campaign.name!r} has no clips yet; finish `create` first.")
    dnsmos = audio_judges.quality() if quality else None
    encoder = audio_judges.encoder() if speaker else None
    refs, notes = ({}, [])
    if encoder is not None:
        voices = {cond: {c.voice for c, _ in items} for cond, items in clips.items()}
        refs, notes = _references(campaign, encoder, voices, reference_clip, systems or {})
    old = {(e["prompt"], e["condition"]): e for e in (load_judges(campaign) or {}).get("clips", [])}
    entries = [e for cond, items in clips.items()
               for e in _judge_condition(items, dnsmos, encoder, refs.get(cond), old)]
    results = judge_results({(e["prompt"], e["condition"]): e["values"] for e in entries}, human_scores(ratings),
                            seed=campaign.seed)
    saved = {"version": FILE_VERSION, "campaign": campaign.name, "computed_at": now_iso(),
             "rated_clips": len({(p, c) for p, c, _ in ratings}), "clip_ratings": len(ratings),
             "judges": {"quality": getattr(dnsmos, "name", None), "speaker": getattr(encoder, "name", None),
                        "references": {c: (r.source if r is not None else None) for c, r in refs.items()}},
             "notes": notes, "results": results.as_dict(), "markdown": results.markdown(), "clips": entries}
    write_json_atomic(judges_path(campaign), saved)
    return saved


def judges_markdown(saved: dict | None, clip_ratings: int | None = None) -> str:
    """The saved section with when it was computed; says so when ratings came in since
    (`clip_ratings`: the first-hearing clip ratings stored now)."""
    if saved is None:
        return ("## Audio judges beside the listeners\n\nNot computed yet: press *Compute audio judges* (admin) or "
                "run `python -m webapp.campaign judges --name NAME`.")
    lines = [saved["markdown"], "", f"Computed {saved['computed_at']} from {saved['clip_ratings']} first-hearing clip "
             f"rating(s) (judges: DNSMOS `{saved['judges']['quality']}`, speaker `{saved['judges']['speaker']}`)."]
    refs = {c: s for c, s in saved["judges"]["references"].items() if s}
    if refs:
        lines.append("Speaker references: " + "; ".join(f"{c}: {s}" for c, s in sorted(refs.items())) + ".")
    lines += [f"- {n}" for n in saved["notes"]]
    if clip_ratings is not None and clip_ratings != saved["clip_ratings"]:
        lines.append(f"**{clip_ratings} clip ratings are stored now: compute the audio judges again to include "
                     "them.**")
    return "\n".join(lines)
