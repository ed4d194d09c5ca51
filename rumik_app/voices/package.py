"""A voice package: one LoRA adapter of the body, its consent record and its figures, in a folder.

    package = read_package("voices/Arjun")          # checks voice.json and the adapter's header
    tensors = load_adapter("voices/Arjun", package)  # {(layer, "q_proj"): (A [r, in], B [out, r]), ...}
    write_package("voices/Arjun", package, peft_state_dict, consent_file="consent.wav")

Layout (docs/voices.md):

    Arjun/
      voice.json             name, base checkpoint fingerprint, LoRA spec, languages, consent,
                             data hours, training config, evaluation figures (VoicePackage)
      adapter.safetensors    PEFT's key names: base_model.model.model.layers.{i}.{self_attn|mlp}.
                             {q,k,v,o,gate,up,down}_proj.lora_{A,B}.weight; A [r, in], B [out, r]
      adapter_config.json    PEFT's LoraConfig, so peft and vLLM load the adapter as it is
      consent.<ext>          the speaker's consent recording or document (sha256 in voice.json)

The delta a projection gets is `scale * B @ A` with `scale = alpha / rank`, as PEFT defines it.
Nothing here unpickles: the adapter is safetensors, read header first (bounded), and every
size is bounded before it is read. Torch is imported only by `load_adapter` and `write_package`.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rumik_app.errors import RumikError
from rumik_app.files import atomic_write, replace_dir, sha256_file
from rumik_app.prompt import VOICES

FORMAT_VERSION = 1
VOICE_FILE = "voice.json"
ADAPTER_FILE = "adapter.safetensors"
PEFT_CONFIG_FILE = "adapter_config.json"
CONSENT_STEM = "consent"
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{1,31}")
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
TARGET_MODULES = ATTENTION_MODULES + MLP_MODULES
MAX_RANK = 128
MAX_VOICE_JSON_BYTES = 256 * 1024
MAX_ADAPTER_BYTES = 512 * 2**20
MAX_HEADER_BYTES = 4 * 2**20
MAX_CONSENT_BYTES = 50 * 2**20
MAX_STATEMENT_CHARS = 4000
RECORDING_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".m4a")  # --consent: checked (training.voice.consent)
DOCUMENT_SUFFIXES = (".pdf", ".png", ".jpg", ".txt")  # --consent-document: signed (.txt: e.g. PGP), kept unchecked
CONSENT_SUFFIXES = RECORDING_SUFFIXES + DOCUMENT_SUFFIXES
MAX_VERIFICATION_CHARS = 4000
ADAPTER_DTYPES = {"F32": 4, "F16": 2, "BF16": 2}  # safetensors dtype -> bytes per element
BASE_KEY = re.compile(r"model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.weight")
KEY_PATTERN = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight")


class VoiceError(RumikError, ValueError):
    """A voice package or library problem; the message names the fix."""


@dataclass(frozen=True)
class LoraSpec:
    """rank r, alpha (the delta is alpha / r * B @ A) and the projections adapted in every layer."""

    rank: int = 16
    alpha: float = 32.0
    target_modules: tuple[str, ...] = TARGET_MODULES

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def check(self) -> "LoraSpec":
        if not (isinstance(self.rank, int) and 1 <= self.rank <= MAX_RANK):
            raise VoiceError(f"LoRA rank must be a whole number 1 to {MAX_RANK}, not {self.rank!r}.")
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha <= 4 * MAX_RANK):
            raise VoiceError(f"LoRA alpha must be a number in (0, {4 * MAX_RANK}], not {self.alpha!r}.")
        unknown = sorted(set(self.target_modules) - set(TARGET_MODULES))
        if unknown or not self.target_modules:
            raise VoiceError(f"LoRA target modules must be among {', '.join(TARGET_MODULES)}; got {unknown or 'none'}.")
        return self


@dataclass(frozen=True)
class Consent:
    """The speaker's consent: their statement and the evidence (a recording or a document), by sha256,
    and `verification`: what checked it (training.voice.consent; empty in packages made before)."""

    statement: str
    evidence_file: str
    evidence_sha256: str
    evidence_bytes: int
    recorded_at: str
    verification: Mapping[str, Any] = field(default_factory=dict)

    def check(self) -> "Consent":
        if not self.statement.strip() or len(self.statement) > MAX_STATEMENT_CHARS:
            raise VoiceError(f"The consent statement must be 1 to {MAX_STATEMENT_CHARS:,} characters: who consents, "
                             "to what use of their voice, and until when.")
        if self.evidence_file not in {CONSENT_STEM + suffix for suffix in CONSENT_SUFFIXES}:
            kinds = ", ".join(CONSENT_SUFFIXES)
            raise VoiceError(f"The consent record's evidence_file must be consent.<ext> ({kinds}) inside the "
                             f"package, not {str(self.evidence_file)[:60]!r}. Re-create the package.")
        if not re.fullmatch(r"[0-9a-f]{64}", self.evidence_sha256):
            raise VoiceError("The consent record's evidence_sha256 must be 64 lowercase hex digits.")
        if len(json.dumps(dict(self.verification))) > MAX_VERIFICATION_CHARS:
            raise VoiceError(f"The consent record's verification must be a JSON object of at most "
                             f"{MAX_VERIFICATION_CHARS:,} characters. Re-create the package.")
        return self


@dataclass(frozen=True)
class VoicePackage:
    """What voice.json holds (see the module docstring)."""

    name: str
    base_fingerprint: str
    lora: LoraSpec
    consent: Consent
    languages: tuple[str, ...] = ()
    data_hours: float = 0.0
    training: Mapping[str, Any] = field(default_factory=dict)
    evaluation: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = ""
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "VoicePackage":
        """The record, every field's type and value checked (VoiceError naming the problem)."""
        try:
            values = dict(data)
            values["lora"] = LoraSpec(**{**data["lora"], "target_modules": tuple(data["lora"]["target_modules"])})
            values["consent"] = Consent(**data["consent"])
            values["languages"] = tuple(data.get("languages", ()))
            package = cls(**values)
            package.check_types()
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            if isinstance(exc, VoiceError):
                raise
            raise VoiceError(f"{VOICE_FILE} is not a voice package's record ({type(exc).__name__}: {str(exc)[:200]}); "
                             "make packages with `rumik voice create`.") from None
        if package.format_version != FORMAT_VERSION:
            raise VoiceError(f"{VOICE_FILE} has format version {package.format_version!r}; this version reads "
                             f"{FORMAT_VERSION}. Re-create the voice with this version's `rumik voice create`.")
        check_voice_name(package.name)
        package.lora.check()
        package.consent.check()
        return package

    def check_types(self) -> None:
        """TypeError unless every field has its declared type (JSON could hold anything), with
        finite numbers and plain JSON in `training` and `evaluation`."""
        strings = (self.name, self.base_fingerprint, self.created_at, *self.languages, *self.lora.target_modules,
                   self.consent.statement, self.consent.evidence_file, self.consent.evidence_sha256,
                   self.consent.recorded_at)
        if not all(isinstance(value, str) for value in strings):
            raise TypeError("names, fingerprint, languages, modules and the consent record must be strings")
        if not isinstance(self.format_version, int) or not isinstance(self.consent.evidence_bytes, int):
            raise TypeError("format_version and consent.evidence_bytes must be whole numbers")
        if not (isinstance(self.data_hours, (int, float)) and math.isfinite(self.data_hours) and self.data_hours >= 0):
            raise TypeError("data_hours must be a number of hours")
        if not all(isinstance(value, Mapping) for value in (self.training, self.evaluation, self.consent.verification)):
            raise TypeError("training, evaluation and consent.verification must be objects")
        plain = {"training": self.training, "evaluation": self.evaluation, "verification": self.consent.verification}
        json.dumps(plain, allow_nan=False)  # ValueError: NaN


