"""training: SFT / pre-training and GRPO post-training of rumik-oss-1, one trainer design.

    python -m training.prepare --manifest clips.jsonl --model rumik-ai/rumik-oss-1-base --out data/english
    python -m training.sft  --config training/configs/pretrain_curriculum.toml [--set KEY=VALUE] [--resume]
    python -m training.grpo --config training/configs/grpo_example.toml --out runs/grpo1 [--resume]

    prepare.py   manifest of clips -> Mimi codes in shards (shared by both wings)
    config.py    config files and `--set` overrides; RunConfig and OptimConfig, shared by both wings
    common.py    seeds, metrics log, schedule and optimiser, training checkpoints
    trainer.py   the Trainer base class (loop, save, resume policy) and the shared command line's run
    cli.py       the shared command line's flags (`python -m training.sft|grpo|dpo`), parsed without torch
    sft/         config.py, trainer.py, objective.py, sequences.py, data.py, smoke.py
    grpo/        config.py, trainer.py, loss.py, policy.py, rewards.py, prompts.py
    configs/     example and smoke configs

Design: docs/ARCHITECTURE.md §6 (SFT), §7 (GRPO), §9 (training runs).
"""
