"""Phased GRPO rollouts with DPO updates (online iterative DPO), in TRL's shape: `config` + `trainer`.

    python -m training.dpo --config training/configs/dpo_phased.toml --out runs/dpo1 [--resume]
    python -m training.dpo --smoke --out runs/dpo-smoke

    config.py      DPOConfig (phases, pairs, loss; rollout, rewards, lora from training.grpo.config)
    trainer.py     DPOTrainer (training.grpo.rollout.RolloutTrainer)
    __main__.py    the command line (flags: training.cli), which imports the trainer once they parse
    loss.py        pair routing rows, routed sequence log-probs, TRL's sigmoid/IPO/hinge losses (pure tensors)
    pairs.py       chosen/rejected pairs from scored groups: margins, ties, flat groups, caps (pure tensors)
    pool.py        a phase's pairs, rows and reference log-probs on every process; its checkpoint state

Rollouts, rewards, routing columns and log-probs are GRPO's (training.grpo.rollout, .rewards,
.loss, .policy). Import the modules themselves (`from training.dpo.trainer import
DPOTrainer`); this package file imports nothing.
"""