def check_voice_name(name: str, builtin: tuple[str, ...] = VOICES) -> str:
    """A library voice's name: 2-32 ASCII letters, digits, `_` or `-`, starting with a letter, and
    not a built-in voice's (case-insensitive). It is written into the prompt as the speaker."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise VoiceError(f"Voice name {str(name)[:40]!r} is not allowed: use 2-32 ASCII letters, digits, '_' or "
                         "'-', starting with a letter (it becomes the prompt's speaker name).")
    if name.lower() in {voice.lower() for voice in builtin}:
        raise VoiceError(f"{name!r} is a built-in voice; give the new voice another name.")
    return name


def base_fingerprint(checkpoint_dir: str | os.PathLike) -> str:
    """A cheap identity of a checkpoint's weights: sha256 over config.json and, per weight file,
    its name, size, safetensors header and 16 samples of 64 KiB spread over its data. Any
    fine-tuning changes the samples; reading them costs milliseconds even for 6.8 GB."""
    folder = Path(checkpoint_dir)
    digest = hashlib.sha256((folder / "config.json").read_bytes())
    for path in sorted(folder.glob("model*.safetensors")):
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        with path.open("rb") as handle:
            for index in range(16):
                handle.seek(size * index // 16)
                digest.update(handle.read(64 * 1024))
    return "sha256:" + digest.hexdigest()


def consent_record(statement: str, evidence: str | os.PathLike, document: bool = False) -> Consent:
    """A Consent for `statement` and the evidence file (checked: exists, a known kind, bounded):
    the speaker's recording of the statement, or with `document` a signed document."""
    path = Path(evidence)
    flag = "--consent-document" if document else "--consent"
    if not path.is_file():
        raise VoiceError(f"Consent evidence {str(path)!r} is not a file: pass the speaker's recording of the statement "
                         "with --consent, or a signed document with --consent-document.")
    kinds, other = (DOCUMENT_SUFFIXES, RECORDING_SUFFIXES) if document else (RECORDING_SUFFIXES, DOCUMENT_SUFFIXES)
    if path.suffix.lower() not in kinds:
        hint = (f" A {path.suffix.lower()} goes to {'--consent' if document else '--consent-document'}."
                if path.suffix.lower() in other else "")
        raise VoiceError(f"{flag} takes {', '.join(kinds)}, not {path.suffix or 'a file without a suffix'!r}.{hint}")
    size = path.stat().st_size
    if not 0 < size <= MAX_CONSENT_BYTES:
        raise VoiceError(f"Consent evidence must be 1 byte to {MAX_CONSENT_BYTES // 2**20} MB; it is {size:,} bytes.")
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return Consent(statement.strip(), CONSENT_STEM + path.suffix.lower(), sha256_file(path), size, now).check()


