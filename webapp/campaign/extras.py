"""The extra clips of the listening-test designs, made in the campaign beside the test clips,
and the trial plan built once every clip exists.

Library module (the command line is `python -m webapp.campaign create --design ...`)::

    counts = prepare_campaign(campaign, batch_size=8, engine_options={})   # test clips, extras, plan
    campaign.assignment()                                                   # TrialPlan (or the A/B Assignment)

Extras by design (their manifest records carry `role`, and `expected` for gold and traps):

- mos: gold clips, `gold:espeak` (the espeak system speaking the prompt: clean but robotic,
  expected "Poor" = 2) and `gold:degraded` (a deliberately ruined copy of the first condition's
  clip: expected "Bad" = 1); trapping clips (the lead of a test clip, then a voice asking for a
  given answer); the qualification's digits-in-noise clips.
- smos: the voice reference: one clip (`--speaker-ref CLIP`, copied in) or a system's own clips
  (`--speaker-ref-system SYSTEM`; prompt i is heard beside that system's clip of prompt i+1, so
  the reference says other words); trapping clips as in mos.
- mushra: per prompt the hidden reference (`--reference SYSTEM`, a system or `folder:DIR`) and
  the anchor, a 3.5 kHz low-pass of that reference (ITU-R BS.1534-3).
- cmos: none; its reference is one of the conditions.

Everything is seeded from the campaign seed; a rerun keeps every extra whose file still matches
its hash, as the test clips do.
"""

from __future__ import annotations

import json
import os
import random
import secrets

from evaluation.audio_io import LOCAL_MAX_SECONDS, AudioLoadError, file_sha256, load_audio
from evaluation.run import clip_seed
from evaluation.systems import SynthesisError, Synthesizer, load_system
from rumik_app.audio import SAMPLE_RATE, write_wav
from webapp.campaign import stimuli
from webapp.campaign.definition import Campaign, CampaignError, repair_tail
from webapp.campaign.design import Condition
from webapp.campaign.designs import (
    ACR_LABELS,
    ANCHOR,
    GOLD_DEGRADED,
    GOLD_ESPEAK,
    GOLD_EXPECTED,
    REFERENCE,
    SIMILARITY_LABELS,
    SPEAKER_PROMPT,
    TRAP,
    Extras,
    build_trials,
    check_balance,
    clip_key,
)
from webapp.campaign.generate import (
    CLIP_ID_BYTES,
    DEFAULT_BATCH,
    ClipTarget,
    checked_record,
    ensure_assignment,
    generate_batch,
    generate_clips,
    missing_clips,
)

QUALIFICATION_PROMPT = "qualification"
TRAP_POOL = 4  # distinct trapping clips per campaign (each asks for its own answer)
ESPEAK = "espeak"


def wanted_extras(campaign: Campaign) -> dict[str, dict]:
    """{clip key: what makes it} for every extra clip the design needs (see the module docstring)."""
    options, prompts = campaign.options, [p["id"] for p in campaign.prompts]
    want: dict[str, dict] = {}
    if campaign.design == "mos":
        for p in prompts:
            want[clip_key(p, GOLD_ESPEAK)] = {"role": "gold", "system": ESPEAK, "prompt": p}
            want[clip_key(p, GOLD_DEGRADED)] = {"role": "gold", "derive": "degraded", "prompt": p}
        if options.qualification:
            for n, (digits, snr) in enumerate(stimuli.qualification_set(campaign.seed)):
                want[clip_key(QUALIFICATION_PROMPT, f"qual:{n}")] = {"role": "qualification", "derive": "digits",
                                                                   "prompt": QUALIFICATION_PROMPT,
                                                                   "digits": digits, "snr_db": snr}
    if campaign.design in ("mos", "smos") and options.trap_rate > 0:
        rng = random.Random(f"{campaign.seed}:traps")
        for n in range(min(TRAP_POOL, max(1, len(prompts)))):
            want[clip_key(prompts[n % len(prompts)], f"{TRAP}:{n}")] = {
                "role": "trap", "derive": "trap", "prompt": prompts[n % len(prompts)], "answer": rng.randint(1, 5)}
    if campaign.design == "smos":
        if options.speaker_ref:
            want[clip_key(SPEAKER_PROMPT, REFERENCE)] = {"role": "reference", "derive": "file",
                                                         "prompt": SPEAKER_PROMPT}
        else:
            for p in prompts:
                want[clip_key(p, REFERENCE)] = {"role": "reference", "system": options.speaker_ref_system, "prompt": p}
    if campaign.design == "mushra":
        for p in prompts:
            want[clip_key(p, REFERENCE)] = {"role": "reference", "system": options.reference, "prompt": p}
            want[clip_key(p, ANCHOR)] = {"role": "anchor", "derive": "anchor", "prompt": p}
    return want


def _kept_extras(campaign: Campaign) -> dict[str, dict]:
    kept = {}
    for key, rec in campaign.extra_clips().items():
        path = campaign.clip_file(rec) if rec.get("clip_id") else None
        if rec.get("error") is None and path is not None and path.is_file() and file_sha256(path) == rec["sha256"]:
            kept[key] = rec
    return kept


def missing_extras(campaign: Campaign) -> list[str]:
    kept = _kept_extras(campaign)
    return [key for key in wanted_extras(campaign) if key not in kept]


