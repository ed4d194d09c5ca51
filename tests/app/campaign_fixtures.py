"""Helpers for the campaign tests: a small prompt file (two IndicEmo prompts and a NoVA one),
`folder:` systems of short synthetic clips (no synthesis needed), a ready campaign, and a page's
clips fetched as its players fetch them (a play counts only for a fetched clip).

Not a test module; imported by tests/app/test_campaign*.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np

from rumik_app.audio import SAMPLE_RATE, write_wav
from webapp.campaign.clips.generate import generate_clips
from webapp.campaign.data.conditions import build_conditions, parse_settings
from webapp.campaign.data.definition import Campaign
from webapp.campaign.prepare import define_campaign, ensure_plan
from webapp.storage import DataLayout

PROMPTS = [
    {"id": "p_happy", "text": "आज मेरा result आया, I am so happy!", "language": "hi", "tone": "happy",
     "target_delivery": "Happy", "intent": "A student sharing great news: bright and smiling."},
    {"id": "p_sad", "text": "I miss my grandmother every single day.", "language": "en", "tone": "sad",
     "target_delivery": "Sad", "intent": "Missing a grandmother: soft and slow."},
    {"id": "p_tag", "text": "That was so funny I cannot stop",
     "text_with_mark": "That was so funny <laugh> I cannot stop", "nvv": "laugh", "requested_index": 4,
     "n_words": 7, "language": "en"},
]
CLIP_SECONDS = 0.3


def write_prompts(path: Path, prompts: list[dict] = PROMPTS) -> Path:
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in prompts), encoding="utf-8")
    return path


def folder_system(root: Path, name: str, freq: float, prompts: list[dict] = PROMPTS, skip: tuple[str, ...] = ()) -> str:
    """A `folder:DIR` spec whose clips are short tones (`freq` Hz) named <prompt id>.wav."""
    folder = root / name
    t = np.arange(int(CLIP_SECONDS * SAMPLE_RATE)) / SAMPLE_RATE
    for p in prompts:
        if p["id"] not in skip:
            write_wav(folder / f"{p['id']}.wav", 0.3 * np.sin(2 * np.pi * freq * t).astype(np.float32))
    folder.mkdir(parents=True, exist_ok=True)
    return f"folder:{folder}"


def make_campaign(tmp: Path, name: str = "pilot", raters_per_item: int = 2, rater_slots: int = 2,
                  repeat_fraction: float = 0.0, n_systems: int = 2, seed: int = 0,
                  prompts: list[dict] = PROMPTS) -> tuple[DataLayout, Campaign]:
    """A generated A/B campaign of `folder:` systems on a fresh data dir under `tmp`."""
    layout = DataLayout(tmp / "data")
    specs = [folder_system(tmp / "systems", f"sys{k}", 220.0 * (k + 1), prompts) for k in range(n_systems)]
    conditions = build_conditions(specs, parse_settings([]))
    campaign = define_campaign(layout, name, write_prompts(tmp / "prompts.jsonl", prompts), conditions,
                               raters_per_item, rater_slots, repeat_fraction, seed)
    generate_clips(campaign)
    assert ensure_plan(campaign)
    return layout, campaign


def pair_answers(queues, entry_id: str, preference: str = "A", a: int = 4, b: int = 2,
                 heard: tuple = ("laugh", 4, "none", None)) -> dict:
    """An A/B page's answers (`webapp.campaign.designs.ab`): scores of clips A and B, the preference
    and, for a tagged prompt, what was heard in each clip and just before which word."""
    trial = queues.entries[entry_id]
    tagged = queues.campaign.prompt_view(trial.prompt_id).request is not None
    answers = {"score": [a, b], "preference": preference}
    if tagged:
        answers.update(heard=[heard[0], heard[2]], where=[heard[1], heard[3]])
    return answers


def fetch_clips(client, url: str, clips: list[str]) -> None:
    """GET each served clip of a page through Gradio's file route, with the client's session
    cookies, as the page's players do; the campaign server records each complete fetch."""
    for clip in clips:
        response = httpx.get(f"{url.rstrip('/')}/gradio_api/file={quote(clip)}", cookies=client.cookies, timeout=60)
        response.raise_for_status()
