"""Shared training machinery of SFT (`training.sft`) and GRPO (`training.grpo`).

    set_seed(cfg.seed, cfg.deterministic)   # first: seeds, and torch's deterministic kernels if asked
    optimizer, scheduler = build_optimizer(model, cfg.optim, total_steps)      # AdamW + WSD
    logger = MetricsLogger(out, is_main=accelerator.is_main_process)
    save_training_checkpoint(out, step, unwrapped_model, engine.config, engine.checkpoint_dir,
                             optimizer, scheduler, cfg, extra_state={"data": sampler.state_dict()})
    ckpt = latest_checkpoint(out)        # OUT/checkpoints/step_00000500 or None
    extra = load_training_state(ckpt, optimizer, scheduler, model=model)   # extra["step"] == 500
    publish_checkpoint(ckpt, out)        # OUT itself becomes a loadable published checkpoint
    path = run_on_main_process(lambda: prepare(out))   # one writer under a launcher; the others wait for it

Configs live in `training.config`, the run loop and the resume policy in `training.trainer`.

A training checkpoint folder `OUT/checkpoints/step_XXXXXXXX/` is a complete published-format
checkpoint (docs/ARCHITECTURE.md §2; `TTSEngine.from_pretrained(folder)` loads it) plus
`training_state.pt` (optimizer, scheduler, RNG states, full-precision weights, extra state
such as the data position) and `train_config.json`. Folders are written under a temporary
name, fsync'ed and renamed (`rumik_app.files`); `OUT/checkpoints/latest` (a one-line pointer
file) is replaced atomically after the folder is complete, so a kill at any moment leaves the
previous checkpoint usable.

Distributed (accelerate): call `accelerator.get_state_dict(model)` on every rank (FSDP and
DeepSpeed gather there), then `save_training_checkpoint(..., state_dict=...)` on the main
process only, with `accelerator.unwrap_model(model)`; every rank calls
`load_training_state` after `accelerator.prepare` (RNG states are the main process's).
The optimizer state saved is `optimizer.state_dict()` of the main process: complete for one
process and DDP. Under `distributed = "fsdp2"` (training.fsdp, driven by training.trainer) the
weights and the optimizer state are DCP shards instead, in the folder's `dcp/` (passed as
`extra_dirs`), and training_state.pt holds the scheduler, the main process's RNG states and the
extra state (`optimizer=None`, no full-precision weights). accelerate's FSDP/DeepSpeed
optimizer shards are not saved.

Processes (docs/training.md, "Launchers"): `launched_processes()` reads the launcher's world size
before any process group exists; several processes without CUDA run as CPU ones (`cpu_processes`,
so plain `torchrun` works without ACCELERATE_USE_CPU), and `check_world` refuses a run whose
Accelerator sees another count, as each process would otherwise be a main one writing OUT;
`one_process_only` refuses a launch of a single-process command (voice create, prepare).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from rumik_app import errors
from rumik_app.errors import CheckpointError, RumikError
from rumik_app.files import atomic_write, replace_dir
from training.config import OptimConfig, save_config

CHECKPOINTS_DIR = "checkpoints"
LATEST_POINTER = "latest"
STEP_PREFIX = "step_"
STEP_DIGITS = 8
TRAINING_STATE = "training_state.pt"
TRAIN_CONFIG = "train_config.json"
METRICS_FILE = "metrics.jsonl"
DEFAULT_KEEP_LAST = 3


# ----------------------------------------------------------------------------- seeds, rng


CUBLAS_WORKSPACE = ":4096:8"  # cuBLAS is repeatable only with a fixed workspace (torch checks)


def set_seed(seed: int, deterministic: bool = False) -> None:
    """Seed python's `random`, numpy and torch (CPU, every CUDA device) and set torch's
    deterministic mode to `deterministic`; call it first in a run, before any CUDA matmul.

    True: `torch.use_deterministic_algorithms(True)` (an op with no deterministic kernel then
    raises, naming it), deterministic cuDNN without autotuning, CUBLAS_WORKSPACE_CONFIG unless
    set. It matters on CUDA; the CPU kernels the trainers use repeat for a fixed thread count.
    False restores torch's default (off).
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = deterministic
    torch.use_deterministic_algorithms(deterministic)


