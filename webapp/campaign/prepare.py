"""A campaign from its definition to a plan, for every design: the definition written (or resumed),
every test and extra clip made (resumably), then the plan built once every clip exists.

Library module (the command line is `python -m webapp.campaign create`)::

    campaign = define_campaign(layout, "pilot", "prompts.jsonl", conditions, raters_per_item=3, rater_slots=6,
                               design="mos", options={"gold_rate": 0.1})
    counts = prepare_campaign(campaign, batch_size=8, engine_options={})   # {"test": {...}, "extra": {...}}
    ensure_plan(campaign)          # True once the plan exists (it is never rebuilt: raters hold its entry ids)
    missing(campaign)              # manifest records (or stand-ins) of every clip still missing
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from evaluation.systems import Synthesizer
from webapp.campaign.clips.extras import generate_extras, missing_extras
from webapp.campaign.clips.generate import DEFAULT_BATCH, generate_clips, missing_clips
from webapp.campaign.data.conditions import Condition, DesignError
from webapp.campaign.data.definition import Campaign
from webapp.campaign.designs import DEFAULT_DESIGN, check_options, design_of, get_design, option_values, registry
from webapp.storage import DataLayout

EXTRA = "extra"


def define_campaign(layout: DataLayout, name: str, prompts_file: str | os.PathLike, conditions: list[Condition],
                    raters_per_item: int, rater_slots: int, repeat_fraction: float = 0.0, seed: int = 0,
                    limit: int | None = None, design: str | None = None,
                    options: Mapping[str, object] | None = None) -> Campaign:
    """Write a new campaign's definition, or reopen one defined alike (CampaignError if it differs).
    `design`: its name (None: the default); `options`: the design flags given (the rest at their
    defaults); both checked by the design before anything is written."""
    record = get_design(design)
    values = option_values(dict(options or {}))
    check_options(record, values, [c.id for c in conditions])
    if repeat_fraction and not record.repeats:
        takers = " or ".join(d.title for d in registry().values() if d.repeats)
        raise DesignError(f"--repeat-fraction is for {takers} campaigns; {record.name} checks raters with gold, "
                          "trapping or hidden-reference trials instead.")
    unset = {"design": DEFAULT_DESIGN, "design_options": {"design": DEFAULT_DESIGN, **option_values()}}
    return Campaign.define(layout, name, prompts_file, conditions, raters_per_item, rater_slots, repeat_fraction, seed,
                           limit, design=record.name, options=values, unset=unset)


def ensure_plan(campaign: Campaign) -> bool:
    """Build and save the plan once every clip exists (False, nothing written, until then).
    An existing plan is never rebuilt: raters may already hold its entry ids. A plan that breaks
    its design's balance rules is a bug, never handed to raters (AssertionError)."""
    if campaign.plan_data() is not None:
        return True
    design = design_of(campaign)
    if missing_clips(campaign) or missing_extras(campaign, design.wanted_extras(campaign)):
        return False
    plan = design.build_plan(campaign)
    problems = design.check_balance(plan, campaign)
    if problems:
        raise AssertionError(f"unbalanced plan: {problems}")
    campaign.save_plan(plan.to_json())
    return True


def prepare_campaign(campaign: Campaign, batch_size: int = DEFAULT_BATCH, engine_options: dict | None = None,
                     systems: dict[str, Synthesizer] | None = None) -> dict[str, dict[str, int]]:
    """Every clip (test and extra) not on disk yet, then the plan; counts per kind of clip."""
    tests = generate_clips(campaign, batch_size, engine_options, systems)
    wanted = design_of(campaign).wanted_extras(campaign)
    extras = generate_extras(campaign, wanted, batch_size, engine_options, systems) if wanted else {}
    ensure_plan(campaign)
    return {"test": tests, EXTRA: extras}


def missing(campaign: Campaign) -> list[dict]:
    """Every clip still missing: test clips' records (or stand-ins), then extra clips by key."""
    extras = missing_extras(campaign, design_of(campaign).wanted_extras(campaign))
    return missing_clips(campaign) + [{"prompt_id": k, "condition_id": EXTRA, "error": "not made"} for k in extras]
