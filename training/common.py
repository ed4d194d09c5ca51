"""Shared training utilities for SFT (`training.sft`) and GRPO (`training.grpo`).

    cfg = load_config(SFTConfig, "training/configs/pretrain_curriculum.toml", ["optim.lr=3e-4"])
    save_config(cfg, out / "train_config.json")
    set_seed(cfg.seed, cfg.deterministic)   # first: seeds, and torch's deterministic kernels if asked
    logger = MetricsLogger(out, is_main=accelerator.is_main_process)
    sched = LambdaLR(optimizer, wsd_lambda(warmup, stable, decay, min_ratio=0.1))
    save_training_checkpoint(out, step, unwrapped_model, engine.config, engine.checkpoint_dir,
                             optimizer, sched, cfg, extra_state={"data": sampler.state_dict()})
    ckpt = latest_checkpoint(out)        # OUT/checkpoints/step_00000500 or None
    extra = load_training_state(ckpt, optimizer, sched, model=model)   # extra["step"] == 500
    publish_checkpoint(ckpt, out)        # OUT itself becomes a loadable published checkpoint

Configs are (nested) dataclasses read from JSON or TOML; `--set KEY=VALUE` overrides use
dotted paths (`optim.lr=3e-4`, `stages.0.steps=200`) and values parse as JSON, else as a
plain string. Unknown keys and wrongly typed values are errors that name the key.

A training checkpoint folder `OUT/checkpoints/step_XXXXXXXX/` is a complete published-format
checkpoint (DESIGN §2; `TTSEngine.from_pretrained(folder)` loads it) plus
`training_state.pt` (optimizer, scheduler, RNG states, full-precision weights, extra state
such as the data position) and `train_config.json`. Folders are written under a temporary
name and renamed; `OUT/checkpoints/latest` (a one-line pointer file) is replaced atomically
after the folder is complete, so a kill at any moment leaves the previous checkpoint usable.

Distributed (accelerate): call `accelerator.get_state_dict(model)` on every rank (FSDP and
DeepSpeed gather there), then `save_training_checkpoint(..., state_dict=...)` on the main
process only, with `accelerator.unwrap_model(model)`; every rank calls
`load_training_state` after `accelerator.prepare` (RNG states are the main process's).
The optimizer state saved is `optimizer.state_dict()` of the main process: complete for one
process and DDP; under FSDP/DeepSpeed it is only that rank's shard (not enough to resume).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import sys
import tempfile
import time
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import torch

T = TypeVar("T")

CHECKPOINTS_DIR = "checkpoints"
LATEST_POINTER = "latest"
STEP_PREFIX = "step_"
STEP_DIGITS = 8
TRAINING_STATE = "training_state.pt"
TRAIN_CONFIG = "train_config.json"
METRICS_FILE = "metrics.jsonl"
DEFAULT_KEEP_LAST = 3


class ConfigError(ValueError):
    """A training config file or override is invalid; the message names the key and the fix."""


# ----------------------------------------------------------------------------- configs


def _read_config_file(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"Config file {path} does not exist; pass an existing .json or .toml file.")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".toml":
            return tomllib.loads(text)
        if path.suffix.lower() == ".json":
            return json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Could not parse {path}: {exc}") from exc
    raise ConfigError(f"Config file {path} must end in .json or .toml.")


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """(inner type, allows None) for `X | None` / `Optional[X]`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        allows_none = len(args) != len(typing.get_args(tp))
        if len(args) == 1:
            return args[0], allows_none
    return tp, False


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check/convert a parsed JSON/TOML value to the annotated type `tp` (recursively)."""
    tp, allows_none = _strip_optional(tp)
    if value is None:
        if allows_none or tp is Any:
            return None
        raise ConfigError(f"Config key {key!r} may not be null.")
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"Config key {key!r} must be a table/object, got {type(value).__name__}.")
        return _build(tp, value, key)
    origin = typing.get_origin(tp)
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"Config key {key!r} must be a list, got {type(value).__name__}.")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_convert(v, inner, f"{key}.{i}") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or tp is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"Config key {key!r} must be a table/object, got {type(value).__name__}.")
        args = typing.get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, inner, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"Config key {key!r} must be true or false, got {value!r}.")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"Config key {key!r} must be a number, got {value!r}.")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"Config key {key!r} must be an integer, got {value!r}.")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"Config key {key!r} must be a string, got {value!r}.")
    return value


def _build(cls: type[T], data: dict, prefix: str = "") -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f" in [{prefix}]" if prefix else ""
        raise ConfigError(
            f"Unknown config key(s) {', '.join(repr(k) for k in unknown)}{where}. "
            f"Valid keys: {', '.join(sorted(fields))}."
        )
    kwargs = {name: _convert(value, hints[name], f"{prefix}.{name}" if prefix else name)
              for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field without a default is missing
        raise ConfigError(f"Config{' [' + prefix + ']' if prefix else ''}: {exc}") from exc


def _parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"Override {text!r} must look like KEY=VALUE, e.g. optim.lr=3e-4.")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"Override {text!r} has an empty key.")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare string: out_dir=runs/a
    return key.split("."), value


def _apply_override(data: dict, path: list[str], value: Any, full: str) -> None:
    node: Any = data
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"Override {full!r}: {part!r} is not an index of the list at "
                                  f"{'.'.join(path[:i]) or '(root)'} (length {len(node)}).")
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    last = path[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"Override {full!r}: {last!r} is not an index of the list (length {len(node)}).")
        node[int(last)] = value
    else:
        node[last] = value


def load_config(cls: type[T], path: str | os.PathLike | None, overrides: Sequence[str] = ()) -> T:
    """Read a JSON/TOML file (or only defaults when `path` is None) into dataclass `cls`.

    overrides: `KEY=VALUE` strings with dotted keys (list items by index); VALUE parses as
    JSON (`3e-4`, `true`, `[1, 2]`, `{"a": 1}`), else stays a string.
    Raises ConfigError on unknown keys, wrong types or malformed overrides.
    """
    data = _read_config_file(Path(path)) if path is not None else {}
    if overrides:
        # Start from the defaults so overrides can reach into lists that only exist there.
        base = dataclasses.asdict(_build(cls, data))
        for text in overrides:
            keys, value = _parse_override(text)
            _apply_override(base, keys, value, text)
        data = base
    return _build(cls, data)


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_config(cfg, path: str | os.PathLike) -> None:
    """Write a dataclass config as indented JSON, atomically (load_config reads it back)."""
    _atomic_write_text(Path(path), json.dumps(dataclasses.asdict(cfg), indent=2, ensure_ascii=False) + "\n")


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
    """Every RNG state this process uses (python, numpy, torch CPU, torch CUDA)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------- metrics


