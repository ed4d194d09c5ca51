"""Per-row LoRA for the engine's static body: many voices' adapters in one batch (Punica/S-LoRA style).

    bank = AdapterBank(model, library_source(library), capacity=16, max_bytes=2**30, rank=16)
    slot = bank.acquire("Arjun")                # loads (LRU) and pins the voice's adapter; slot >= 1
    ids = torch.tensor([0, slot, 0])            # per batch row: 0 = no adapter
    y = base(h) + bank.delta(layer, "q_proj", h, ids)   # h: [B, T, in] -> [B, T, out]
    bank.release(slot)                          # when the row leaves its decode slot

Every adapted projection of every layer keeps two static tensors: A^T [N+1, in, R] and
(scale * B)^T [N+1, R, out], where N is the bank's capacity and R its rank; slot 0 is zeros
(no adapter) and a smaller rank is zero-padded, so both are exact. A row's delta is two small
batched matmuls over its own slot's matrices (gathered per row): rows of many voices share one
decode step, and a row with slot 0 adds an exact zero. The body skips the bank entirely when
no live row has an adapter (`StaticBody`), so built-in voices run with no adapter arithmetic.

The tensors' addresses never change (slots are overwritten in place), so a compiled decode
step stays valid as adapters come and go. Adapters are evicted least recently used among the
slots no live row holds; the bank is bounded by count (`capacity`) and bytes (`max_bytes`).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path

import torch

from rumik_app.voices.package import (
    ADAPTER_FILE,
    ATTENTION_MODULES,
    TARGET_MODULES,
    VoiceError,
    VoicePackage,
    load_adapter,
    read_package,
)

DEFAULT_CAPACITY = 16
DEFAULT_RANK = 16  # LoraSpec's default; the engine raises it to its library's highest
DEFAULT_MAX_BYTES = 2 * 2**30
Loader = Callable[[], tuple[VoicePackage, dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]]]
Source = Callable[[str], tuple[Hashable, Loader]]  # voice name -> (its adapter's identity, how to load it)


class AdapterBankFull(VoiceError):
    """Every slot serves a running row: a moment's capacity limit (the server answers 503), not a bad request."""


def library_source(library) -> Source:
    """A bank's source over a VoiceLibrary: an adapter is known by its voice and its file's
    (mtime, size), so a voice replaced in the library is loaded afresh; a deleted one is a
    VoiceError (rows already running keep the copy in their slot)."""
    def source(name: str) -> tuple[Hashable, Loader]:
        package, folder, key = adapter_identity(library, name)
        return key, lambda: (package, load_adapter(folder, package))
    return source


def adapter_identity(library, name: str) -> tuple[VoicePackage, Path, Hashable]:
    """(package, folder, identity) of library voice `name`: the identity is the voice and its
    adapter file's (mtime, size), so a replaced voice is a new adapter to every cache (the bank's,
    vLLM's). VoiceError when the voice is gone."""
    package = library.get(name)
    folder = library.path(package.name)
    stat = (folder / ADAPTER_FILE).stat()
    return package, folder, (package.name, stat.st_mtime_ns, stat.st_size)


def projection(layer, module: str) -> torch.nn.Module:
    """The Linear `module` ("q_proj", ..., "down_proj") of a Cohere2 decoder layer."""
    return getattr(layer.self_attn if module in ATTENTION_MODULES else layer.mlp, module)


def merged_copy(model, folder: Path):
    """A deep copy of `model` with the voice package in `folder` merged into its weights
    (W + alpha/r * B @ A on every adapted projection): the oracle per-row LoRA is tested
    against, and what serving one voice per model costs."""
    package = read_package(folder)
    model = copy.deepcopy(model)
    with torch.no_grad():
        for (index, module), (a, b) in load_adapter(folder, package).items():
            projection(model.model.layers[index], module).weight += package.lora.scale * (b @ a)
    return model


def features(linear: torch.nn.Module) -> tuple[int, int]:
    """(in, out) of a Linear, also when its weight is a quantised tensor subclass."""
    if hasattr(linear, "in_features"):
        return linear.in_features, linear.out_features
    out_features, in_features = linear.weight.shape
    return in_features, out_features