def adapter_key(layer: int, module: str, which: str) -> str:
    """PEFT's name for one LoRA matrix of the body (which: "A" or "B")."""
    parent = "self_attn" if module in ATTENTION_MODULES else "mlp"
    return f"base_model.model.model.layers.{layer}.{parent}.{module}.lora_{which}.weight"


def read_safetensors_header(path: Path) -> dict[str, dict]:
    """The tensor table of a safetensors file ({name: {dtype, shape, data_offsets}}), bounded,
    without reading the data; VoiceError if it is not safetensors."""
    size = path.stat().st_size
    if size > MAX_ADAPTER_BYTES:
        raise VoiceError(f"{path.name} is {size / 2**20:.0f} MB; adapters are at most {MAX_ADAPTER_BYTES // 2**20} MB "
                         "(lower the LoRA rank).")
    with path.open("rb") as handle:
        head = handle.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            raise VoiceError(f"{path.name} is not a safetensors file; adapters are safetensors only (no pickles).")
        try:
            table = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise VoiceError(f"{path.name} is not a safetensors file; adapters are safetensors only.") from None
    if not isinstance(table, dict):
        raise VoiceError(f"{path.name} is not a safetensors file; adapters are safetensors only.")
    table.pop("__metadata__", None)
    _check_offsets(path, table, size - 8 - length)
    return table


def _check_offsets(path: Path, table: dict, data_bytes: int) -> None:
    """VoiceError unless the tensors' byte ranges tile the file's data exactly (a truncated or
    padded file would otherwise pass the header and fail at load, mid-request)."""
    try:
        spans = sorted(tuple(entry["data_offsets"]) for entry in table.values())
    except (TypeError, KeyError):
        raise VoiceError(f"{path.name} is not a safetensors file (a tensor without data offsets).") from None
    end = 0
    for start, stop in spans:
        if start != end or not (isinstance(stop, int) and stop >= start):
            raise VoiceError(f"{path.name}'s tensors do not lie end to end in the file: it is damaged or truncated.")
        end = stop
    if end != data_bytes:
        raise VoiceError(f"{path.name} holds {data_bytes:,} bytes of tensor data, its header {end:,}: the file is "
                         "truncated or altered. Re-import the voice.")