def rng_state() -> dict:
    """Every RNG state this process uses (python, numpy, torch CPU, torch CUDA), in the plain
    types (tensors, ints, floats, tuples) that `torch.load(weights_only=True)` accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss))}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------- processes

# Where launchers put the number of processes they started: torchrun and accelerate launch
# (WORLD_SIZE), and the MPI launchers accelerate also reads.
LAUNCHER_WORLD_SIZE = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_processes() -> int:
    """How many processes the launcher started (1 without a launcher); readable before any
    process group exists."""
    for name in LAUNCHER_WORLD_SIZE:
        if os.environ.get(name):
            return int(os.environ[name])
    return 1


def cpu_processes() -> bool:
    """Whether this run is several processes without a CUDA device: accelerate must then be
    told `cpu=True`, or (without ACCELERATE_USE_CPU) it makes every rank a lone main process
    and they all write the same checkpoints."""
    return launched_processes() > 1 and not torch.cuda.is_available()


def process_state():
    """accelerate's `PartialState` (the process group, started once per process and shared with
    every later `Accelerator`), on CPU processes when `cpu_processes()`."""
    from accelerate import PartialState

    return PartialState(cpu=cpu_processes())


def check_world(num_processes: int) -> None:
    """ConfigError when accelerate runs another number of processes than the launcher started:
    each would be a main process of its own, all writing OUT's files."""
    launched = launched_processes()
    if launched != num_processes:
        raise errors.ConfigError(f"the launcher started {launched} processes but accelerate sees {num_processes}: "
                          "launch with torchrun or accelerate launch on one kind of device (CUDA, or CPU "
                          "with ACCELERATE_USE_CPU=true), or run one process.")


def one_process_only(command: str) -> None:
    """ConfigError when a single-process command is launched as several processes: each copy would
    write the same output folder."""
    if launched_processes() > 1:
        raise errors.ConfigError(f"{command} runs on one process: run it without torchrun or accelerate launch "
                          f"(the launcher started {launched_processes()}).")


class MainProcessFailed(RumikError, RuntimeError):
    """What `run_on_main_process` raises on the other processes when the main one failed."""


def run_on_main_process(function: Callable[[], Any]) -> Any:
    """`function()` on the main process only, its result handed to every process: one writer for
    whatever it writes, and the others wait (the broadcast is their barrier) until it is written.
    A failure on the main process is re-raised there, and is MainProcessFailed elsewhere."""
    state = process_state()
    if state.num_processes == 1:
        return function()
    from accelerate.utils import broadcast_object_list

    outcome: list = [None]
    failure: BaseException | None = None
    if state.is_main_process:
        try:
            outcome = [("done", function())]
        except BaseException as exc:  # noqa: BLE001  (the others must hear of it, then it propagates)
            outcome, failure = [("failed", f"{type(exc).__name__}: {exc}")], exc
    broadcast_object_list(outcome, from_process=0)
    if failure is not None:
        raise failure
    kind, value = outcome[0]
    if kind == "failed":
        raise MainProcessFailed(f"the main process stopped before this one could start ({value}); "
                                "fix what it reported and launch again.")
    return value


# ----------------------------------------------------------------------------- metrics


