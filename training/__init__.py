"""training: data preparation, SFT / pre-training, GRPO and DPO post-training and voice adaptation of
rumik-oss-1, one trainer design.

    python -m training.prepare --manifest clips.jsonl --model rumik-ai/rumik-oss-1-base --out data/english
    python -m training.sft  --config training/configs/pretrain_curriculum.toml [--set KEY=VALUE] [--resume]
    python -m training.grpo --config training/configs/grpo_example.toml --out runs/grpo1 [--resume]

In layers, lowest first (docs/ARCHITECTURE.md §1: a folder imports its own layer and the ones below):
    config.py    config files and `--set` overrides; RunConfig and OptimConfig, shared by every wing
    common.py    seeds, metrics log, schedule and optimiser, training checkpoints
    fsdp.py      FSDP2: sharding, gathered replicas, DCP checkpoints
    audio/       VAD and the cut of recordings into clips, a clip's levels (prepare and voice)
    prepare/     manifest of clips or recordings -> clean utterances -> Mimi codes in shards
    trainer.py   the Trainer base class (loop, save, resume policy) and the shared command line's run
    cli.py       the shared command line's flags (`python -m training.sft|grpo|dpo`), parsed without torch
    sft/         supervised fine-tuning (config, trainer, objective, sequences, data, smoke)
    grpo/        GRPO (config, trainer, rollout, loss, policy, rewards, prompts)
    dpo/         phased online DPO on GRPO's rollouts (config, trainer, loss, pairs, pool)
    voice/       your own voices: a LoRA voice package from a speaker's recordings
    configs/     example and smoke configs

Design: docs/ARCHITECTURE.md §6 (SFT), §7 (GRPO), §9 (training runs), §14 (DPO).
"""
