"""DPO configs (training.dpo.config): the shipped files load, bad settings name their key."""

import pytest

from rumik_app.errors import ConfigError
from training.config import load_config
from training.dpo.config import CONFIG_DIR, SMOKE_CONFIG, DPOConfig
from training.grpo.prompts import PromptSampler


def test_shipped_configs_load_and_validate():
    for path in (SMOKE_CONFIG, CONFIG_DIR / "dpo_phased.toml"):
        cfg = load_config(DPOConfig, path)
        cfg.validate(1)
        assert cfg.rollout.stop_mode == "sample" and cfg.rollout.backend == "engine"
        PromptSampler(cfg.prompt_sets, cfg.language_weights, cfg.seed, base_dir=path.parent)
    real = load_config(DPOConfig, CONFIG_DIR / "dpo_phased.toml")
    assert [r.kind for r in real.rewards] == ["content", "duration"] and real.loss.routing == "routed"
    assert real.total_steps == real.phases * real.dpo_steps_per_phase
    assert load_config(DPOConfig, SMOKE_CONFIG).pairs_cap == 4 and real.pairs_cap == 1  # best_worst: one per group


@pytest.mark.parametrize("override, message", [
    ("rollout.vllm_gpu_memory_utilization=0", r"rollout.vllm_gpu_memory_utilization must be in \(0, 1\]"),
    ("rollout.vllm_kv_cache_memory_bytes=0", "rollout.vllm_kv_cache_memory_bytes must be a number of bytes"),
    ("rollout.backend=sglang", "rollout.backend must be one of"),
    ("loss.loss_type=kto", "loss.loss_type must be one of"),
    ("loss.routing=diagonal", "loss.routing must be one of"),
    ("loss.beta=0", "loss.beta must be > 0"),
    ("pairs.strategy=random", "pairs.strategy must be one of"),
    ("pairs.min_margin=-1", "pairs.min_margin"),
    ("prompts_per_phase=3", "prompts_per_phase .* multiple of the number of processes"),
    ("dpo_steps_per_phase=0", "dpo_steps_per_phase"),
    ("rollout.num_generations=1", "rollout.num_generations"),
    ("rollout.temperature=0", "rollout.temperature"),
])
def test_bad_settings_name_their_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(DPOConfig, SMOKE_CONFIG, [override]).validate(2)