class MetricsLogger:
    """One line per step: printed to stdout and appended to OUT/metrics.jsonl (flushed).

    Only the main process writes (`is_main=False` makes every call a no-op), so the same
    code runs under `accelerate launch`.
    """

    def __init__(self, out_dir: str | os.PathLike, is_main: bool = True):
        self.is_main = is_main
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
        shown = " ".join(f"{k} {_fmt(v)}" for k, v in row.items() if k not in ("step", "time"))
        print(f"step {step:6d} | {shown}", file=sys.stdout, flush=True)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


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
                             dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write OUT/checkpoints/step_XXXXXXXX/ and point OUT/checkpoints/latest at it.

    model: the unwrapped RumikOSSForCausalLM (with peft, merge first or pass `state_dict`).
    rumik_config: `engine.config` (RumikOSSConfig); source_dir: `engine.checkpoint_dir`
    (tokenizer and codec are copied from it). train_config: the run's dataclass config.
    extra_state: anything else to restore (data position, ...); `step` is added to it.
    keep_last: checkpoints to keep (None: `train_config.keep_last` if present, else 3).
    state_dict: a gathered full state dict to save instead of `model.state_dict()`.
    save_master_weights: also store the full-precision weights in training_state.pt, so a
    resume is exact even though the published weights are `dtype` (bf16).
    Call on the main process only. Returns the checkpoint folder.
    """
    root = Path(out_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / _step_dir_name(step)
    from rumik_app.checkpoint import save_checkpoint

    state = state_dict if state_dict is not None else model.state_dict()
    tmp_name = f".{final.name}.partial"
    tmp = root / tmp_name
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_checkpoint(_StateView(state), rumik_config, Path(source_dir), tmp, dtype=dtype)
        payload = {
            "step": int(step),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_state(),
            "extra_state": {**(extra_state or {}), "step": int(step)},
        }
        if save_master_weights:
            payload["model"] = {k: v.detach().cpu() for k, v in state.items() if k != "lm_head.weight"}
        torch.save(payload, tmp / TRAINING_STATE)
        save_config(train_config, tmp / TRAIN_CONFIG)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _atomic_write_text(root / LATEST_POINTER, final.name + "\n")
    keep = keep_last if keep_last is not None else getattr(train_config, "keep_last", DEFAULT_KEEP_LAST)
    if keep and keep > 0:
        for _, old in _checkpoint_steps(root)[:-keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    return final


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


def load_training_state(ckpt_dir: str | os.PathLike, optimizer: torch.optim.Optimizer, scheduler,
                        *, model: torch.nn.Module | None = None) -> dict:
    """Restore optimizer, scheduler and RNG states from `ckpt_dir`; returns extra_state (with `step`).

    model: when given and the checkpoint holds full-precision weights, they are loaded into
    it (an exact resume; otherwise load the model from `ckpt_dir` with the engine, in bf16).
    """
    path = Path(ckpt_dir) / TRAINING_STATE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; {ckpt_dir} is not a training checkpoint "
                                f"(resume from OUT/checkpoints/step_XXXXXXXX or pass a fresh --out).")
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if model is not None and "model" in payload:
        missing, unexpected = model.load_state_dict(payload["model"], strict=False)
        missing = [k for k in missing if k != "lm_head.weight"]
        if missing or unexpected:
            raise RuntimeError(f"{path}: weights do not match the model (missing {missing[:5]}, "
                               f"unexpected {unexpected[:5]}).")
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
    for name in names:
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
    shutil.rmtree(out / "codec", ignore_errors=True)
    os.replace(codec_tmp, out / "codec")
    return out


__all__ = [
    "ConfigError", "load_config", "save_config", "set_seed", "rng_state", "set_rng_state", "MetricsLogger",
    "wsd_lambda", "save_training_checkpoint", "latest_checkpoint", "load_training_state", "publish_checkpoint",
]
