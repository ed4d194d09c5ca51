"""A voice adaptation's training state in WORK/train_state.pt, so a killed run resumes exactly.

    save_train_state(trainer, step)       # every train.checkpoint_every steps (atomic: a kill leaves the last one)
    step = restore_train_state(trainer)   # 0 when there is none; else the adapter, AdamW, the schedule and
                                          # the metrics so far are back as they were after `step`

What makes the resume exact: the adapter's matrices, AdamW's moments, the scheduler's position and
the steps' metrics are saved; each step's batch is a pure function of (seed, step)
(VoiceTrainer.batch_at), the clips' codes and the replay samples are remade identically from the
seed, and nothing else in a step draws a random number. The file holds tensors and plain values
only and is read with `torch.load(weights_only=True)`: a work folder never runs code. A state
written under other settings is refused with the fix.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import torch

from rumik_app.errors import CheckpointError
from rumik_app.files import atomic_write
from training.config import config_dict

STATE_FILE = "train_state.pt"


def _settings(trainer) -> str:
    """The settings a state belongs to (everything but how often it is saved)."""
    settings = config_dict(trainer.cfg)
    settings["train"].pop("checkpoint_every", None)
    return json.dumps(settings, sort_keys=True)


def save_train_state(trainer, step: int) -> Path:
    """WORK/train_state.pt after `step` optimiser steps, written atomically."""
    trained = {name: p.detach().cpu().clone() for name, p in trainer.peft.named_parameters() if p.requires_grad}
    payload = {"step": int(step), "adapter": trained, "optimizer": trainer.optimizer.state_dict(),
               "scheduler": trainer.scheduler.state_dict(), "history": list(trainer.history),
               "settings": _settings(trainer)}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return atomic_write(trainer.work / STATE_FILE, buffer.getvalue())


def restore_train_state(trainer) -> int:
    """Load WORK/train_state.pt into the trainer (adapter attached); the steps it had run, or 0 without one."""
    path = trainer.work / STATE_FILE
    if not path.exists():
        return 0
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"{path} is not a training state this project wrote ({str(exc).splitlines()[0][:120]}); "
                              "delete it to train from the start.") from None
    if payload.get("settings") != _settings(trainer):
        raise CheckpointError(f"{path} was written under other settings; resume with the same settings, or delete "
                              f"{trainer.work} (or give another --work) to start afresh.")
    parameters = dict(trainer.peft.named_parameters())
    with torch.no_grad():
        for name, tensor in payload["adapter"].items():
            parameters[name].copy_(tensor.to(parameters[name].device))
    trainer.optimizer.load_state_dict(payload["optimizer"])
    trainer.scheduler.load_state_dict(payload["scheduler"])
    trainer.history = list(payload["history"])
    return int(payload["step"])