class MetricsLogger:
    """One line per step appended to OUT/metrics.jsonl (flushed), every metric in it; with
    `echo` also printed whole to stdout (the trainers print their own compact line instead:
    training.trainer.Trainer.progress_line).

    Only the main process writes (`is_main=False` makes every call a no-op), so the same
    code runs under `accelerate launch`.
    """

    def __init__(self, out_dir: str | os.PathLike, is_main: bool = True, echo: bool = True):
        self.is_main, self.echo = is_main, echo
        self.path = Path(out_dir) / METRICS_FILE
        self._fh = None
        if is_main:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")

    def log(self, step: int, metrics: dict) -> None:
        """Record `metrics` (numbers or short strings) for `step`."""
        if not self.is_main or self._fh is None:
            return
        row = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}, "time": round(time.time(), 3)}
        self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._fh.flush()
        if self.echo:
            shown = " ".join(f"{k} {_fmt(v)}" for k, v in row.items() if k not in ("step", "time"))
            print(f"step {step:6d} | {shown}", file=sys.stdout, flush=True)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_metrics(out_dir: str | os.PathLike) -> list[dict]:
    """OUT/metrics.jsonl as rows (resume events included: rows with an "event" key)."""
    path = Path(out_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    return value


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


# ----------------------------------------------------------------------------- schedule


def wsd_lambda(warmup_steps: int, stable_steps: int, decay_steps: int,
               min_ratio: float = 0.0) -> Callable[[int], float]:
    """Warmup-stable-decay multiplier for `torch.optim.lr_scheduler.LambdaLR`.

    step < warmup: (step + 1) / warmup (linear, never exactly 0);
    then 1.0 for `stable_steps`; then linear from 1.0 down to `min_ratio` over `decay_steps`
    (the last decay step reaches min_ratio); `min_ratio` afterwards.
    """
    if min(warmup_steps, stable_steps, decay_steps) < 0 or not 0.0 <= min_ratio <= 1.0:
        raise ValueError("wsd_lambda: step counts must be >= 0 and 0 <= min_ratio <= 1")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        step -= warmup_steps
        if step < stable_steps:
            return 1.0
        step -= stable_steps
        if step < decay_steps:
            progress = (step + 1) / decay_steps
            return 1.0 - (1.0 - min_ratio) * progress
        return min_ratio

    return factor


def optimizer_groups(params: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float) -> list[dict]:
    """Weight decay on matrices only (not on norms, biases or the tied embedding); trainable only."""
    decay, no_decay = [], []
    for name, param in params:
        if not param.requires_grad:
            continue
        (decay if param.ndim >= 2 and "embed_tokens" not in name else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: torch.nn.Module, optim: OptimConfig,
                    total_steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over `model`'s trainable parameters and its warmup-stable-decay schedule over
    `total_steps` optimiser steps (`OptimConfig.phases`). Step the scheduler once per
    optimiser step yourself: it is not for `accelerator.prepare` (which would step it once
    per process)."""
    optimizer = torch.optim.AdamW(optimizer_groups(model.named_parameters(), optim.weight_decay), lr=optim.lr,
                                  betas=tuple(optim.betas), eps=optim.eps)
    warmup, stable, decay = optim.phases(total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, wsd_lambda(warmup, stable, decay, optim.min_lr_ratio))
    return optimizer, scheduler


def enable_activation_checkpointing(model) -> None:
    """Recompute each layer's activations in backward (both trainers). Non-reentrant: works
    under DDP and with frozen inputs (LoRA)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def clip_gradients(accelerator, params, max_grad_norm: float) -> float:
    """Clip the gradients of `params` to `max_grad_norm` (0: no clipping) and return their
    total norm before clipping (over all processes)."""
    limit = max_grad_norm if max_grad_norm > 0 else float("inf")  # inf: measure only (scale 1.0)
    return float(accelerator.clip_grad_norm_(params, limit))


# ----------------------------------------------------------------------------- checkpoints


class _StateView:
    """Give `save_checkpoint` a gathered state dict (FSDP/DeepSpeed) in place of a module."""

    def __init__(self, state: dict):
        self._state = state

    def state_dict(self) -> dict:
        return self._state


def _step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:0{STEP_DIGITS}d}"


def _checkpoint_steps(ckpt_root: Path) -> list[tuple[int, Path]]:
    found = []
    if ckpt_root.is_dir():
        for child in ckpt_root.iterdir():
            name = child.name
            if child.is_dir() and name.startswith(STEP_PREFIX) and name[len(STEP_PREFIX):].isdigit():
                if (child / TRAINING_STATE).exists():
                    found.append((int(name[len(STEP_PREFIX):]), child))
    return sorted(found)


def save_training_checkpoint(out_dir: str | os.PathLike, step: int, model: torch.nn.Module, rumik_config,
                             source_dir: str | os.PathLike, optimizer: torch.optim.Optimizer, scheduler,
                             train_config, extra_state: dict | None = None, *, keep_last: int | None = None,
                             state_dict: dict | None = None, save_master_weights: bool = True,
                             dtype: torch.dtype = torch.bfloat16, extra_dirs: dict[str, Path] | None = None) -> Path:
    """Write OUT/checkpoints/step_XXXXXXXX/ and point OUT/checkpoints/latest at it.

    model: the unwrapped RumikOSSForCausalLM (with peft, merge first or pass `state_dict`).
    rumik_config: `engine.config` (RumikOSSConfig); source_dir: `engine.checkpoint_dir`
    (tokenizer and codec are copied from it). train_config: the run's dataclass config.
    extra_state: anything else to restore (data position, ...); `step` is added to it.
    keep_last: checkpoints to keep (None: `train_config.keep_last` if present, else 3).
    state_dict: a gathered full state dict to save instead of `model.state_dict()`.
    save_master_weights: also store the full-precision weights in training_state.pt, so a
    resume is exact even though the published weights are `dtype` (bf16).
    optimizer: None when its state is saved elsewhere (FSDP2: in `extra_dirs`' DCP folder).
    extra_dirs: {name: folder} moved into the checkpoint before it is committed (FSDP2's DCP shards).
    Call on the main process only. Returns the checkpoint folder.
    """
    root = Path(out_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / _step_dir_name(step)
    from rumik_app.checkpoint.load import save_checkpoint

    state = state_dict if state_dict is not None else model.state_dict()
    tmp_name = f".{final.name}.partial"
    tmp = root / tmp_name
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_checkpoint(_StateView(state), rumik_config, Path(source_dir), tmp, dtype=dtype)
        payload = {
            "step": int(step),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_state(),
            "extra_state": {**(extra_state or {}), "step": int(step)},
        }
        if save_master_weights:
            payload["model"] = {k: v.detach().cpu() for k, v in state.items() if k != "lm_head.weight"}
        torch.save(payload, tmp / TRAINING_STATE)
        save_config(train_config, tmp / TRAIN_CONFIG)
        for name, folder in (extra_dirs or {}).items():
            os.replace(folder, tmp / name)
        replace_dir(tmp, final)  # fsyncs the files, then renames
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    atomic_write(root / LATEST_POINTER, final.name + "\n")
    keep = keep_last if keep_last is not None else getattr(train_config, "keep_last", DEFAULT_KEEP_LAST)
    if keep and keep > 0:
        for _, old in _checkpoint_steps(root)[:-keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """The complete checkpoints under OUT/checkpoints, oldest first."""
    return [path for _, path in _checkpoint_steps(Path(out_dir) / CHECKPOINTS_DIR)]


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under OUT/checkpoints (pointer first, then a scan), or None."""
    root = Path(out_dir) / CHECKPOINTS_DIR
    pointer = root / LATEST_POINTER
    if pointer.exists():
        target = root / pointer.read_text(encoding="utf-8").strip()
        if (target / TRAINING_STATE).exists():
            return target
    found = _checkpoint_steps(root)
    return found[-1][1] if found else None


def load_training_state(ckpt_dir: str | os.PathLike, optimizer: torch.optim.Optimizer | None, scheduler,
                        *, model: torch.nn.Module | None = None) -> dict:
    """Restore optimizer, scheduler and RNG states from `ckpt_dir`; returns extra_state (with `step`).

    model: when given and the checkpoint holds full-precision weights, they are loaded into
    it (an exact resume; otherwise load the model from `ckpt_dir` with the engine, in bf16).
    """
    path = Path(ckpt_dir) / TRAINING_STATE
    if not path.exists():
        raise CheckpointError(f"{path} is missing; {ckpt_dir} is not a training checkpoint "
                              f"(resume from OUT/checkpoints/step_XXXXXXXX or pass a fresh --out).")
    try:  # weights only: a checkpoint folder can never run code (a pickle could)
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"{path} holds objects other than tensors and plain values, so it was not loaded "
                              "(a training state is never unpickled). Resume from a checkpoint this project "
                              f"wrote, or start fresh in a new --out. ({str(exc).splitlines()[0]})") from None
    if model is not None and "model" in payload:
        missing, unexpected = model.load_state_dict(payload["model"], strict=False)
        missing = [k for k in missing if k != "lm_head.weight"]
        if missing or unexpected:
            raise CheckpointError(f"{path}: weights do not match the model (missing {missing[:5]}, "
                                  f"unexpected {unexpected[:5]}); resume with the model the run started from.")
    if optimizer is not None and payload.get("optimizer") is not None:  # None: FSDP2 (DCP folder)
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None and payload.get("scheduler") is not None:
        scheduler.load_state_dict(payload["scheduler"])
    set_rng_state(payload["rng"])
    extra = dict(payload.get("extra_state") or {})
    extra.setdefault("step", int(payload["step"]))
    return extra


PUBLISHED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "model.safetensors.index.json")


def publish_checkpoint(ckpt_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Make OUT itself a published-format checkpoint (`TTSEngine.from_pretrained(OUT)` loads it).

    Hard-links (or copies, across file systems) the published files of a training checkpoint
    folder into OUT, each replaced atomically, next to OUT's checkpoints/ and metrics.jsonl.
    Weight shards left from an earlier publish that the new one lacks are removed.
    """
    src, out = Path(ckpt_dir), Path(out_dir)
    names = [n for n in PUBLISHED_FILES if (src / n).exists()]
    names += sorted(p.name for p in src.glob("model*.safetensors"))
    for stale in out.glob("model*.safetensors*"):
        if stale.name not in names:
            stale.unlink()
    if not (src / "model.safetensors.index.json").exists():
        (out / "model.safetensors.index.json").unlink(missing_ok=True)
    for name in names:  # each file: a hard link (or copy) under a temp name, renamed over the old one
        tmp = out / f".{name}.publish"
        tmp.unlink(missing_ok=True)
        try:
            os.link(src / name, tmp)
        except OSError:
            shutil.copy2(src / name, tmp)
        os.replace(tmp, out / name)
    codec_tmp = out / ".codec.publish"
    shutil.rmtree(codec_tmp, ignore_errors=True)
    shutil.copytree(src / "codec", codec_tmp)
    replace_dir(codec_tmp, out / "codec")  # fsyncs OUT too, so the renames above are on disk
    return out


__all__ = [
    "set_seed", "rng_state", "set_rng_state", "MetricsLogger", "read_metrics", "wsd_lambda", "build_optimizer",
    "clip_gradients", "enable_activation_checkpointing",
    "save_training_checkpoint", "list_checkpoints", "latest_checkpoint", "load_training_state", "publish_checkpoint",
]
