"""A campaign on disk: its definition, clip manifest and plan, in the private data dir.

Library module (the command line is `python -m webapp.campaign`; `webapp.campaign.prepare.define_campaign`
fills in the design)::

    campaign = Campaign.define(layout, "pilot", "evaluation/prompts/indicemo_style.jsonl", conditions,
                               raters_per_item=3, rater_slots=6, repeat_fraction=0.1, seed=0,
                               design="mos", options={"gold_rate": 0.1, ...})
    campaign = Campaign.open(layout, "pilot")        # CampaignError if there is none
    campaign.clips()                                 # {(prompt id, condition index): manifest record}
    campaign.plan_data()                             # the saved plan as JSON (webapp.campaign.designs.plan_of
                                                     # reads it), or None until every clip exists

The design is kept by name only: this layer knows no design (`webapp.campaign.designs` does).

Layout (under `DataLayout.campaigns`, which is never served)::

    campaigns/raters.json                 rater logins (scrypt hashes only; webapp.campaign.data.raters)
    campaigns/<name>/campaign.json        definition: prompts (copied), conditions, k, slots, seed
    campaigns/<name>/manifest.jsonl       one line per clip: random clip id, prompt, condition, seed, sha256
    campaigns/<name>/clips/<32 hex>.wav   the clips, named by random ids (nothing about the system)
    campaigns/<name>/assignment.json      every rater slot's queue (webapp.campaign.trials.plan)
    campaigns/<name>/exports/...          results and exports made by the admin

Every JSON file is written atomically (a temp file in the same folder, fsync, rename).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from evaluation import indicemo, nova
from evaluation.prompt_file import PromptFileError, is_nova, load_prompts
from rumik_app.errors import RumikError
from rumik_app.files import atomic_write
from webapp.campaign.data.conditions import Condition, DesignError, check_name
from webapp.ratings import TagRequest, now_iso, tag_request
from webapp.storage import DataLayout

DEFINITION, MANIFEST, ASSIGNMENT = "campaign.json", "manifest.jsonl", "assignment.json"
RATERS_FILE = "raters.json"
# Fields of the definition that must match when `create` is run again on an existing campaign.
DESIGN_FIELDS = ("prompts_sha256", "conditions", "raters_per_item", "rater_slots", "repeat_fraction", "seed", "design",
                 "design_options")


class CampaignError(RumikError, ValueError):
    """A campaign that does not exist or cannot be used as asked; the message names the fix."""


def write_json_atomic(path: Path, data: object) -> Path:
    """JSON (UTF-8, indented), written atomically and durably (`rumik_app.files.atomic_write`)."""
    return atomic_write(path, json.dumps(data, ensure_ascii=False, indent=1))


def raters_path(layout: DataLayout) -> Path:
    return layout.campaigns / RATERS_FILE


@dataclass(frozen=True)
class PromptView:
    """What a rater is shown about a prompt (never the system): the words, no tags."""

    prompt_id: str
    text: str  # the words spoken, tags removed
    target_delivery: str | None  # IndicEmo delivery (Happy, Sad, ...) if the prompt has one
    intent: str  # the intended delivery in words, if the prompt file gives one
    request: TagRequest | None  # the NoVA request when the prompt holds one inline tag


def prompt_delivery(prompt: dict) -> str | None:
    """The IndicEmo target delivery of a prompt record (target_delivery, else tone), or None."""
    for key in ("target_delivery", "tone"):
        with contextlib.suppress(ValueError):
            if prompt.get(key):
                return indicemo.canonical_delivery(prompt[key])
    return None


def spoken_text(prompt: dict) -> str:
    """The text a system speaks: NoVA prompts are spoken from `text_with_mark` (as evaluation.run does)."""
    return prompt["text_with_mark"] if is_nova(prompt) else prompt["text"]


class Campaign:
    """One campaign folder. Build with `define` (new or resumed) or `open` (existing)."""

    def __init__(self, layout: DataLayout, name: str, definition: dict):
        self.layout, self.name, self.definition = layout, name, definition
        self.folder = layout.campaigns / name
        self.prompts: list[dict] = definition["prompts"]
        self.conditions = [Condition(**c) for c in definition["conditions"]]
        self._prompt_by_id = {p["id"]: p for p in self.prompts}

    # ------------------------------------------------------------------ create / open
    @classmethod
    def define(cls, layout: DataLayout, name: str, prompts_file: str | os.PathLike, conditions: list[Condition],
               raters_per_item: int, rater_slots: int, repeat_fraction: float, seed: int,
               limit: int | None = None, *, design: str, options: Mapping[str, object],
               unset: Mapping[str, object] | None = None) -> Campaign:
        """Write the definition of a new campaign, or reopen one defined with the same design.
        `design`: the design's name; `options`: its settings (`Design.settings`); `unset`: what a
        definition written before a field existed holds for it (campaigns made before designs had
        names hold the default design), so such a campaign resumes instead of being refused."""
        check_name(name)
        try:
            prompts = load_prompts(prompts_file, limit)
        except PromptFileError as exc:
            raise CampaignError(str(exc)) from None
        digest = hashlib.sha256(json.dumps(prompts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        definition = {"name": name, "created_at": now_iso(), "prompts_file": str(prompts_file),
                      "prompts_sha256": digest, "prompts": prompts, "conditions": [asdict(c) for c in conditions],
                      "raters_per_item": raters_per_item, "rater_slots": rater_slots,
                      "repeat_fraction": repeat_fraction, "seed": seed, "design": design,
                      "design_options": {"design": design, **options}}
        path = layout.campaigns / name / DEFINITION
        if path.is_file():
            old = json.loads(path.read_text(encoding="utf-8"))
            changed = [k for k in DESIGN_FIELDS if _filled(old, k, unset) != _filled(definition, k, unset)]
            if changed:
                raise CampaignError(f"Campaign {name!r} already exists with a different {', '.join(changed)}. "
                                    "Run create with the same arguments to resume it, or choose another --name.")
            return cls(layout, name, old)
        if rater_slots < raters_per_item:
            raise DesignError(f"--rater-slots {rater_slots} is fewer than --raters-per-item {raters_per_item}.")
        write_json_atomic(path, definition)
        return cls(layout, name, definition)

    @classmethod
    def open(cls, layout: DataLayout, name: str) -> Campaign:
        check_name(name)
        path = layout.campaigns / name / DEFINITION
        if not path.is_file():
            known = ", ".join(cls.names(layout)) or "none yet"
            raise CampaignError(f"No campaign {name!r} in {layout.root} (campaigns: {known}). "
                                "Create it with `python -m webapp.campaign create --name ...`.")
        return cls(layout, name, json.loads(path.read_text(encoding="utf-8")))

    @staticmethod
    def names(layout: DataLayout) -> list[str]:
        root = layout.campaigns
        return sorted(p.parent.name for p in root.glob(f"*/{DEFINITION}")) if root.is_dir() else []

    # ------------------------------------------------------------------ paths and design
    @property
    def clips_dir(self) -> Path:
        return self.folder / "clips"

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    @property
    def assignment_path(self) -> Path:
        return self.folder / ASSIGNMENT

    @property
    def exports_dir(self) -> Path:
        return self.folder / "exports"

    @property
    def raters_per_item(self) -> int:
        return int(self.definition["raters_per_item"])

    @property
    def rater_slots(self) -> int:
        return int(self.definition["rater_slots"])

    @property
    def design(self) -> str | None:
        """The design's name (`webapp.campaign.designs`); None for a campaign made before designs had
        names (`designs.design_of` reads it as the default design)."""
        return self.definition.get("design")

    @property
    def options(self) -> dict:
        """The design's settings as `create` saved them (without the design's name)."""
        return {k: v for k, v in (self.definition.get("design_options") or {}).items() if k != "design"}

    @property
    def seed(self) -> int:
        return int(self.definition["seed"])

    def prompt(self, prompt_id: str) -> dict:
        return self._prompt_by_id[prompt_id]

    def prompt_view(self, prompt_id: str) -> PromptView:
        p = self.prompt(prompt_id)
        spoken = spoken_text(p)
        req = tag_request(spoken)
        words = " ".join(nova.TAG_SPAN.sub(" ", spoken).split())
        return PromptView(prompt_id, words, prompt_delivery(p), str(p.get("intent") or ""), req)

    # ------------------------------------------------------------------ clips and assignment
    def clips(self) -> dict[tuple[str, int], dict]:
        """The newest manifest record of every test clip, per (prompt id, condition index)."""
        return {(r["prompt_id"], r["condition"]): r for r in self._records() if r.get("role", "test") == "test"}

    def extra_clips(self) -> dict[str, dict]:
        """The newest manifest record of every other clip (reference, anchor, gold, trap, qualification),
        per clip key "<prompt id>|<condition id>" (`webapp.campaign.trials.plan.clip_key`)."""
        return {f"{r['prompt_id']}|{r['condition_id']}": r for r in self._records() if r.get("role", "test") != "test"}

    def clip_by_key(self) -> dict[str, dict]:
        """Every clip's newest record by clip key, test clips under their condition's id."""
        tests = {f"{p}|{self.conditions[c].id}": r for (p, c), r in self.clips().items()}
        return {**tests, **self.extra_clips()}

    def clip_ids(self) -> dict[str, str]:
        """{clip key: clip id} of every clip that has one (exports name clips by their id's URL)."""
        return {key: r["clip_id"] for key, r in self.clip_by_key().items() if r.get("clip_id")}

    def _records(self) -> list[dict]:
        return read_manifest_lines(self.manifest_path) if self.manifest_path.is_file() else []

    def clip_file(self, record: dict) -> Path:
        """The private path of a manifest record's clip (its name is a random id)."""
        return self.clips_dir / f"{record['clip_id']}.wav"

    def plan_data(self) -> dict | None:
        """The saved plan (every rater slot's queue) as JSON; None until every clip exists."""
        if not self.assignment_path.is_file():
            return None
        return json.loads(self.assignment_path.read_text(encoding="utf-8"))

    def save_plan(self, data: dict) -> None:
        """Write the plan (a `TrialPlan.to_json()`) atomically; it is never rebuilt afterwards."""
        write_json_atomic(self.assignment_path, data)

    def __repr__(self) -> str:
        return f"Campaign({self.name!r}, {len(self.prompts)} prompts, {len(self.conditions)} conditions)"


def _filled(definition: Mapping, key: str, unset: Mapping | None) -> object:
    """A definition's value of `key`, with `unset`'s where the definition has none; for
    "design_options", each option it lacks (added to the designs later) at its `unset` value."""
    value = definition.get(key, (unset or {}).get(key))
    if key == "design_options" and isinstance(value, Mapping):
        return {**(unset or {}).get(key, {}), **value}
    return value


def read_manifest_lines(path: Path) -> list[dict]:
    """The records of an append-only JSONL file; a last line cut short by a crash (no newline,
    not JSON) is left out, so the run that wrote it can resume (`repair_tail` drops it)."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records = []
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if k == len(lines) - 1:  # the unfinished last line of a killed writer
                break
            raise CampaignError(f"{path} line {k + 1} is not JSON; restore the file from a backup.") from None
    return records


def repair_tail(path: Path) -> None:
    """Cut an unfinished last line (a crash mid-write) off an append-only JSONL file."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)
            fh.flush()
            os.fsync(fh.fileno())

