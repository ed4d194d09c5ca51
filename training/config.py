"""Run configs shared by both trainers: files, `--set` overrides, and the common settings.

    cfg = load_config(SFTConfig, "training/configs/pretrain_curriculum.toml", ["optim.lr=3e-4"])
    cfg.validate(num_processes=1)            # ConfigError naming the key and the fix
    save_config(cfg, out / "train_config.json")
    changes = config_changes(saved, config_dict(cfg))   # ["optim.lr: 0.0001 -> 0.0003"]

Configs are (nested) dataclasses read from JSON or TOML; `--set KEY=VALUE` overrides use
dotted paths (`optim.lr=3e-4`, `stages.0.steps=200`) and values parse as JSON, else as a
plain string. Unknown keys and wrongly typed values are errors that name the key. A table
in a file sets only the keys it names: the others keep the defaults of the run type (GRPO's
`[optim]` starts from GRPO's optimiser defaults, SFT's from SFT's).

`RunConfig` holds what every run has (model, output folder, seed, `OptimConfig`, checkpoint
cadence, threads, determinism); `training.sft.config.SFTConfig` and
`training.grpo.config.GRPOConfig` extend it, each with one `validate()` that raises the one
`ConfigError` (rumik_app.errors). Torch-free: configs load and validate without the model stack.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TypeVar

from rumik_app.errors import ConfigError
from rumik_app.files import atomic_write

T = TypeVar("T")

BASE_MODEL = "rumik-ai/rumik-oss-1-base"  # the pre-RL checkpoint both trainers start from by default
SAVE_DTYPES = ("bfloat16", "float32")  # published weights; training_state.pt keeps float32 masters
DISTRIBUTED = ("ddp", "fsdp2")  # how several processes share a run (training.fsdp); one process uses neither
RESUME_IGNORED_KEYS = ("out_dir",)  # where the run lives is not a setting of the run
MAX_LISTED_CHANGES = 5


# ----------------------------------------------------------------------------- shared settings


@dataclass
class OptimConfig:
    """AdamW with a warmup-stable-decay schedule, counted in optimiser steps (both trainers).

    Weight decay applies to matrices only (not norms, biases or the tied embedding).
    decay_steps 0 = decay_fraction of all steps. max_grad_norm 0 = no clipping (the norm is
    still logged). The class defaults are the published pre-training run's; GRPO's config
    starts from its own (`training.grpo.config.grpo_optim`).
    """

    lr: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    warmup_steps: int = 500
    decay_steps: int = 0
    decay_fraction: float = 0.1
    min_lr_ratio: float = 0.0

    def validate(self) -> None:
        if self.lr < 0 or self.eps <= 0 or self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ConfigError("optim: lr, weight_decay and max_grad_norm must be >= 0 and eps > 0.")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"optim.betas must be two numbers in [0, 1), got {self.betas}.")
        if min(self.warmup_steps, self.decay_steps) < 0:
            raise ConfigError("optim.warmup_steps and optim.decay_steps must be >= 0.")
        if not (0.0 <= self.decay_fraction <= 1.0 and 0.0 <= self.min_lr_ratio <= 1.0):
            raise ConfigError("optim.decay_fraction and optim.min_lr_ratio must be in [0, 1].")

    def phases(self, total_steps: int) -> tuple[int, int, int]:
        """(warmup, stable, decay) optimiser steps of a run of `total_steps` (they sum to it)."""
        decay = min(self.decay_steps or round(self.decay_fraction * total_steps), total_steps)
        warmup = min(self.warmup_steps, total_steps - decay)
        return warmup, total_steps - warmup - decay, decay


@dataclass
class RunConfig:
    """What every training run has; saved as train_config.json in OUT and in every checkpoint.

    model: folder, hub id or "tiny"; out_dir: OUT (`--out`); save_every/keep_last: checkpoint
    cadence and how many to keep; save_dtype: dtype of the published weights;
    activation_checkpointing: recompute activations in backward to save memory;
    torch_threads: CPU intra-op threads (None: torch's default); deterministic: torch's
    deterministic kernels (training.common.set_seed); distributed: with several processes,
    "ddp" (every process holds the whole model) or "fsdp2" (weights, gradients and AdamW state
    sharded per decoder layer, DCP-sharded checkpoints: training.fsdp); one process uses neither.
    """

    model: str = BASE_MODEL
    out_dir: str = "runs/run"
    seed: int = 0
    optim: OptimConfig = field(default_factory=OptimConfig)
    save_every: int = 1000
    keep_last: int = 3
    save_dtype: str = "bfloat16"
    activation_checkpointing: bool = False
    torch_threads: int | None = None
    deterministic: bool = False
    distributed: str = "ddp"

    def validate(self, num_processes: int = 1) -> None:
        """Raise ConfigError (naming the key) for settings that cannot run; subclasses extend it."""
        if num_processes < 1:
            raise ConfigError(f"num_processes must be >= 1, got {num_processes}.")
        if self.save_every < 1 or self.keep_last < 0:
            raise ConfigError("save_every must be >= 1 and keep_last >= 0 (0 keeps every checkpoint).")
        if self.save_dtype not in SAVE_DTYPES:
            raise ConfigError(f"save_dtype must be one of {SAVE_DTYPES}, got {self.save_dtype!r}.")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ConfigError("torch_threads must be >= 1 (or left out for torch's default).")
        if self.distributed not in DISTRIBUTED:
            raise ConfigError(f"distributed must be one of {DISTRIBUTED} (--set distributed=fsdp2), "
                              f"got {self.distributed!r}.")
        self.optim.validate()


# ----------------------------------------------------------------------------- files and overrides


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


def _deep_merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        merged[key] = (_deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict)
                       else value)
    return merged


def _over_default(f: dataclasses.Field, value: Any) -> Any:
    """A table given for a dataclass-valued field, laid over that field's default (so a
    partial `[optim]` keeps the run type's other optimiser defaults)."""
    if isinstance(value, dict) and f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
        if dataclasses.is_dataclass(default):
            return _deep_merge(dataclasses.asdict(default), value)
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
    kwargs = {name: _convert(_over_default(fields[name], value), hints[name], f"{prefix}.{name}" if prefix else name)
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


def save_config(cfg, path: str | os.PathLike) -> None:
    """Write a dataclass config as indented JSON, atomically (load_config reads it back)."""
    atomic_write(path, json.dumps(config_dict(cfg), indent=2, ensure_ascii=False) + "\n")


def config_dict(cfg) -> dict:
    """A config as the plain JSON value train_config.json holds (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def config_changes(saved: Any, current: Any, key: str = "") -> list[str]:
    """The settings that differ between two config values (dicts from train_config.json), as
    `dotted.key: old -> new` lines; tables and equally long lists are compared item by item.
    `RESUME_IGNORED_KEYS` at the top level are not settings of the run and are skipped."""
    if isinstance(saved, dict) and isinstance(current, dict):
        names = sorted(set(saved) | set(current))
        pairs = [(n, saved.get(n, "(absent)"), current.get(n, "(absent)")) for n in names
                 if key or n not in RESUME_IGNORED_KEYS]
    elif isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        pairs = [(str(i), a, b) for i, (a, b) in enumerate(zip(saved, current, strict=True))]
    else:
        if saved == current:
            return []
        return [f"{key}: {json.dumps(saved, ensure_ascii=False)} -> {json.dumps(current, ensure_ascii=False)}"]
    return [change for name, a, b in pairs for change in config_changes(a, b, f"{key}.{name}" if key else name)]


__all__ = [
    "ConfigError", "OptimConfig", "RunConfig", "load_config", "save_config", "config_dict", "config_changes",
    "BASE_MODEL", "SAVE_DTYPES", "DISTRIBUTED",
]