def generate_extras(campaign: Campaign, batch_size: int = DEFAULT_BATCH, engine_options: dict | None = None,
                    systems: dict[str, Synthesizer] | None = None) -> dict[str, int]:
    """Make every missing extra clip: system ones first (references, espeak gold), then the ones
    derived from clips (anchors, degraded gold, traps, qualification). Returns counts."""
    kept = _kept_extras(campaign)
    todo = {k: v for k, v in wanted_extras(campaign).items() if k not in kept}
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
    by_system: dict[str, list[tuple[str, dict]]] = {}
    for key, spec in todo.items():
        if "system" in spec:
            by_system.setdefault(spec["system"], []).append((key, spec))
    records = []
    for spec_name, items in by_system.items():
        system = _system(spec_name, loaded, engine_options)
        for role, cond in {(s["role"], k.split("|", 1)[1]) for k, s in items}:
            prompts = [campaign.prompt(s["prompt"]) for k, s in items if k.split("|", 1)[1] == cond]
            target = ClipTarget(Condition(cond, spec_name, shared_settings(campaign)), None, role)
            for lo in range(0, len(prompts), batch_size):
                records += generate_batch(campaign, target, prompts[lo:lo + batch_size], system)
    for rec in records:
        rec["expected"] = GOLD_EXPECTED.get(rec["condition_id"])
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


def _derived(campaign: Campaign, key: str, spec: dict, loaded: dict) -> dict:
    """One clip made from another clip or from speech: anchor, degraded gold, trap, digits, a copied file."""
    prompt, cond = key.split("|", 1)
    rec = {"clip_id": secrets.token_hex(CLIP_ID_BYTES), "prompt_id": prompt, "condition": None, "condition_id": cond,
           "role": spec["role"], "system": spec["derive"], "seed": clip_seed(campaign.seed, key, 1), "source": None,
           "expected": GOLD_EXPECTED.get(cond), "sha256": None, "duration": None, "warning": None, "error": None}
    try:
        samples = _derive(campaign, key, spec, rec, loaded)
    except (AudioLoadError, SynthesisError, CampaignError, OSError, ValueError) as exc:
        return {**rec, "clip_id": None, "error": f"{spec['derive']}: {exc}"}
    write_wav(campaign.clip_file(rec), samples, SAMPLE_RATE)
    return checked_record(campaign, rec, f"{prompt} ({cond})")


def _derive(campaign: Campaign, key: str, spec: dict, rec: dict, loaded: dict):
    kind, prompt, seed = spec["derive"], spec["prompt"], rec["seed"]
    if kind == "file":
        return load_audio(campaign.options.speaker_ref, SAMPLE_RATE, max_seconds=LOCAL_MAX_SECONDS)
    if kind == "digits":
        rec["answer"] = spec["digits"]
        return stimuli.digits_in_noise(spec["digits"], spec["snr_db"], SAMPLE_RATE, seed, _speaker(loaded))
    source = _source_clip(campaign, prompt, REFERENCE if kind == "anchor" else None)
    rec["source"] = source["clip_id"]
    samples = load_audio(campaign.clip_file(source), SAMPLE_RATE, max_seconds=LOCAL_MAX_SECONDS)
    if kind == "anchor":
        return stimuli.mushra_anchor(samples, SAMPLE_RATE)
    if kind == "degraded":
        return stimuli.degraded_gold(samples, SAMPLE_RATE, seed)
    rec["expected"] = float(spec["answer"])
    labels = SIMILARITY_LABELS if campaign.design == "smos" else ACR_LABELS  # the words on the rater's scale
    return stimuli.trap_clip(samples, SAMPLE_RATE, spec["answer"], labels[spec["answer"]],
                             _speaker(loaded))


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


def plan_extras(campaign: Campaign) -> Extras:
    """The extra clips the trial plan deals, by clip key."""
    extras = campaign.extra_clips()
    gold = [k for k, r in sorted(extras.items()) if r["role"] == "gold"]
    traps = [(k, float(r["expected"])) for k, r in sorted(extras.items()) if r["role"] == "trap"]
    refs: dict[str, str] = {}
    if campaign.design == "smos":
        prompts = [p["id"] for p in campaign.prompts]
        if campaign.options.speaker_ref:
            refs = {p: clip_key(SPEAKER_PROMPT, REFERENCE) for p in prompts}
        else:  # the reference says other words: the next prompt's clip
            refs = {p: clip_key(prompts[(i + 1) % len(prompts)], REFERENCE) for i, p in enumerate(prompts)}
    return Extras(gold, traps, refs)


def ensure_plan(campaign: Campaign) -> bool:
    """Build and save the queues once every clip exists (False, nothing written, until then).
    An existing plan is never rebuilt: raters may already hold its entry ids."""
    if campaign.design == "ab":
        return ensure_assignment(campaign)
    if campaign.assignment() is not None:
        return True
    if missing_clips(campaign) or missing_extras(campaign):
        return False
    prompts, conditions = [p["id"] for p in campaign.prompts], [c.id for c in campaign.conditions]
    plan = build_trials(campaign.options, prompts, conditions, plan_extras(campaign), campaign.raters_per_item,
                        campaign.rater_slots, campaign.seed)
    problems = check_balance(plan, campaign.options, prompts, conditions)
    if problems:  # a bug, not a user error: never hand raters an unbalanced design
        raise AssertionError(f"unbalanced plan: {problems}")
    campaign.save_assignment(plan)
    return True


def prepare_campaign(campaign: Campaign, batch_size: int = DEFAULT_BATCH, engine_options: dict | None = None,
                     systems: dict[str, Synthesizer] | None = None) -> dict[str, dict[str, int]]:
    """Every clip (test and extra) not on disk yet, then the plan; counts per kind of clip."""
    tests = generate_clips(campaign, batch_size, engine_options, systems)
    extras = generate_extras(campaign, batch_size, engine_options, systems) if campaign.design != "ab" else {}
    ensure_plan(campaign)
    return {"test": tests, "extra": extras}
