"""Extra clips made in a campaign beside its test clips: references, anchors, gold, trapping and
hearing-check clips, each from a spec its design's record writes (`Design.wanted_extras`).

Library module (the command line is `python -m webapp.campaign create --design ...`)::

    wanted = {"p1|gold:espeak": {"role": "gold", "system": "espeak", "prompt": "p1", "expected": 2.0},
              "p1|anchor": {"role": "anchor", "derive": "anchor", "prompt": "p1", "from": "reference"}}
    counts = generate_extras(campaign, wanted, batch_size=8, engine_options={})   # {"kept", "generated", "failed"}
    missing_extras(campaign, wanted)                                              # clip keys still to make

A spec says what makes a clip: a `system` (an evaluation.systems spec) speaking the prompt, or
`derive` from something else (`clips.stimuli`): "file" (the clip at `path`, copied in), "digits"
(a hearing-check trial: `digits` in noise at `snr_db`), "anchor" (a 3.5 kHz low-pass, ITU-R
BS.1534-3), "degraded" (a known "Bad" clip, P.808 gold) or "trap" (the lead of a clip, then a
voice asking for `answer`, read out as `label`). A derived clip is made from the prompt's extra
clip named in `from`, else from its first condition's test clip. `expected` is the known answer
(gold, trap), kept in the manifest. `trap_specs` and `qualification_specs` write the specs the
P.808 designs share.

Everything is seeded from the campaign seed; a rerun keeps every extra whose file still matches
its hash, as the test clips do.
"""

from __future__ import annotations

import json
import os
import random
import secrets
from collections.abc import Mapping, Sequence

from evaluation.audio_io import LOCAL_MAX_SECONDS, AudioLoadError, file_sha256, load_audio
from evaluation.prompt_file import clip_seed
from evaluation.systems import SynthesisError, Synthesizer, load_system
from rumik_app.audio import SAMPLE_RATE, write_wav
from webapp.campaign.clips import stimuli
from webapp.campaign.clips.generate import CLIP_ID_BYTES, DEFAULT_BATCH, ClipTarget, checked_record, generate_batch
from webapp.campaign.data.conditions import Condition
from webapp.campaign.data.definition import Campaign, CampaignError, repair_tail
from webapp.campaign.trials.plan import TRAP, clip_key

QUALIFICATION_PROMPT = "qualification"
QUALIFICATION_ROLE = "qualification"
TRAP_POOL = 4  # distinct trapping clips per campaign (each asks for its own answer)
# Hearing-check clips per difficulty level: each rater is dealt one of them per level
# (`RaterQueues.qualification_clips`), so one participant's clips and answers do not pass another's check.
HEARING_POOL = 6
Spec = Mapping[str, object]


def trap_specs(prompt_ids: Sequence[str], seed: int, labels: Mapping[int, str]) -> dict[str, dict]:
    """TRAP_POOL trapping clips (fewer with fewer prompts), each asking for a random answer on the
    scale `labels` ({value: word}), made from the first condition's clip of a prompt."""
    rng = random.Random(f"{seed}:traps")
    want = {}
    for n in range(min(TRAP_POOL, max(1, len(prompt_ids)))):
        prompt = prompt_ids[n % len(prompt_ids)]
        answer = rng.randint(min(labels), max(labels))
        want[clip_key(prompt, f"{TRAP}:{n}")] = {"role": TRAP, "derive": "trap", "prompt": prompt, "answer": answer,
                                                 "label": labels[answer], "expected": float(answer)}
    return want


def qualification_specs(seed: int, pool: int = HEARING_POOL) -> dict[str, dict]:
    """The hearing check's digits-in-noise clips (`stimuli.qualification_set`): `pool` sets of one
    clip per level, easiest level first. Clip `qual:<n>` is of level n % levels, and the first set
    is the one campaigns made before the pool had, so their clips are kept."""
    levels = len(stimuli.QUALIFICATION_SNRS_DB)
    sets = [stimuli.qualification_set(seed if k == 0 else f"{seed}:hearing:{k}") for k in range(pool)]
    return {clip_key(QUALIFICATION_PROMPT, f"qual:{k * levels + level}"): {
        "role": QUALIFICATION_ROLE, "derive": "digits", "prompt": QUALIFICATION_PROMPT, "digits": digits,
        "snr_db": snr} for k, trials in enumerate(sets) for level, (digits, snr) in enumerate(trials)}


def qualification_pool(campaign: Campaign) -> list[list[str]]:
    """The hearing check's clip keys per level, easiest level first (one of each is dealt to a rater)."""
    levels = len(stimuli.QUALIFICATION_SNRS_DB)
    keys = sorted((k for k, r in campaign.extra_clips().items() if r.get("role") == QUALIFICATION_ROLE),
                  key=lambda k: int(k.rsplit(":", 1)[1]))
    pool = [[k for k in keys if int(k.rsplit(":", 1)[1]) % levels == level] for level in range(levels)]
    return [keys for keys in pool if keys]


def kept_extras(campaign: Campaign) -> dict[str, dict]:
    """Extra clips on disk with their recorded hash (what a rerun keeps), by clip key."""
    kept = {}
    for key, rec in campaign.extra_clips().items():
        path = campaign.clip_file(rec) if rec.get("clip_id") else None
        if rec.get("error") is None and path is not None and path.is_file() and file_sha256(path) == rec["sha256"]:
            kept[key] = rec
    return kept


def missing_extras(campaign: Campaign, wanted: Mapping[str, Spec]) -> list[str]:
    kept = kept_extras(campaign)
    return [key for key in wanted if key not in kept]


