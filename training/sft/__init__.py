"""SFT / continued pre-training, in TRL's shape: `config` + `trainer`, and their parts.

    python -m training.sft --config training/configs/pretrain_curriculum.toml [--set KEY=VALUE] [--resume]
    python -m training.sft --smoke --out /tmp/rumik-smoke

    config.py      SFTConfig (stages, batch, loss, eval; the shared keys from training.config)
    trainer.py     SFTTrainer (training.trainer.Trainer)
    __main__.py    the command line (flags: training.cli), which imports the trainer once they parse
    objective.py   SFTObjective: acoustic cross-entropy + stop-head BCE, as one module
    sequences.py   prompt + frames + `</audio>` -> inputs, targets, masks, stop targets
    data.py        prepared data folders and the deterministic curriculum sampler
    smoke.py       the smoke run's data and config (espeak-ng speech, tiny model)

Import the modules themselves (`from training.sft.trainer import SFTTrainer`); this package
file imports nothing, so `training.sft.config` loads without torch.
"""
