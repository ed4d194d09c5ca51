"""GRPO prompts: the weighted prompt sampler and the request of a drawn prompt.

    sampler = PromptSampler(cfg.prompt_sets, cfg.language_weights, cfg.seed, base_dir=config_dir)
    picks = sampler.sample(step, cfg.rollout.prompts_per_step, cfg.rollout.num_generations)
    requests = [rollout_request(item, seed, cfg.rollout) for item, seed in picks]

Prompt sets. Each `[[prompt_sets]]` entry is a domain: a JSONL file (`path`, one object per
line; relative to the config file's folder or the working directory) and/or inline `items`.
An item needs `text`; `language` (ISO code or name), `voice`, `tone`, `accent`, `pace`,
`description` go into the request; every other field is passed to the reward functions as a
column. Sampling (with replacement, seeded by (seed, step), so a resumed run draws the same
prompts): a domain is drawn with probability proportional to its `weight`, then an item of
that domain with probability proportional to `language_weights[item language]` (default 1;
items without a language use key "*"). Each pick carries a base seed in
[0, SEED_RANGE - GROUP_SEED_MARGIN); sample j of its group uses base seed + j.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rumik_app.errors import ConfigError, PromptError
from rumik_app.request import CONDITION_FIELDS, SEED_RANGE, SynthesisRequest
from rumik_app.text.languages import get_language
from training.grpo.config import PromptSet, SamplingConfig

ANY_LANGUAGE = "*"
GROUP_SEED_MARGIN = 2**16  # room above a group's base seed for its samples' seeds (base + j)
SEED_SPACE = SEED_RANGE - GROUP_SEED_MARGIN


def _read_items(prompt_set: PromptSet, base_dir: Path | None) -> list[dict[str, Any]]:
    items = [dict(item) for item in prompt_set.items]
    if prompt_set.path:
        path = Path(prompt_set.path)
        if not path.is_absolute() and base_dir is not None and not path.exists():
            path = base_dir / path
        if not path.is_file():
            raise ConfigError(f"prompt set {prompt_set.domain!r}: {prompt_set.path} not found (relative paths are "
                              f"read from the config file's folder or the working directory); fix `path`.")
        with open(path, encoding="utf-8") as fh:
            try:
                items += [json.loads(line) for line in fh if line.strip()]
            except json.JSONDecodeError as exc:
                raise ConfigError(f"prompt set {prompt_set.domain!r}: {path} is not JSONL ({exc})") from None
    for item in items:
        if not isinstance(item.get("text"), str) or not item["text"].strip():
            raise ConfigError(f"prompt set {prompt_set.domain!r}: every item needs a non-empty 'text' ({item})")
        if item.get("language"):
            item["language"] = get_language(item["language"]).code
        SynthesisRequest(item["text"], **{k: item[k] for k in CONDITION_FIELDS if item.get(k)}).prompt()
    if not items:
        raise ConfigError(f"prompt set {prompt_set.domain!r} has no items")
    return items


class PromptSampler:
    """Draw prompts by domain weight and language weight (module docstring); deterministic per step."""

    def __init__(self, prompt_sets: list[PromptSet], language_weights: dict[str, float], seed: int,
                 base_dir: Path | None = None):
        self.items: list[dict[str, Any]] = []
        probs: list[float] = []
        total_domain = sum(max(ps.weight, 0.0) for ps in prompt_sets)
        if total_domain <= 0:
            raise ConfigError("prompt_sets: the domain weights must sum to a positive number")
        try:
            lang_w = {(k if k == ANY_LANGUAGE else get_language(k).code): float(v)
                      for k, v in language_weights.items()}
        except PromptError as exc:
            raise ConfigError(f"language_weights: {exc}") from None
        for ps in prompt_sets:
            items = _read_items(ps, base_dir)
            weights = np.array([lang_w.get(it.get("language") or ANY_LANGUAGE, 1.0) for it in items], dtype=float)
            if ps.weight <= 0 or weights.sum() <= 0:
                continue
            for it, w in zip(items, weights, strict=True):
                self.items.append({**it, "domain": ps.domain})
                probs.append(ps.weight / total_domain * w / weights.sum())
        if not self.items:
            raise ConfigError("prompt_sets: no prompt has a positive weight")
        self.probs = np.asarray(probs) / np.sum(probs)
        self.seed = seed

    def sample(self, step: int, count: int, group_size: int) -> list[tuple[dict[str, Any], int]]:
        """`count` (item, base seed) pairs for `step`; the same on every process and every run."""
        rng = np.random.default_rng([self.seed, step])
        picks = rng.choice(len(self.items), size=count, p=self.probs)
        seeds = rng.integers(0, SEED_SPACE - group_size, size=count)
        return [(self.items[int(i)], int(s)) for i, s in zip(picks, seeds, strict=True)]


def rollout_request(item: dict[str, Any], seed: int, rollout: SamplingConfig) -> SynthesisRequest:
    """The SynthesisRequest for a prompt item and a seed under the rollout settings."""
    return SynthesisRequest(
        item["text"], seed=seed, language=item.get("language"),
        temperature=rollout.temperature, top_k=rollout.top_k, top_p=rollout.top_p,
        min_new_tokens=rollout.min_new_tokens, max_new_tokens=rollout.max_new_tokens,
        **{k: item[k] for k in CONDITION_FIELDS if item.get(k)},
    )
