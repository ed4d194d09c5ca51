"""GRPO post-training with per-codebook reward routing, in TRL's shape: `config` + `trainer`.

    python -m training.grpo --config training/configs/grpo_example.toml --out runs/grpo1 [--resume]
    python -m training.grpo --smoke --out runs/grpo-smoke

    config.py      GRPOConfig (rollout, rewards, loss, lora; PolicyRunConfig, SamplingConfig shared with DPO)
    trainer.py     GRPOTrainer
    __main__.py    the command line (flags: training.cli), which imports the trainer once they parse
    rollout.py     RolloutTrainer (training.trainer.Trainer): policy, rollout source, rewards (shared with DPO)
    loss.py        group advantages, reward routing W, k3 KL, the clipped objective (pure tensors)
    policy.py      teacher-forced log-probs of rollout actions; LoRA
    rewards.py     reward streams (content, duration, codebook0_low, user functions)
    prompts.py     the weighted prompt sampler and the request of a drawn prompt

Import the modules themselves (`from training.grpo.trainer import GRPOTrainer`); this
package file imports nothing.
"""