class AdapterBank:
    """Up to `capacity` LoRA adapters of `model`'s body on its device; see the module docstring.

    Thread-safe for acquire/release (the server's scheduler thread and the app)."""

    def __init__(self, model, source: Source, capacity: int = DEFAULT_CAPACITY, rank: int = DEFAULT_RANK,
                 max_bytes: int = DEFAULT_MAX_BYTES, modules: tuple[str, ...] = TARGET_MODULES):
        weight = model.get_input_embeddings().weight
        self.source = source
        layers = model.model.layers
        self.rank, self.modules = rank, modules
        per_slot = sum(sum(features(projection(layer, m))) * rank for layer in layers for m in modules)
        per_slot *= weight.element_size()
        self.capacity = min(capacity, max_bytes // max(per_slot, 1) - 1)  # slot 0 (zeros) counts too
        if self.capacity < 1:
            raise VoiceError(f"One adapter of rank {rank} takes {per_slot / 2**20:.1f} MB (and the bank keeps a zero "
                             f"slot beside it), more than the bank's {max_bytes / 2**20:.1f} MB; raise the bank's "
                             "bytes or lower its rank.")
        self.bytes = per_slot * (self.capacity + 1)
        self.a_t: list[dict[str, torch.Tensor]] = []
        self.b_t: list[dict[str, torch.Tensor]] = []
        for layer in layers:
            dims = {m: features(projection(layer, m)) for m in modules}
            options = dict(device=weight.device, dtype=weight.dtype)
            self.a_t.append({m: torch.zeros(self.capacity + 1, i, rank, **options) for m, (i, _) in dims.items()})
            self.b_t.append({m: torch.zeros(self.capacity + 1, rank, o, **options) for m, (_, o) in dims.items()})
        for tensor in (t for group in (*self.a_t, *self.b_t) for t in group.values()):
            torch._dynamo.mark_static_address(tensor)
        self._slots: OrderedDict[Hashable, int] = OrderedDict()  # key -> slot, least recently used first
        self._names: dict[int, str] = {}
        self._users: dict[int, int] = {}
        self._lock = threading.Lock()

    def delta(self, layer: int, module: str, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The adapters' outputs for rows `ids` ([B] slots): h [B, T, in] -> [B, T, out]."""
        a_t, b_t = self.a_t[layer][module][ids], self.b_t[layer][module][ids]
        return torch.bmm(torch.bmm(h, a_t), b_t)

    def acquire(self, name: str) -> int:
        """The slot of voice `name`'s adapter (loaded from the source if absent), pinned for one
        more row; VoiceError when the voice is gone or every slot is pinned."""
        key, loader = self._guarded(name, lambda: self.source(name))
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._free_slot(name)
                self._write(slot, *self._guarded(name, loader))
                self._slots[key] = slot
                self._names[slot] = name
            self._slots.move_to_end(key)
            self._users[slot] = self._users.get(slot, 0) + 1
            return slot

    @staticmethod
    def _guarded(name: str, step: Callable):
        """`step()`, any failure but a VoiceError reported as one: a package changed or damaged on
        disk (a file gone mid-replace, a tensor that does not load) fails its request, never the
        server's decode loop."""
        try:
            return step()
        except VoiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - see the docstring
            raise VoiceError(f"Voice {name!r} could not be loaded ({type(exc).__name__}); it may have been replaced "
                             "just now: retry, or re-import it.") from None

    def release(self, slot: int) -> None:
        """One row fewer holds `slot` (0: nothing)."""
        with self._lock:
            if slot and self._users.get(slot, 0) > 0:
                self._users[slot] -= 1

    def loaded(self) -> dict[str, int]:
        """{voice name: rows holding it} for every adapter in the bank."""
        with self._lock:
            return {self._names[slot]: self._users.get(slot, 0) for slot in self._slots.values()}

    def _free_slot(self, name: str) -> int:
        taken = set(self._slots.values())
        for slot in range(1, self.capacity + 1):
            if slot not in taken:
                return slot
        for key, slot in self._slots.items():  # least recently used first
            if not self._users.get(slot):
                del self._slots[key]
                return slot
        raise AdapterBankFull(f"Cannot load voice {name!r}: the adapter bank's {self.capacity} slots all serve "
                              "running requests. Retry shortly, or start the server with a larger --max-adapters.")

    def _write(self, slot: int, package: VoicePackage, tensors: dict) -> None:
        """Copy one adapter into `slot` (rank zero-padded to the bank's, scale folded into B)."""
        lora = package.lora
        if lora.rank > self.rank:
            raise VoiceError(f"Voice {package.name!r} has LoRA rank {lora.rank}; this server's bank holds rank "
                             f"{self.rank} at most (raise --adapter-rank).")
        if len(tensors) != len(self.a_t) * len(lora.target_modules) or set(lora.target_modules) - set(self.modules):
            raise VoiceError(f"Voice {package.name!r} does not fit this checkpoint's layers; it was made for "
                             "another base.")
        with torch.no_grad():
            for layer in range(len(self.a_t)):
                for module in self.modules:
                    a_t, b_t = self.a_t[layer][module][slot], self.b_t[layer][module][slot]
                    a_t.zero_()
                    b_t.zero_()
                    if module not in lora.target_modules:
                        continue
                    a, b = tensors[(layer, module)]  # A [r, in], B [out, r]
                    if a.shape[1] != a_t.shape[0] or b.shape[0] != b_t.shape[1]:
                        raise VoiceError(f"Voice {package.name!r}: layer {layer} {module} has shape "
                                         f"{tuple(b.shape)} x {tuple(a.shape)}, not this checkpoint's; another base.")
                    a_t[:, : lora.rank].copy_(a.T.to(a_t))
                    b_t[: lora.rank].copy_((b.float() * lora.scale).T.to(b_t))
