"""GRPO configs (training.grpo.config) and the weighted prompt sampler (training.grpo.prompts)."""

import json
from collections import Counter

import pytest

from rumik_app.errors import ConfigError
from training.config import OptimConfig, load_config, save_config
from training.grpo.config import CONFIG_DIR, SMOKE_CONFIG, GRPOConfig, PromptSet, grpo_optim
from training.grpo.prompts import PromptSampler, rollout_request


def test_shipped_configs_load_and_validate():
    for path in (SMOKE_CONFIG, CONFIG_DIR / "grpo_example.toml"):
        cfg = load_config(GRPOConfig, path)
        cfg.validate(1)
        assert cfg.rollout.stop_mode == "sample"
        PromptSampler(cfg.prompt_sets, cfg.language_weights, cfg.seed, base_dir=path.parent)
    example = load_config(GRPOConfig, CONFIG_DIR / "grpo_example.toml")
    assert [r.kind for r in example.rewards] == ["content", "duration"] and example.loss.beta == 0.0


def test_content_segmentation_is_validated_and_saved(tmp_path):
    example = CONFIG_DIR / "grpo_example.toml"
    assert load_config(GRPOConfig, example).rewards[0].kwargs["segmentation"] == "grapheme"
    cfg = load_config(GRPOConfig, example, ["rewards.0.kwargs.segmentation=unicode"])
    cfg.validate(1)
    save_config(cfg, tmp_path / "train_config.json")
    saved = json.loads((tmp_path / "train_config.json").read_text())
    assert saved["rewards"][0]["kwargs"]["segmentation"] == "unicode"
    assert load_config(GRPOConfig, tmp_path / "train_config.json").rewards[0].kwargs["segmentation"] == "unicode"
    # A content stream that leaves it out is saved with the default, so the run says which GCER it used.
    bare = load_config(GRPOConfig, None, ['rewards=[{"name": "content", "kind": "content"}]',
                                          'prompt_sets=[{"items": [{"text": "a"}]}]'])
    assert bare.rewards[0].kwargs == {"segmentation": "grapheme"}
    bad = load_config(GRPOConfig, example, ["rewards.0.kwargs.segmentation=akshara"])
    with pytest.raises(ValueError, match="reward 'content': kwargs.segmentation: Unknown GCER segmentation 'akshara'; "
                                         "use 'grapheme' .* or 'unicode'"):
        bad.validate(1)


def test_sampler_weights_domains_and_languages():
    sets = [PromptSet(domain="news", weight=3.0, items=[{"text": "hello", "language": "en"},
                                                        {"text": "नमस्ते", "language": "Hindi"}]),
            PromptSet(domain="chat", weight=1.0, items=[{"text": "hey there"}])]
    sampler = PromptSampler(sets, {"hi": 3.0, "en": 1.0}, seed=0)
    counts = Counter()
    for step in range(400):
        for item, _ in sampler.sample(step, 10, 4):
            counts[(item["domain"], item["text"])] += 1
    total = sum(counts.values())
    # news 3/4 of draws, split 1:3 between en and hi; chat 1/4 (no language -> key "*", weight 1)
    assert counts[("news", "hello")] / total == pytest.approx(0.75 * 0.25, abs=0.02)
    assert counts[("news", "नमस्ते")] / total == pytest.approx(0.75 * 0.75, abs=0.02)
    assert counts[("chat", "hey there")] / total == pytest.approx(0.25, abs=0.02)
    assert sampler.sample(7, 5, 4) == sampler.sample(7, 5, 4)  # deterministic per step
    assert sampler.sample(7, 5, 4) != sampler.sample(8, 5, 4)
    only_hi = PromptSampler(sets[:1], {"en": 0.0}, seed=0)
    assert {item["language"] for item, _ in only_hi.sample(0, 50, 4)} == {"hi"}


def test_jsonl_prompt_sets_and_requests(tmp_path):
    path = tmp_path / "prompts.jsonl"
    rows = [{"text": "नमस्ते <laugh> दोस्त", "language": "hi", "tone": "happy", "speaker_id": 7},
            {"text": "Good morning.", "voice": "Aisha", "pace": "slow"}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    sampler = PromptSampler([PromptSet(domain="d", path="prompts.jsonl")], {}, seed=1, base_dir=tmp_path)
    assert [it["text"] for it in sampler.items] == [r["text"] for r in rows]
    cfg = GRPOConfig()
    req = rollout_request(sampler.items[0], 1234, cfg.rollout)
    assert (req.tone, req.language, req.seed, req.temperature, req.max_new_tokens) == (
        "happy", "hi", 1234, cfg.rollout.temperature, cfg.rollout.max_new_tokens)
    assert rollout_request(sampler.items[1], 1, cfg.rollout).voice == "Aisha"
    with pytest.raises(ValueError, match="text"):
        PromptSampler([PromptSet(items=[{"language": "en"}])], {}, seed=0)
    with pytest.raises(Exception, match="boom"):
        PromptSampler([PromptSet(items=[{"text": "bad <boom> tag"}])], {}, seed=0)
    with pytest.raises(ValueError, match="positive"):
        PromptSampler([PromptSet(items=[{"text": "a"}], weight=0.0)], {}, seed=0)


def test_one_optimiser_config_with_each_run_types_defaults(tmp_path):
    """Both trainers use training.config.OptimConfig; a partial [optim] keeps GRPO's other defaults."""
    from training.sft.config import SFTConfig

    smoke = load_config(GRPOConfig, SMOKE_CONFIG)  # its optim table names only lr and max_grad_norm
    assert type(smoke.optim) is OptimConfig and type(load_config(SFTConfig, None).optim) is OptimConfig
    expected = grpo_optim()
    expected.lr = 1e-3
    assert smoke.optim == expected and smoke.optim.betas == [0.9, 0.99] and smoke.optim.decay_fraction == 0.0
    assert load_config(SFTConfig, None, ["optim.lr=1e-3"]).optim.betas == [0.9, 0.95]  # SFT's own defaults
    assert GRPOConfig().optim.phases(20) == (0, 20, 0) and OptimConfig(warmup_steps=4).phases(10) == (4, 5, 1)
    with pytest.raises(ConfigError, match="grad_clip"):  # the old SFT name is gone: one name, max_grad_norm
        load_config(GRPOConfig, SMOKE_CONFIG, ["optim.grad_clip=1.0"])


def test_prompt_file_errors_name_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="missing.jsonl not found .* fix `path`"):
        PromptSampler([PromptSet(domain="d", path="missing.jsonl")], {}, seed=0, base_dir=tmp_path)
    (tmp_path / "bad.jsonl").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not JSONL"):
        PromptSampler([PromptSet(domain="d", path="bad.jsonl")], {}, seed=0, base_dir=tmp_path)
    with pytest.raises(ConfigError, match="language_weights: Unknown language .xx."):
        PromptSampler([PromptSet(items=[{"text": "a"}])], {"xx": 1.0}, seed=0)