@dataclass(frozen=True)
class BaseShapes:
    """What an adapter must fit: the served checkpoint's layers and each target module's weight
    shape (out, in), read from its safetensors headers (`base_shapes`)."""

    num_layers: int
    modules: Mapping[str, tuple[int, int]]


def base_shapes(checkpoint_dir: str | os.PathLike) -> BaseShapes:
    """The checkpoint's BaseShapes, from the headers of its `model*.safetensors` (safetensors reads
    only the header here: no tensor data, no torch)."""
    from safetensors import safe_open

    layers, modules = set(), {}
    for path in sorted(Path(checkpoint_dir).glob("model*.safetensors")):
        with safe_open(str(path), framework="numpy") as weights:
            for name in weights.keys():
                if (match := BASE_KEY.fullmatch(name)) and match.group(2) in TARGET_MODULES:
                    layers.add(int(match.group(1)))
                    modules[match.group(2)] = tuple(weights.get_slice(name).get_shape())
    return BaseShapes(len(layers), modules)


def check_adapter_table(table: Mapping[str, dict], lora: LoraSpec, base: BaseShapes | None = None) -> int:
    """The adapter's number of layers; VoiceError unless every key is a LoRA matrix of a target
    module whose bytes match its shape and dtype, A and B pair up with rank r, every layer has
    every target module, and (given the served checkpoint's `base`) the layers and each matrix's
    outer dimension match it: what passes here loads."""
    seen: dict[tuple[int, str], dict[str, list[int]]] = {}
    for name, entry in table.items():
        match = KEY_PATTERN.fullmatch(name)
        if not match or match.group(3) not in lora.target_modules or match.group(3) not in TARGET_MODULES:
            raise VoiceError(f"Adapter tensor {name[:80]!r} is not a LoRA matrix of {', '.join(lora.target_modules)}.")
        seen.setdefault((int(match.group(1)), match.group(3)), {})[match.group(4)] = _matrix_shape(name, entry)
    num_layers = base.num_layers if base is not None else None
    layers = sorted({layer for layer, _ in seen})
    count = len(layers)
    if not seen or layers != list(range(count)) or (num_layers is not None and count != num_layers):
        raise VoiceError(f"The adapter covers layers {layers[:3]}...; it must cover all "
                         f"{num_layers if num_layers is not None else count} layers of its base.")
    for (layer, module), pair in seen.items():
        a, b = pair.get("A"), pair.get("B")
        if a is None or b is None or a[0] != lora.rank or b[1] != lora.rank:
            raise VoiceError(f"Layer {layer} {module}: lora_A must be [r, in] and lora_B [out, r], r = {lora.rank}.")
        if base is not None and module in base.modules and (b[0], a[1]) != base.modules[module]:
            out_features, in_features = base.modules[module]
            raise VoiceError(f"Layer {layer} {module}: the adapter is [{b[0]}, {a[1]}] (out, in) where the served "
                             f"checkpoint's is [{out_features}, {in_features}]; it was made for another model.")
    if len(seen) != count * len(lora.target_modules):
        raise VoiceError("The adapter must adapt every target module in every layer.")
    return count


