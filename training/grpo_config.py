"""GRPO run configuration (dataclasses) and the weighted prompt sampler.

Library module, no command line; `python -m training.grpo --config FILE` reads a JSON or
TOML file into `GRPOConfig` with `training.common.load_config` (`--set a.b=value`
overrides). Examples: training/configs/grpo_example.toml, training/configs/grpo_smoke.json.

Prompt sets. Each `[[prompt_sets]]` entry is a domain: a JSONL file (`path`, one object
per line) and/or inline `items`. An item needs `text`; `language` (ISO code or name),
`voice`, `tone`, `accent`, `pace`, `description` go into the request; every other field is
passed to the reward functions as a column. Sampling (with replacement, seeded by
(seed, step), so a resumed run draws the same prompts): a domain is drawn with probability
proportional to its `weight`, then an item of that domain with probability proportional to
`language_weights[item language]` (default 1; items without a language use key "*").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rumik_app.generation import STOP_MODES
from rumik_app.languages import get_language
from rumik_app.request import SynthesisRequest
from training.rewards import RewardSpec

REQUEST_FIELDS = ("voice", "tone", "accent", "pace", "description")
ANY_LANGUAGE = "*"
SEED_SPACE = 2**31 - 2**16  # request seeds; sample j of a group uses seed + j
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SMOKE_CONFIG = CONFIG_DIR / "grpo_smoke.json"


@dataclass
class PromptSet:
    """One domain of prompts: a JSONL file and/or inline items, drawn with weight `weight`."""

    domain: str = "default"
    path: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    weight: float = 1.0


@dataclass
class RolloutConfig:
    """How rollouts are sampled (through `TTSEngine.generate_batch`).

    stop_mode "sample" draws each stop-head decision from Bernoulli(sigmoid(logit)), so the
    decisions are actions of the policy with a usable log-prob gradient; "threshold" (the
    inference rule) makes them deterministic, and the duration stream would then push on
    decisions the policy never sampled. prompts_per_step counts prompts over all processes.
    """

    num_generations: int = 8
    prompts_per_step: int = 8
    temperature: float = 0.8
    top_k: int = 30
    top_p: float = 1.0
    min_new_tokens: int = 8
    max_new_tokens: int = 1024
    stop_mode: str = "sample"
    restrict_phase: bool = True


@dataclass
class LossConfig:
    """The clipped GRPO objective (DESIGN §7).

    epsilon / epsilon_high: clip range [1 - epsilon, 1 + epsilon_high] (None: = epsilon).
    beta: weight of the k3 KL to the frozen reference (0: not in the loss, still logged when
    kl_monitor). With full weights the reference is a frozen copy of the starting model (one
    more model in memory); beta = 0 with kl_monitor = false skips it. With LoRA it is the
    adapter-disabled model (no copy). routing: "routed" (W) or "flat" (every action gets the sum of the stream
    advantages). num_iterations: optimiser steps per rollout batch (1: rho = 1 in value).
    scale_rewards: divide by the group std. adv_eps: the eps in (r - mean) / (std + eps).
    """

    epsilon: float = 0.2
    epsilon_high: float | None = None
    beta: float = 0.0
    kl_monitor: bool = True
    routing: str = "routed"
    num_iterations: int = 1
    scale_rewards: bool = True
    adv_eps: float = 1e-4


@dataclass
class OptimConfig:
    """AdamW with a warmup-stable-decay schedule counted in optimiser steps."""

    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    max_grad_norm: float = 1.0
    warmup_steps: int = 0
    decay_steps: int = 0
    min_lr_ratio: float = 0.0


@dataclass
class LoraSettings:
    """LoRA (peft) instead of full weights; the reference is then the adapter-disabled model."""

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    train_stop_head: bool = True  # the stop head is fully trained (peft modules_to_save)


def default_rewards() -> list[RewardSpec]:
    return [RewardSpec(name="content", kind="content"), RewardSpec(name="duration", kind="duration")]


@dataclass
class GRPOConfig:
    """A GRPO run. model: folder, hub id or "tiny"; device/dtype: None = auto (CUDA bf16,
    else CPU float32); steps: rollout batches; micro_batch_size: rows per forward/backward."""

    model: str = "rumik-ai/rumik-oss-1-base"
    device: str | None = None
    dtype: str | None = None
    out_dir: str = "runs/grpo"
    seed: int = 0
    steps: int = 500
    prompt_sets: list[PromptSet] = field(default_factory=list)
    language_weights: dict[str, float] = field(default_factory=dict)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rewards: list[RewardSpec] = field(default_factory=default_rewards)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    micro_batch_size: int = 8
    gradient_checkpointing: bool = False
    save_every: int = 100
    keep_last: int = 3
    torch_threads: int | None = None  # CPU intra-op threads (None: torch's default); smoke uses 1
    deterministic: bool = False  # torch's deterministic kernels (CUDA; training.common.set_seed)

    def validate(self, num_processes: int = 1) -> None:
        """Raise ValueError naming the key when the config cannot run."""
        r = self.rollout
        if r.num_generations < 2:
            raise ValueError("rollout.num_generations must be >= 2 (advantages compare samples of a group)")
        if r.prompts_per_step < 1 or r.prompts_per_step % num_processes:
            raise ValueError(f"rollout.prompts_per_step ({r.prompts_per_step}) must be a positive multiple of "
                             f"the number of processes ({num_processes})")
        if r.temperature <= 0:
            raise ValueError("rollout.temperature must be > 0: greedy rollouts have no policy gradient")
        if r.stop_mode not in STOP_MODES:
            raise ValueError(f"rollout.stop_mode must be one of {STOP_MODES}")
        if self.loss.routing not in ("routed", "flat"):
            raise ValueError("loss.routing must be 'routed' or 'flat'")
        if self.loss.num_iterations < 1 or self.micro_batch_size < 1:
            raise ValueError("loss.num_iterations and micro_batch_size must be >= 1")
        if not self.rewards:
            raise ValueError("rewards: at least one reward stream is needed")
        if len({spec.name for spec in self.rewards}) != len(self.rewards):
            raise ValueError("rewards: stream names must be unique")
        for spec in self.rewards:
            spec.check()
        if not self.prompt_sets:
            raise ValueError("prompt_sets: at least one prompt set is needed")


def _read_items(prompt_set: PromptSet, base_dir: Path | None) -> list[dict[str, Any]]:
    items = [dict(item) for item in prompt_set.items]
    if prompt_set.path:
        path = Path(prompt_set.path)
        if not path.is_absolute() and base_dir is not None and not path.exists():
            path = base_dir / path
        with open(path, encoding="utf-8") as fh:
            items += [json.loads(line) for line in fh if line.strip()]
    for item in items:
        if not isinstance(item.get("text"), str) or not item["text"].strip():
            raise ValueError(f"prompt set {prompt_set.domain!r}: every item needs a non-empty 'text' ({item})")
        if item.get("language"):
            item["language"] = get_language(item["language"]).code
        SynthesisRequest(item["text"], **{k: item[k] for k in REQUEST_FIELDS if item.get(k)}).prompt()
    if not items:
        raise ValueError(f"prompt set {prompt_set.domain!r} has no items")
    return items


class PromptSampler:
    """Draw prompts by domain weight and language weight (module docstring); deterministic per step."""

    def __init__(self, prompt_sets: list[PromptSet], language_weights: dict[str, float], seed: int,
                 base_dir: Path | None = None):
        self.items: list[dict[str, Any]] = []
        probs: list[float] = []
        total_domain = sum(max(ps.weight, 0.0) for ps in prompt_sets)
        if total_domain <= 0:
            raise ValueError("prompt_sets: the domain weights must sum to a positive number")
        lang_w = {(k if k == ANY_LANGUAGE else get_language(k).code): float(v) for k, v in language_weights.items()}
        for ps in prompt_sets:
            items = _read_items(ps, base_dir)
            weights = np.array([lang_w.get(it.get("language") or ANY_LANGUAGE, 1.0) for it in items], dtype=float)
            if ps.weight <= 0 or weights.sum() <= 0:
                continue
            for it, w in zip(items, weights):
                self.items.append({**it, "domain": ps.domain})
                probs.append(ps.weight / total_domain * w / weights.sum())
        if not self.items:
            raise ValueError("prompt_sets: no prompt has a positive weight")
        self.probs = np.asarray(probs) / np.sum(probs)
        self.seed = seed

    def sample(self, step: int, count: int, group_size: int) -> list[tuple[dict[str, Any], int]]:
        """`count` (item, base seed) pairs for `step`; the same on every process and every run."""
        rng = np.random.default_rng([self.seed, step])
        picks = rng.choice(len(self.items), size=count, p=self.probs)
        seeds = rng.integers(0, SEED_SPACE - group_size, size=count)
        return [(self.items[int(i)], int(s)) for i, s in zip(picks, seeds)]


def build_request(item: dict[str, Any], seed: int, rollout: RolloutConfig) -> SynthesisRequest:
    """The SynthesisRequest for a prompt item and a seed under the rollout settings."""
    return SynthesisRequest(
        item["text"], seed=seed, language=item.get("language"),
        temperature=rollout.temperature, top_k=rollout.top_k, top_p=rollout.top_p,
        min_new_tokens=rollout.min_new_tokens, max_new_tokens=rollout.max_new_tokens,
        **{k: item[k] for k in REQUEST_FIELDS if item.get(k)},
    )
