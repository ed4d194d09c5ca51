"""Find, load and save rumik-oss-1 checkpoints in the published format (docs/ARCHITECTURE.md §2).

A model argument is one of:
  - a local folder (`/models/rumik-oss-1`, or a training output),
  - a Hugging Face hub id (`rumik-ai/rumik-oss-1`, `rumik-ai/rumik-oss-1-base`), fetched
    through the HF cache (only config, tokenizer, safetensors and codec files: python files
    in the repo are never downloaded, and `trust_remote_code` is never passed),
  - `tiny`: a random-weight checkpoint in the same format, built once in a cache folder.

Every failure is a `CheckpointError` with one message naming the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from rumik_app.errors import CheckpointError
from rumik_app.files import fsync_tree, replace_dir
from rumik_app.model.config import RumikOSSConfig
from rumik_app.request import DEFAULT_MODEL, TINY_MODEL

REQUIRED_FILES = ("config.json", "tokenizer.json", "codec/config.json", "codec/model.safetensors")
WEIGHT_FILE = "model.safetensors"
WEIGHT_INDEX = "model.safetensors.index.json"
HUB_PATTERNS = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "model*.safetensors", "model.safetensors.index.json", "codec/*.json", "codec/*.safetensors"]
COPY_ALONG = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
MAX_SHARD_SIZE = "5GB"
FIXES = (
    "Fixes: pass a local checkpoint folder ({flag}/path/to/rumik-oss-1); or go online once so it "
    "downloads into the Hugging Face cache (`hf download {repo}`); or try the pipeline "
    "with random weights ({tiny})."
)
# The flag in rumik_app.synthesize, .serve, .tiny, app.py, training.prepare
CLI_FLAGS = {"flag": "--model ", "tiny": "--model tiny"}


class ModelUnavailable(CheckpointError):
    """The model is not on this machine (no such folder, an incomplete one, or a hub id that
    cannot be fetched). `problem` says what is wrong; the message adds the fixes in the
    command-line flags of rumik_app, app.py and the trainers; `with_flags` rewords them for
    a caller that names the model differently (evaluation.run's --system)."""

    def __init__(self, problem: str, repo: str = DEFAULT_MODEL):
        self.problem, self.repo = problem, repo
        super().__init__(self.with_flags(**CLI_FLAGS))

    def with_flags(self, flag: str, tiny: str) -> str:
        """The message with the fixes naming `flag PATH` and `tiny` (e.g. "--system tiny")."""
        return f"{self.problem} " + FIXES.format(flag=flag, tiny=tiny, repo=self.repo)


def cache_root() -> Path:
    """Folder for derived artefacts (tiny checkpoints, ASR caches): $RUMIK_CACHE or ~/.cache/rumik."""
    return Path(os.environ.get("RUMIK_CACHE", Path.home() / ".cache" / "rumik"))


def tiny_checkpoint_path() -> Path:
    """Build (once) and return the cached tiny checkpoint used by `--model tiny`."""
    from rumik_app.checkpoint import tiny

    path = cache_root() / "tiny-v1"
    if not (path / "codec" / "model.safetensors").exists():
        cache_root().mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=cache_root()))
        tiny.build_tiny_checkpoint(tmp)
        fsync_tree(tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another process won the race; theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~")) and "\\" not in name


def resolve_checkpoint(model: str | os.PathLike) -> Path:
    """Turn a model argument into a local folder holding every required file."""
    name = str(model)
    if name == TINY_MODEL:
        return tiny_checkpoint_path()
    path = Path(name).expanduser()
    if path.exists():
        return check_checkpoint_dir(path)
    if looks_like_hub_id(name):
        return check_checkpoint_dir(_download(name))
    raise ModelUnavailable(f"No checkpoint folder at {path}.")


def _download(repo_id: str) -> Path:
    """The hub snapshot of `repo_id` (config, tokenizer, weights, codec only), through the HF
    cache; offline or with the hub out of reach it fails at once (`rumik_app.checkpoint.hub`)."""
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    from rumik_app.checkpoint.hub import HubUnavailable, hub_snapshot

    try:
        return hub_snapshot(repo_id, allow_patterns=HUB_PATTERNS)
    except HubUnavailable as exc:
        raise ModelUnavailable(f"Could not get {repo_id!r}: it is not in the local Hugging Face cache and "
                               f"{exc.reason}.", repo_id) from exc
    except RepositoryNotFoundError as exc:
        raise ModelUnavailable(
            f"The Hugging Face Hub has no model {repo_id!r} (or it is private: log in with `hf auth login`).",
            repo_id) from exc
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as exc:
        raise ModelUnavailable(
            f"Could not get {repo_id!r} from the Hugging Face Hub ({type(exc).__name__}: {_first_line(exc)}).",
            repo_id) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no detail"


def check_checkpoint_dir(path: Path) -> Path:
    """Raise CheckpointError listing missing files; return the folder."""
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file; pass the checkpoint folder that holds config.json.")
    missing = [f for f in REQUIRED_FILES if not (path / f).exists()]
    if not (path / WEIGHT_FILE).exists() and not (path / WEIGHT_INDEX).exists():
        missing.append(f"{WEIGHT_FILE} (or {WEIGHT_INDEX} + shards)")
    if missing:
        raise ModelUnavailable(f"{path} is not a complete rumik-oss-1 checkpoint: missing {', '.join(missing)}.")
    return path


def load_tokenizer(path: Path, config: RumikOSSConfig):
    """`PreTrainedTokenizerFast(tokenizer_file=...)` directly (AutoTokenizer rebuilds Cohere's
    pre-tokenizer on transformers 5.x and Indic text gets different ids), checked against
    config.json: `rumik_app.checkpoint.framing.check_framing` (CheckpointError on a mismatch)."""
    from transformers import PreTrainedTokenizerFast

    from rumik_app.checkpoint.framing import check_framing

    kwargs = {}
    tok_cfg = path / "tokenizer_config.json"
    if tok_cfg.exists():
        data = json.loads(tok_cfg.read_text(encoding="utf-8"))
        kwargs = {k: data[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                  if isinstance(data.get(k), str)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"), **kwargs)
    check_framing(tokenizer, config)
    return tokenizer


def auto_device(device: str | torch.device | None = None) -> torch.device:
    """Explicit device, else CUDA if available, else CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


DTYPE_NAMES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
               "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}
# CPU features (torch.cpu.get_capabilities() names) that make bf16 matmuls native. There bf16
# halves the bytes a memory-bound decode reads; elsewhere bf16 is emulated, slower than fp32.
NATIVE_BF16_CPU_FEATURES = ("avx512_bf16", "amx_bf16")
# The CPU default without asking torch (fp32 | bf16), for a whole deployment or test run
# (tests/conftest.py pins fp32, so a run's exact oracles do not depend on the machine's CPU).
CPU_DTYPE_ENV = "RUMIK_CPU_DTYPE"


def cpu_native_bf16() -> str | None:
    """The feature of this CPU that runs bf16 natively ("avx512_bf16", "amx_bf16"), or None."""
    capabilities = torch.cpu.get_capabilities()
    return next((name for name in NATIVE_BF16_CPU_FEATURES if capabilities.get(name)), None)


def choose_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> tuple[torch.dtype, str]:
    """(dtype, why) for the load log: an explicit dtype, else bf16 on CUDA; on CPU the
    RUMIK_CPU_DTYPE environment variable when set, else bf16 where the CPU has native bf16
    (AVX512-BF16 or AMX), else float32. CheckpointError for an unknown name."""
    if isinstance(dtype, torch.dtype):
        return dtype, "as asked"
    if dtype:
        if dtype not in DTYPE_NAMES:
            raise CheckpointError(f"Unknown dtype {dtype!r}; use one of {', '.join(DTYPE_NAMES)}.")
        return DTYPE_NAMES[dtype], "as asked"
    if device.type == "cuda":
        return torch.bfloat16, "the CUDA default"
    if device.type != "cpu":
        return torch.float32, f"the default on {device.type}"
    pinned = os.environ.get(CPU_DTYPE_ENV)
    if pinned:
        if pinned not in DTYPE_NAMES:
            raise CheckpointError(f"{CPU_DTYPE_ENV}={pinned!r} is not a dtype; use fp32 or bf16, or unset it.")
        return DTYPE_NAMES[pinned], f"{CPU_DTYPE_ENV}={pinned}"
    feature = cpu_native_bf16()
    if feature:
        return torch.bfloat16, f"this CPU has native bf16 ({feature}); --dtype fp32 for float32"
    return torch.float32, "this CPU has no native bf16 (AVX512-BF16 or AMX), where bf16 is slower; --dtype overrides"


def auto_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> torch.dtype:
    """Explicit dtype, else bf16 on CUDA and on CPUs with native bf16, float32 elsewhere (`choose_dtype`)."""
    return choose_dtype(device, dtype)[0]


def load_model(path: Path, config: RumikOSSConfig, device: torch.device, dtype: torch.dtype):
    """Our own RumikOSSForCausalLM with the checkpoint's weights (tied embeddings)."""
    from safetensors import SafetensorError

    from rumik_app.model.lm import RumikOSSForCausalLM

    try:
        model = RumikOSSForCausalLM.from_pretrained(
            str(path), config=config.lm, dtype=dtype, device_map={"": device}, use_safetensors=True
        )
    except (OSError, RuntimeError, ValueError, SafetensorError) as exc:  # SafetensorError: a corrupt file
        raise CheckpointError(f"Could not load weights from {path}: {exc}") from exc
    _check_tied(model)
    return model.eval()


def _check_tied(model) -> None:
    if model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        raise CheckpointError("lm_head is not tied to the embeddings; the checkpoint format is not rumik-oss-1.")


def load_codec(path: Path, device: torch.device):
    """The frozen Mimi codec from `codec/` (always float32: it is small and bf16 costs quality)."""
    from transformers import MimiModel

    try:
        codec = MimiModel.from_pretrained(str(path), subfolder="codec", dtype=torch.float32, use_safetensors=True)
    except (OSError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"Could not load the Mimi codec from {path / 'codec'}: {exc}") from exc
    return codec.to(device).eval()


def save_checkpoint(model, config: RumikOSSConfig, source_dir: Path, out_dir: str | os.PathLike,
                    dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write `model` as a published-format checkpoint, atomically (temp folder + rename).

    Tokenizer files and `codec/` are copied from `source_dir` (the checkpoint training
    started from). lm_head.weight is not written (tied). Shards above 5 GB get an index.
    """
    from huggingface_hub import save_torch_state_dict

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()
                 if k != "lm_head.weight"}
        save_torch_state_dict(state, tmp, max_shard_size=MAX_SHARD_SIZE)
        config.save(tmp, dtype_name=str(dtype).removeprefix("torch."))
        for name in COPY_ALONG:
            if (Path(source_dir) / name).exists():
                shutil.copy2(Path(source_dir) / name, tmp / name)
        shutil.copytree(Path(source_dir) / "codec", tmp / "codec")
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