def _matrix_shape(name: str, entry) -> list[int]:
    """The [rows, columns] of one adapter tensor; VoiceError unless it is a float matrix whose
    byte range holds exactly rows x columns elements of its dtype."""
    if not isinstance(entry, dict) or entry.get("dtype") not in ADAPTER_DTYPES:
        raise VoiceError(f"Adapter tensor {name[:80]!r} must be float32, float16 or bfloat16.")
    shape = entry.get("shape")
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(d, int) and d > 0 for d in shape)):
        raise VoiceError(f"Adapter tensor {name[:80]!r} must be a matrix.")
    start, stop = entry["data_offsets"]
    needed = shape[0] * shape[1] * ADAPTER_DTYPES[entry["dtype"]]
    if stop - start != needed:
        raise VoiceError(f"Adapter tensor {name[:80]!r} holds {stop - start:,} bytes where {shape} {entry['dtype']} "
                         f"needs {needed:,}: the file is damaged or altered. Re-import the voice.")
    return shape


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_package(folder: str | os.PathLike, base: BaseShapes | None = None) -> VoicePackage:
    """The VoicePackage in `folder`, checked (voice.json, the adapter's header and names, against
    `base` when given, the consent file's hash). Reads no tensor data."""
    folder = Path(folder)
    record = folder / VOICE_FILE
    if not record.is_file():
        raise VoiceError(f"{folder} has no {VOICE_FILE}: not a voice package (make one with `rumik voice create`).")
    if record.stat().st_size > MAX_VOICE_JSON_BYTES:
        raise VoiceError(f"{record} is over {MAX_VOICE_JSON_BYTES // 1024} KB: not a voice package's record.")
    try:
        data = json.loads(record.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise VoiceError(f"{VOICE_FILE} of {folder.name!r} is not valid JSON ({str(exc)[:120]}); re-create or "
                         "re-import the voice.") from None
    if not isinstance(data, dict):
        raise VoiceError(f"{record} is not a voice package's record.")
    package = VoicePackage.from_dict(data)
    adapter = folder / ADAPTER_FILE
    if not adapter.is_file():
        raise VoiceError(f"{folder} has no {ADAPTER_FILE}; adapters are safetensors only (no .bin or .pt).")
    check_adapter_table(read_safetensors_header(adapter), package.lora, base)
    consent = folder / package.consent.evidence_file
    if not consent.is_file() or sha256_file(consent) != package.consent.evidence_sha256:
        raise VoiceError(f"Voice {package.name!r}: the consent evidence {package.consent.evidence_file} is missing or "
                         "does not match its sha256; the package was altered. Re-import it from its source.")
    return package


def load_adapter(folder: str | os.PathLike, package: VoicePackage, dtype=None) -> dict[tuple[int, str], tuple]:
    """{(layer, module): (A [r, in], B [out, r])} as float tensors on the CPU (dtype: cast to it)."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(folder) / ADAPTER_FILE))
    out = {}
    for layer in range(len({k.split(".layers.")[1].split(".")[0] for k in tensors})):
        for module in package.lora.target_modules:
            pair = tensors[adapter_key(layer, module, "A")], tensors[adapter_key(layer, module, "B")]
            out[(layer, module)] = tuple(t.to(dtype) if dtype is not None else t for t in pair)
    return out


def peft_config(package: VoicePackage, base_model: str = "rumik-ai/rumik-oss-1") -> dict:
    """PEFT's adapter_config.json for this package (what peft and vLLM read)."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
            "r": package.lora.rank, "lora_alpha": package.lora.alpha, "lora_dropout": 0.0, "bias": "none",
            "target_modules": list(package.lora.target_modules), "use_rslora": False, "use_dora": False,
            "modules_to_save": None, "fan_in_fan_out": False, "inference_mode": True}


def write_package(folder: str | os.PathLike, package: VoicePackage, tensors: Mapping[str, Any],
                  consent_file: str | os.PathLike) -> Path:
    """Write the package atomically (a temporary folder beside `folder`, then one rename), after
    checking the record, the tensors' names and shapes and the consent file's hash."""
    from safetensors.torch import save_file

    folder = Path(folder)
    package = VoicePackage.from_dict(package.to_dict())  # every check of a read, before writing
    if sha256_file(consent_file) != package.consent.evidence_sha256:
        raise VoiceError("The consent file changed since its record was made; make the record again.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        save_file({name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()},
                  str(staging / ADAPTER_FILE), metadata={"format": "pt", "voice": package.name})
        check_adapter_table(read_safetensors_header(staging / ADAPTER_FILE), package.lora)
        shutil.copyfile(consent_file, staging / package.consent.evidence_file)
        atomic_write(staging / PEFT_CONFIG_FILE, json.dumps(peft_config(package), indent=2))
        atomic_write(staging / VOICE_FILE, json.dumps(package.to_dict(), indent=2, ensure_ascii=False))
        return replace_dir(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
