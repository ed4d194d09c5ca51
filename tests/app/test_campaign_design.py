"""A campaign's design without a server: settings and conditions, the balanced A/B assignment, the
campaign folder, and resumable clip generation (with `folder:` systems, so no synthesis).

Run: .venv/bin/python -m pytest tests/app/test_campaign_design.py -q
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter, defaultdict

import pytest

from evaluation.audio_io import file_sha256
from evaluation.systems import RumikSystem
from rumik_app.request import DEFAULT_MAX_NEW_TOKENS, wire_settings
from tests.app.campaign_fixtures import PROMPTS, folder_system, make_campaign, write_prompts
from webapp.campaign.clips.generate import clip_request, generate_clips, missing_clips
from webapp.campaign.data.conditions import Condition, DesignError, build_conditions, parse_settings, setting_kinds
from webapp.campaign.data.definition import Campaign, CampaignError
from webapp.campaign.designs import plan_of
from webapp.campaign.prepare import define_campaign, ensure_plan
from webapp.campaign.trials.pairs import build_assignment
from webapp.storage import DataLayout


# ---------------------------------------------------------------- settings and conditions
def test_settings_are_typed_and_checked():
    assert parse_settings(["temperature=0.6,0.9", "voice=ira", "max-seconds=4"]) == {
        "temperature": [0.6, 0.9], "voice": ["Ira"], "max_seconds": [4.0]}
    for bad, message in ((["speed=2"], "unknown key"), (["temperature=hot"], "expected a float"),
                         (["tone=sleepy"], "choose one of"), (["voice"], "KEY=VALUE"),
                         (["top_k=5", "top_k=6"], "twice"), (["pace=slow,slow"], "listed twice"),
                         (["temperature=5"], "Temperature 5 is out of range"), (["max_seconds=0"], "out of range")):
        with pytest.raises(DesignError, match=message):
            parse_settings(bad)


def test_every_sampling_setting_the_request_declares_is_a_setting_key():
    # rumik_app.request.wire_settings() is their one home: a setting added there reaches campaigns unedited
    names = [spec.name for spec in wire_settings()]
    assert set(names) <= set(setting_kinds()) and "repetition_penalty" in names
    assert parse_settings(["repetition_penalty=1.2,1.0", "top_k=20"]) == {"repetition_penalty": [1.2, 1.0],
                                                                          "top_k": [20]}
    with pytest.raises(DesignError, match="Repetition penalty 3 is out of range"):
        parse_settings(["repetition_penalty=3"])


def test_conditions_cross_systems_with_multi_valued_settings():
    conds = build_conditions(["espeak", "tiny"], parse_settings(["temperature=0.6,0.9", "voice=Aisha"]))
    assert [c.id for c in conds] == ["espeak [temperature=0.6]", "espeak [temperature=0.9]",
                                     "tiny [temperature=0.6]", "tiny [temperature=0.9]"]
    assert conds[3].settings == {"voice": "Aisha", "temperature": 0.9} and conds[3].system == "tiny"
    assert [c.id for c in build_conditions(["espeak", "tiny"], {})] == ["espeak", "tiny"]
    with pytest.raises(DesignError, match="at least two conditions"):
        build_conditions(["espeak"], parse_settings(["voice=Ira"]))
    with pytest.raises(DesignError, match="twice"):
        build_conditions(["espeak", "espeak"], {})


# ---------------------------------------------------------------- assignment
def orientation_counts(entries):
    """{(i, j): [#lower index on A, #higher index on A]} over first hearings."""
    counts = defaultdict(lambda: [0, 0])
    for e in entries:
        if e.repeat_of is None:
            counts[e.pair][0 if e.left < e.right else 1] += 1
    return counts


@pytest.mark.parametrize(("prompts", "conditions", "k", "slots", "repeat"), [
    (20, 2, 3, 3, 0.0),  # everyone rates everything
    (25, 2, 3, 7, 0.1),  # uneven loads, repeats
    (12, 3, 2, 5, 0.2),  # three conditions: three pairs per prompt
    (9, 4, 3, 4, 0.0),
])
def test_assignment_is_balanced(prompts, conditions, k, slots, repeat):
    ids = [f"p{n:02d}" for n in range(prompts)]
    plan = build_assignment(ids, conditions, k, slots, repeat, seed=7)
    pairs = list(itertools.combinations(range(conditions), 2))
    first = [e for q in plan.slots for e in q if e.repeat_of is None]
    # Every pair of every prompt is rated by exactly k different slots.
    by_item = defaultdict(list)
    for e in first:
        by_item[e.item_id].append(e.slot)
    assert set(by_item) == {f"{p}/{i}-{j}" for p in ids for i, j in pairs}
    assert all(len(s) == k == len(set(s)) for s in by_item.values())
    # A prompt's pairs go to its k slots together (one rater hears all of a prompt's pairs).
    slots_of = defaultdict(set)
    for e in first:
        slots_of[e.prompt_id].add(e.slot)
    assert all(len(s) == k for s in slots_of.values())
    # Loads differ by at most one prompt block.
    loads = [sum(e.repeat_of is None for e in q) for q in plan.slots]
    assert max(loads) - min(loads) <= len(pairs)
    # A/B: per pair of conditions, balanced within one in every slot and overall.
    for queue in plan.slots:
        assert all(abs(a - b) <= 1 for a, b in orientation_counts(queue).values())
    overall = orientation_counts(first)
    assert set(overall) == set(pairs) and all(abs(a - b) <= 1 for a, b in overall.values())
    on_a = Counter(e.left for e in first)
    on_b = Counter(e.right for e in first)
    assert all(abs(on_a[c] - on_b[c]) <= conditions - 1 for c in range(conditions))
    # Repeats: the share asked for, from the first half, later in the same queue, A and B swapped.
    for queue in plan.slots:
        n_first = sum(e.repeat_of is None for e in queue)
        repeats = [e for e in queue if e.repeat_of is not None]
        assert len(repeats) == min(int(repeat * n_first + 0.5), n_first // 2)
        where = {e.entry_id: e for e in queue}
        for r in repeats:
            orig = where[r.repeat_of]
            assert orig.position < n_first // 2 and r.position >= orig.position + 2
            assert (r.item_id, r.left, r.right) == (orig.item_id, orig.right, orig.left)
        assert [e.position for e in queue] == list(range(len(queue)))
    # Entry ids: unique random tokens.
    every = [e.entry_id for q in plan.slots for e in q]
    assert len(set(every)) == len(every) and all(re.fullmatch(r"[0-9a-f]{24}", x) for x in every)


def test_assignment_is_reproducible_from_its_seed_and_randomised_by_it():
    ids = [f"p{n}" for n in range(12)]

    def shape(seed):
        plan = build_assignment(ids, 2, 2, 4, 0.25, seed)
        return [[(e.item_id, e.left, e.right, e.repeat_of is not None) for e in q] for q in plan.slots]

    assert shape(3) == shape(3) and shape(3) != shape(4)
    plan = build_assignment(ids, 2, 2, 4, 0.25, 3)
    assert type(plan).from_json(json.loads(json.dumps(plan.to_json()))).slots == plan.slots


def test_assignment_refuses_impossible_designs():
    with pytest.raises(DesignError, match="fewer than --raters-per-item"):
        build_assignment(["p"], 2, 3, 2)
    with pytest.raises(DesignError, match="repeat-fraction"):
        build_assignment(["p"], 2, 1, 1, 0.9)
    with pytest.raises(DesignError, match="no prompts"):
        build_assignment([], 2, 1, 1)


# ---------------------------------------------------------------- campaign folder and clips
def test_generation_is_resumable_and_records_seeds_and_hashes(tmp_path):
    layout = DataLayout(tmp_path / "data")
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    a = folder_system(tmp_path / "systems", "a", 220.0)
    b = folder_system(tmp_path / "systems", "b", 330.0, skip=("p_sad",))  # one clip missing at first
    conditions = build_conditions([a, b], {})
    campaign = define_campaign(layout, "pilot", prompts, conditions, 2, 3, 0.0, seed=5)
    assert generate_clips(campaign) == {"kept": 0, "generated": 5, "failed": 1}
    missing = missing_clips(campaign)
    assert [(m["prompt_id"], m["condition_id"]) for m in missing] == [("p_sad", b)]
    assert "No clip for 'p_sad'" in missing[0]["error"]
    assert not ensure_plan(campaign) and plan_of(campaign) is None  # a fixed design needs every clip

    folder_system(tmp_path / "systems", "b", 330.0)  # the missing clip arrives
    first = sorted(campaign.clip_file(r).name for r in campaign.clips().values() if r["error"] is None)
    again = define_campaign(layout, "pilot", prompts, conditions, 2, 3, 0.0, seed=5)  # resumes
    assert generate_clips(again) == {"kept": 5, "generated": 1, "failed": 0}
    assert ensure_plan(again) and plan_of(again) is not None
    clips = again.clips()
    assert len(clips) == 6 and all(r["error"] is None for r in clips.values())
    assert set(first) < {again.clip_file(r).name for r in clips.values()}  # kept clips were not remade
    for (_pid, cond), rec in clips.items():
        path = again.clip_file(rec)
        assert re.fullmatch(r"[0-9a-f]{32}\.wav", path.name)  # nothing about the system in the name
        assert file_sha256(path) == rec["sha256"] and rec["condition_id"] == conditions[cond].id
    # One seed per prompt, the same for every condition (common random numbers).
    assert clips[("p_happy", 0)]["seed"] == clips[("p_happy", 1)]["seed"] != clips[("p_sad", 0)]["seed"]

    # A damaged clip (hash mismatch) is remade; a finished campaign keeps its assignment.
    victim = again.clip_file(clips[("p_tag", 0)])
    victim.write_bytes(victim.read_bytes()[:-10] + b"\0" * 10)
    plan = plan_of(again)
    assert generate_clips(again) == {"kept": 5, "generated": 1, "failed": 0}
    assert ensure_plan(again) and plan_of(again).slots == plan.slots


def test_a_changed_design_is_refused_not_mixed(tmp_path):
    layout, campaign = make_campaign(tmp_path)
    with pytest.raises(CampaignError, match="already exists with a different raters_per_item"):
        define_campaign(layout, "pilot", tmp_path / "prompts.jsonl", campaign.conditions, 1, 2, 0.0, 0)
    with pytest.raises(CampaignError, match="No campaign 'other'.*campaigns: pilot"):
        Campaign.open(layout, "other")
    with pytest.raises(DesignError, match="campaign name"):
        Campaign.open(layout, "../escape")
    assert Campaign.names(layout) == ["pilot"]


def test_view_shows_words_and_delivery_never_the_tag_or_system(tmp_path):
    _, campaign = make_campaign(tmp_path)
    tagged = campaign.prompt_view("p_tag")
    assert tagged.text == "That was so funny I cannot stop" and "<" not in tagged.text
    assert tagged.request.nvv == "laugh" and tagged.request.index == 4 and tagged.target_delivery is None
    happy = campaign.prompt_view("p_happy")
    assert (happy.target_delivery, happy.request) == ("Happy", None) and "smiling" in happy.intent


def test_clip_request_puts_the_condition_on_top_of_the_prompt(tiny_checkpoint):
    prompt = {**PROMPTS[0], "voice": "Siya"}
    system = RumikSystem(str(tiny_checkpoint), device="cpu")
    req = clip_request(prompt, Condition("x", "tiny", {"temperature": 0.5, "max_seconds": 1.0}), 9, system)
    assert (req.voice, req.tone, req.temperature, req.seed, req.language) == ("Siya", "happy", 0.5, 9, "hi")
    assert req.max_new_tokens == system.engine.max_new_tokens_for(1.0) < DEFAULT_MAX_NEW_TOKENS
    described = clip_request(prompt, Condition("y", "tiny", {"description": "a calm narrator"}), 9, system)
    assert described.description == "a calm narrator" and described.tone is None
    assert described.prompt()  # a valid prompt: never both a tone and a description
