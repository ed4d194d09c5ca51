"""Pre-generate every test clip of a campaign, resumably.

Library module (the command line is `python -m webapp.campaign create`; `webapp.campaign.prepare`
builds the plan once every clip exists)::

    counts = generate_clips(campaign, batch_size=8, engine_options={"device": "cpu"})  # {"kept", "generated", "failed"}
    missing_clips(campaign)                                        # what is still to make

Systems load through `evaluation.systems.load_system`, as `python -m evaluation.run` does
(`espeak`, `tiny`, `rumik`, `rumik:PATH`, `folder:DIR` for clips of any other system), and
generate through their batched `synthesize_many`. The seed of a clip comes from
(campaign seed, prompt id), the same for every condition of a prompt (common random numbers:
two settings of one system differ by the setting, not the draw). Each clip is written under a
random id to `clips/`, read back, hashed (sha256) and appended to `manifest.jsonl` at once,
so a killed run keeps what it finished; a rerun keeps every clip whose file still matches its
hash and makes the rest. A clip that fails is recorded with its error; the plan is built only
when every (prompt, condition) has a clip, because a fixed design needs all of them.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import defaultdict
from dataclasses import dataclass

from tqdm import tqdm

from evaluation.audio_io import LOCAL_MAX_SECONDS, AudioLoadError, check_audio, file_sha256, load_audio
from evaluation.prompt_file import clip_seed, prompt_request
from evaluation.systems import RumikSystem, SynthesisError, Synthesizer, load_system
from rumik_app.audio import SAMPLE_RATE, write_wav
from rumik_app.request import SynthesisRequest
from webapp.campaign.data.conditions import Condition
from webapp.campaign.data.definition import Campaign, CampaignError, repair_tail

CLIP_ID_BYTES = 16
DEFAULT_BATCH = 8
RUN = 1  # campaigns make one clip per (prompt, condition); evaluation.run's seed helper takes a run number


@dataclass(frozen=True)
class ClipTarget:
    """What a generated clip is for: a campaign condition (index = its place) or an extra clip made by
    a system (index None, role "reference" or "gold", webapp.campaign.clips.extras)."""

    condition: Condition
    index: int | None
    role: str = "test"


def clip_request(prompt: dict, condition: Condition, seed: int, system: Synthesizer) -> SynthesisRequest:
    """The request for one clip: the prompt's own fields, then the condition's settings on top."""
    settings = dict(condition.settings)
    max_seconds = settings.pop("max_seconds", None)
    request = prompt_request(prompt, seed)
    if settings.get("description"):  # a free-form description replaces tone/accent/pace (rumik_app.prompt)
        request = request.with_(tone=None, accent=None, pace=None)
    if {"tone", "accent", "pace"} & set(settings):
        request = request.with_(description=None)
    request = request.with_(**settings)
    if max_seconds is not None and isinstance(system, RumikSystem):
        request = request.with_(max_new_tokens=system.load().max_new_tokens_for(float(max_seconds)))
    return request


def _kept(campaign: Campaign) -> dict[tuple[str, int], dict]:
    """Manifest records whose clip is on disk with the recorded hash (what a rerun keeps)."""
    kept = {}
    for key, rec in campaign.clips().items():
        path = campaign.clip_file(rec)
        if rec.get("error") is None and path.is_file() and file_sha256(path) == rec["sha256"]:
            kept[key] = rec
    return kept


def _record(campaign: Campaign, prompt: dict, target: ClipTarget, seed: int, request: SynthesisRequest | None,
            clip_id: str | None, error: str | None, system: Synthesizer) -> dict:
    condition = target.condition
    rec = {"clip_id": clip_id, "prompt_id": prompt["id"], "condition": target.index, "condition_id": condition.id,
           "role": target.role, "system": condition.system, "system_name": system.name, "seed": seed,
           "request": request.to_dict() if request is not None else None, "sha256": None, "duration": None,
           "warning": None, "error": error}
    return checked_record(campaign, rec, f"{prompt['id']} ({condition.id})")


def checked_record(campaign: Campaign, rec: dict, where: str) -> dict:
    """`rec` with its clip's sha256 and duration read back from disk (a warning for a silent or
    very short clip; an error when it cannot be read)."""
    if rec["error"] is None:
        path = campaign.clip_file(rec)
        try:
            samples = load_audio(path, SAMPLE_RATE, max_seconds=LOCAL_MAX_SECONDS)
            rec["sha256"], rec["duration"] = file_sha256(path), round(len(samples) / SAMPLE_RATE, 3)
            check_audio(samples, SAMPLE_RATE, where=where)
        except AudioLoadError as exc:  # silent or very short: still a system's output, rated as such
            rec["warning"] = str(exc)
        if rec["sha256"] is None:
            rec["error"] = rec["warning"]
    return rec


def generate_clips(campaign: Campaign, batch_size: int = DEFAULT_BATCH, engine_options: dict | None = None,
                   systems: dict[str, Synthesizer] | None = None) -> dict[str, int]:
    """Make every clip not on disk yet (see the module docstring); returns counts.

    engine_options: `load_engine`'s, for rumik systems (`rumik_app.cli_args` flags);
    `systems` maps a system spec to a ready Synthesizer (tests inject their own)."""
    kept = _kept(campaign)
    pending: dict[int, list[dict]] = defaultdict(list)
    for index in range(len(campaign.conditions)):
        for prompt in campaign.prompts:
            if (prompt["id"], index) not in kept:
                pending[index].append(prompt)
    counts = {"kept": len(kept), "generated": 0, "failed": 0}
    total = sum(len(v) for v in pending.values())
    if not total:
        return counts
    campaign.clips_dir.mkdir(parents=True, exist_ok=True)
    loaded: dict[str, Synthesizer] = dict(systems or {})
    repair_tail(campaign.manifest_path)  # a line cut short by a crash: its clip is made again
    fd = os.open(campaign.manifest_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # maps clips to systems
    with open(fd, "a", encoding="utf-8") as log, \
            tqdm(total=total, desc=f"generating clips ({campaign.name})", unit="clip") as bar:
        for index, prompts in pending.items():
            condition = campaign.conditions[index]
            try:
                if condition.system not in loaded:
                    loaded[condition.system] = load_system(condition.system, **(engine_options or {}))
                system = loaded[condition.system]
                system.load()  # a broken system fails here, once, before any of its clips
            except SynthesisError as exc:
                raise CampaignError(f"System {condition.system!r}: {exc}") from None
            for lo in range(0, len(prompts), batch_size):
                batch = prompts[lo:lo + batch_size]
                for rec in generate_batch(campaign, ClipTarget(condition, index), batch, system):
                    counts["failed" if rec["error"] else "generated"] += 1
                    log.write(json.dumps(rec, ensure_ascii=False) + "\n")
                log.flush()
                os.fsync(log.fileno())
                bar.update(len(batch))
    return counts


def generate_batch(campaign: Campaign, target: ClipTarget, batch: list[dict], system: Synthesizer) -> list[dict]:
    """Synthesise one batch of prompts for `target`, write the clips, return their manifest records."""
    condition = target.condition
    requests, ok, records = [], [], []
    for prompt in batch:
        seed = clip_seed(campaign.seed, prompt["id"], RUN)
        try:
            requests.append(clip_request(prompt, condition, seed, system))
            ok.append(prompt)
        except (ValueError, TypeError) as exc:
            records.append(_record(campaign, prompt, target, seed, None, None, f"request: {exc}", system))
    results = system.synthesize_many(requests, [p["id"] for p in ok], run=None) if ok else []
    for prompt, request, result in zip(ok, requests, results, strict=True):
        if isinstance(result, Exception):
            records.append(_record(campaign, prompt, target, request.seed, request, None,
                                   f"synthesis: {str(result).strip() or type(result).__name__}", system))
            continue
        clip_id = secrets.token_hex(CLIP_ID_BYTES)
        write_wav(campaign.clips_dir / f"{clip_id}.wav", result.samples, result.sample_rate)
        seed = result.seed if result.seed is not None else request.seed
        records.append(_record(campaign, prompt, target, seed, request, clip_id, None, system))
    return records


def missing_clips(campaign: Campaign) -> list[dict]:
    """Manifest records (or stand-ins) for every (prompt, condition) without a usable clip."""
    kept = _kept(campaign)
    recorded = campaign.clips()
    out = []
    for index, condition in enumerate(campaign.conditions):
        for prompt in campaign.prompts:
            if (prompt["id"], index) not in kept:
                out.append(recorded.get((prompt["id"], index)) or
                           {"prompt_id": prompt["id"], "condition_id": condition.id, "error": "not generated yet"})
    return out