def generate_extras(campaign: Campaign, wanted: Mapping[str, Spec], batch_size: int = DEFAULT_BATCH,
                    engine_options: dict | None = None, systems: dict[str, Synthesizer] | None = None
                    ) -> dict[str, int]:
    """Make every missing extra clip: system ones first (references, espeak gold), then the ones
    derived from clips (anchors, degraded gold, traps, hearing check). Returns counts."""
    kept = kept_extras(campaign)
    todo = {k: v for k, v in wanted.items() if k not in kept}
    counts = {"kept": len(kept), "generated": 0, "failed": 0}
    if not todo:
        return counts
    loaded: dict[str, Synthesizer] = dict(systems or {})
    records = _system_extras(campaign, todo, batch_size, engine_options, loaded)
    _append(campaign, records)
    derived = [_derived(campaign, key, spec, loaded) for key, spec in todo.items() if "derive" in spec]
    _append(campaign, derived)
    for rec in records + derived:
        counts["failed" if rec["error"] else "generated"] += 1
    return counts


def _system_extras(campaign, todo, batch_size, engine_options, loaded) -> list[dict]:
    by_system: dict[str, list[tuple[str, Spec]]] = {}
    for key, spec in todo.items():
        if "system" in spec:
            by_system.setdefault(spec["system"], []).append((key, spec))
    records = []
    for spec_name, items in by_system.items():
        system = _system(spec_name, loaded, engine_options)
        for role, cond in {(s["role"], k.split("|", 1)[1]) for k, s in items}:
            chosen = [(k, s) for k, s in items if k.split("|", 1)[1] == cond]
            target = ClipTarget(Condition(cond, spec_name, shared_settings(campaign)), None, role)
            prompts = [campaign.prompt(s["prompt"]) for _, s in chosen]
            expected = {s["prompt"]: s.get("expected") for _, s in chosen}
            for lo in range(0, len(prompts), batch_size):
                for rec in generate_batch(campaign, target, prompts[lo:lo + batch_size], system):
                    rec["expected"] = expected[rec["prompt_id"]]
                    records.append(rec)
    return records


def shared_settings(campaign: Campaign) -> dict:
    """The settings every condition has in common (e.g. `--setting voice=Ira`), which the
    reference systems follow too."""
    first = dict(campaign.conditions[0].settings)
    return {k: v for k, v in first.items() if all(c.settings.get(k) == v for c in campaign.conditions)}


def _system(spec: str, loaded: dict, engine_options: dict | None) -> Synthesizer:
    try:
        if spec not in loaded:
            loaded[spec] = load_system(spec, **(engine_options or {}))
        loaded[spec].load()
    except SynthesisError as exc:
        raise CampaignError(f"System {spec!r}: {exc}") from None
    return loaded[spec]


def _derived(campaign: Campaign, key: str, spec: Spec, loaded: dict) -> dict:
    """One clip made from another clip or from speech: anchor, degraded gold, trap, digits, a copied file."""
    prompt, cond = key.split("|", 1)
    rec = {"clip_id": secrets.token_hex(CLIP_ID_BYTES), "prompt_id": prompt, "condition": None, "condition_id": cond,
           "role": spec["role"], "system": spec["derive"], "seed": clip_seed(campaign.seed, key, 1), "source": None,
           "expected": spec.get("expected"), "sha256": None, "duration": None, "warning": None, "error": None}
    try:
        samples = _derive(campaign, spec, rec, loaded)
    except (AudioLoadError, SynthesisError, CampaignError, OSError, ValueError) as exc:
        return {**rec, "clip_id": None, "error": f"{spec['derive']}: {exc}"}
    write_wav(campaign.clip_file(rec), samples, SAMPLE_RATE)
    return checked_record(campaign, rec, f"{prompt} ({cond})")


def _derive(campaign: Campaign, spec: Spec, rec: dict, loaded: dict):
    kind, prompt, seed = spec["derive"], spec["prompt"], rec["seed"]
    if kind == "file":
        return load_audio(spec["path"], SAMPLE_RATE, max_seconds=LOCAL_MAX_SECONDS)
    if kind == "digits":
        rec["answer"] = spec["digits"]
        return stimuli.digits_in_noise(spec["digits"], spec["snr_db"], SAMPLE_RATE, seed, _speaker(loaded))
    source = _source_clip(campaign, prompt, spec.get("from"))
    rec["source"] = source["clip_id"]
    samples = load_audio(campaign.clip_file(source), SAMPLE_RATE, max_seconds=LOCAL_MAX_SECONDS)
    if kind == "anchor":
        return stimuli.mushra_anchor(samples, SAMPLE_RATE)
    if kind == "degraded":
        return stimuli.degraded_gold(samples, SAMPLE_RATE, seed)
    if kind == "trap":
        return stimuli.trap_clip(samples, SAMPLE_RATE, spec["answer"], spec["label"], _speaker(loaded))
    raise CampaignError(f"extra clip {prompt}: no way to make a {kind!r} clip")


def _speaker(loaded: dict):
    if "speaker" not in loaded:
        loaded["speaker"] = stimuli.espeak_speaker()
    return loaded["speaker"]


def _source_clip(campaign: Campaign, prompt: str, extra: str | None) -> dict:
    """The clip an extra is made from: the prompt's extra clip `extra`, else its first condition's clip."""
    rec = campaign.extra_clips().get(clip_key(prompt, extra)) if extra else campaign.clips().get((prompt, 0))
    if rec is None or rec.get("error") or not rec.get("clip_id"):
        raise CampaignError(f"the clip {prompt} ({extra or campaign.conditions[0].id}) it is made from is missing")
    return rec


def _append(campaign: Campaign, records: list[dict]) -> None:
    if not records:
        return
    repair_tail(campaign.manifest_path)
    fd = os.open(campaign.manifest_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with open(fd, "a", encoding="utf-8") as log:
        log.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        log.flush()
        os.fsync(log.fileno())
