"""The app's systems: rumik-oss-1, the espeak-ng classical baseline and tiny (random weights).

Library module for `app.py` (no command line)::

    registry = SystemRegistry(model="rumik-ai/rumik-oss-1", device=None)   # any load_engine option
    registry = SystemRegistry(model=path, voices="voices/")   # rumik-oss-1 speaks a voice library's voices too
    registry.preload(SYSTEM_RUMIK)          # never raises; a failure becomes the banner
    print(registry.banner_markdown())
    system = registry.get("tiny")           # raises SystemUnavailable with reason and fix
    for piece in system.stream(request, stats):   # float32 pieces at 24 kHz
        ...
    script = system.synthesize_script(parts, APP_LIMITS)   # SSML or dialogue: rumik engines only

Every model loads once per process, whoever asks first (a module-level cache guarded by a
lock per entry), and a failed load is remembered so visitors do not retry a 7 GB download
each. Engines are not thread-safe, so each loaded system also carries a lock that is held
for the whole of one generation.

GPU work: on a ZeroGPU Space every generation runs inside `spaces.GPU` (`webapp.zerogpu`,
duration from the request's audio budget). Idle unload (`app.py --idle-unload MINUTES`,
`SystemRegistry.start_idle_unload`): an engine nobody used for that long is unloaded
(`TTSEngine.unload`: the GPU's memory is freed) under its lock, and the next generation
reloads it first, logging the time it took.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rumik_app.audio import Audio
from rumik_app.cli_args import BACKENDS, LOAD_OPTIONS
from rumik_app.errors import RumikError
from rumik_app.prompt import VOICES
from rumik_app.request import DEFAULT_MODEL, TINY_MODEL, RequestLimits, SynthesisRequest
from webapp import zerogpu

if TYPE_CHECKING:
    from rumik_app.engine.script import Part, ScriptAudio

log = logging.getLogger(__name__)

SYSTEM_RUMIK = "rumik-oss-1"
SYSTEM_ESPEAK = "espeak"
SYSTEM_TINY = TINY_MODEL
SYSTEM_KEYS = (SYSTEM_RUMIK, SYSTEM_ESPEAK, SYSTEM_TINY)
SYSTEM_LABELS = {
    SYSTEM_RUMIK: "rumik-oss-1",
    SYSTEM_ESPEAK: "espeak-ng (classical baseline)",
    SYSTEM_TINY: "tiny (random weights: noise, for smoke tests)",
}
MEMORY_FIX = (
    "Fixes: run on a GPU with at least 10 GB free (bf16 weights are 6.8 GB), close other jobs, "
    "pick the device with --device, or try the app with --model tiny."
)
TINY_NOTE = ("Note: started with `--model tiny`: rumik-oss-1 here has random weights, so its audio is noise. "
             "Start the app without --model (or with a checkpoint folder) for speech.")
ESPEAK_INSTALL_FIX = "Fix: install it (sudo apt-get install espeak-ng; on a Space list espeak-ng in packages.txt)."


class SystemUnavailable(RumikError, RuntimeError):
    """A system could not be loaded; the message gives the reason and the fix."""


@dataclass
class LoadedSystem:
    """One ready back-end: an `evaluation.systems` Synthesizer, plus its `TTSEngine` for rumik
    checkpoints (which stream and show their exact prompt)."""

    key: str
    label: str
    engine: Any = None
    synthesizer: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.engine is not None:  # the GPU handlers (identity off a ZeroGPU Space)
            self._stream_on_gpu = zerogpu.gpu_task(self._engine_stream, self.audio_budget_s)
            self._synthesize_on_gpu = zerogpu.gpu_task(self.synthesizer.synthesize, self.audio_budget_s)
            self._script_on_gpu = zerogpu.gpu_task(self._engine_script, self.script_budget_s)

    def audio_budget_s(self, req: SynthesisRequest, *_) -> float:
        """The most audio `req` may make, in seconds (every planned chunk's token budget)."""
        if self.engine is None:
            return req.max_new_tokens / 100.0
        lay = self.engine.layout
        return sum(c.max_new_tokens for c in self.engine.plan(req)) / (lay.frame_rate_hz * lay.num_quantizers)

    def script_budget_s(self, parts: Sequence[Part], *_) -> float:
        """The most speech a script may make, in seconds (its pauses are silence: no GPU work)."""
        return sum(self.audio_budget_s(part.request) for part in parts if part.request is not None)

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self.engine.voices) if self.engine is not None else VOICES

    @property
    def reads_prompt(self) -> bool:
        """True when the system receives the §3 prompt string (rumik checkpoints)."""
        return self.engine is not None

    def max_new_tokens_for(self, seconds: float) -> int:
        from rumik_app.request import DEFAULT_MAX_NEW_TOKENS

        return self.engine.max_new_tokens_for(seconds) if self.engine is not None else DEFAULT_MAX_NEW_TOKENS

    def check_size(self, req: SynthesisRequest, limits: RequestLimits) -> None:
        """PromptError unless `req` fits the app's bounds: characters as typed and as spoken, and
        (rumik engines, which plan chunks) seconds of audio summed over the chunks."""
        if self.engine is not None:
            self.engine.plan(req, limits)
        else:
            limits.check_spoken(req.text, req.spoken_text(limits.max_chars, limits.max_spoken_chars))

    def prompt_text(self, req: SynthesisRequest) -> str:
        """The exact string the model receives (`[BOS]` + §3 prompt); PromptError on bad input."""
        if self.engine is not None:
            return self.engine.prompt_text(req)
        return "[BOS]" + req.prompt(voices=self.voices)

    def stream(self, req: SynthesisRequest, stats: dict) -> Iterator[np.ndarray]:
        """Float32 pieces at 24 kHz; `stats` gets `seed` and whatever the engine reports."""
        with self.lock:
            self._ready()
            if self.engine is not None:
                yield from self._stream_on_gpu(req, stats)
                return
            audio = self.synthesizer.synthesize(req)  # already 24 kHz mono (evaluation.systems.conform)
        stats.setdefault("seed", req.seed)
        yield audio.samples

    def _engine_stream(self, req: SynthesisRequest, stats: dict) -> Iterator[np.ndarray]:
        yield from self.engine.stream(req, stats=stats)

    def synthesize(self, req: SynthesisRequest) -> Audio:
        """The whole utterance at 24 kHz, with `seed` set to the seed actually used."""
        with self.lock:
            self._ready()
            audio = (self._synthesize_on_gpu if self.engine is not None else self.synthesizer.synthesize)(req)
        if audio.seed is None:
            audio.seed = req.seed
        return audio

    def synthesize_script(self, parts: Sequence[Part], limits: RequestLimits) -> ScriptAudio:
        """A script (SSML, a dialogue: `rumik_app.engine.script`) spoken whole, its parts joined
        with exact pauses; checked against `limits` part by part and summed. Rumik engines only."""
        if self.engine is None:
            raise SystemUnavailable(f"{self.label} cannot speak scripts (SSML, dialogue); choose rumik-oss-1.")
        with self.lock:
            self._ready()
            return self._script_on_gpu(parts, limits)

    def _engine_script(self, parts: Sequence[Part], limits: RequestLimits) -> ScriptAudio:
        from rumik_app.engine.script import synthesize_script

        return synthesize_script(self.engine, parts, limits=limits)

    def _ready(self) -> None:
        """Under the lock: note the use, and reload an engine the idle unloader put away."""
        self.last_used = time.monotonic()
        if self.engine is not None and not getattr(self.engine, "loaded", True):
            seconds = self.engine.reload()
            log.info("%s reloaded for a visitor in %.1f s", self.label, seconds)

    def unload_if_idle(self, idle_s: float) -> bool:
        """Unload the engine if nobody used it for `idle_s` and nobody is using it now."""
        engine = self.engine
        if engine is None or not getattr(engine, "loaded", False) or time.monotonic() - self.last_used < idle_s:
            return False
        if not self.lock.acquire(blocking=False):
            return False
        try:
            freed = engine.unload()
        finally:
            self.lock.release()
        from rumik_app.model.quantize import human_bytes  # the engine is loaded: so is torch

        log.info("%s unloaded after %.0f min idle (%s of weights freed)", self.label, idle_s / 60, human_bytes(freed))
        return True


# ----------------------------------------------------------------------------- process-wide cache

_CACHE: dict[tuple, LoadedSystem | SystemUnavailable] = {}
_CACHE_LOCK = threading.Lock()
_ENTRY_LOCKS: dict[tuple, threading.Lock] = {}


def _entry_lock(key: tuple) -> threading.Lock:
    with _CACHE_LOCK:
        return _ENTRY_LOCKS.setdefault(key, threading.Lock())


def load_cached(kind: str, spec: str, options: tuple = ()) -> LoadedSystem:
    """Load (once per process) and return a system; raise SystemUnavailable (also cached).
    kind: "engine", "vllm" (the engine backends) or "espeak"; options: sorted (name, value)
    pairs of `load_engine` options (device, dtype, compile, vLLM's)."""
    key = (kind, spec, options)
    with _entry_lock(key):
        if key not in _CACHE:
            try:
                _CACHE[key] = _load(kind, spec, options)
            except SystemUnavailable as exc:
                _CACHE[key] = exc
        found = _CACHE[key]
    if isinstance(found, SystemUnavailable):
        raise found
    return found


def cached(kind: str, spec: str, options: tuple = ()) -> LoadedSystem | SystemUnavailable | None:
    """What the cache holds for this entry, without loading: a system, its failure, or None."""
    with _CACHE_LOCK:
        return _CACHE.get((kind, spec, options))


def _load(kind: str, spec: str, options: tuple = ()) -> LoadedSystem:
    if kind in BACKENDS:  # the in-process engine, or the same checkpoint on vLLM (app.py --backend vllm)
        return _load_engine(spec, backend=kind, **dict(options))
    if kind == "espeak":
        return _load_espeak()
    raise ValueError(f"unknown system kind {kind!r}")


def _load_engine(spec: str, voices: str | None = None, **engine_options) -> LoadedSystem:
    """rumik-oss-1 (or tiny) through `evaluation.systems.RumikSystem`, keeping its engine for streaming.

    engine_options: `load_engine`'s (backend, device, dtype, compile: None = on for CUDA, the
    compiled step built and warmed up here, before serving; vLLM's options). voices: a voice
    library folder (`rumik_app.voices.library.use_library`), attached before anyone uses the engine.
    """
    from evaluation.systems import RumikSystem, SynthesisError
    from rumik_app.checkpoint.load import ModelUnavailable

    key = SYSTEM_TINY if spec == TINY_MODEL else SYSTEM_RUMIK
    system = RumikSystem(spec, **engine_options)
    try:
        engine = system.load()
    except SynthesisError as exc:  # wraps CheckpointError (with its fixes), CUDA and memory errors
        # A missing model: its fixes in app.py's own flags (--model), not the benchmark runner's.
        message = str(exc.__cause__) if isinstance(exc.__cause__, ModelUnavailable) else str(exc)
        if "out of memory" in message.lower():
            message += " " + MEMORY_FIX
        raise SystemUnavailable(message) from exc
    except MemoryError as exc:
        raise SystemUnavailable(f"Not enough memory to load {spec!r}. {MEMORY_FIX}") from exc
    except Exception as exc:  # noqa: BLE001 - the app must start whatever the checkpoint does
        log.exception("loading %s failed", spec)
        raise SystemUnavailable(
            f"Could not load {spec!r} ({type(exc).__name__}: {exc}). Check the checkpoint folder, "
            "or try the app with --model tiny."
        ) from exc
    log.info("loaded %s: %r", spec, engine)
    if voices is not None:
        from rumik_app.voices.library import use_library

        try:
            use_library(engine, voices)
        except RumikError as exc:  # a folder that cannot be used: its reason and fix
            raise SystemUnavailable(f"The voice library {voices!r} cannot be used: {exc}") from exc
    loaded = LoadedSystem(key=key, label=SYSTEM_LABELS[key], engine=engine, synthesizer=system)
    if getattr(engine, "backend", "engine") == "vllm":
        loaded.lock = contextlib.nullcontext()  # vLLM batches concurrent visitors itself
    return loaded


def _load_espeak() -> LoadedSystem:
    if shutil.which("espeak-ng") is None:
        raise SystemUnavailable("The espeak-ng program is not installed. " + ESPEAK_INSTALL_FIX)
    try:
        from evaluation.systems import load_system
    except ImportError as exc:
        raise SystemUnavailable(
            f"The espeak-ng baseline needs the evaluation.systems module, which failed to import ({exc})."
        ) from exc
    try:
        synth = load_system("espeak")
    except Exception as exc:  # noqa: BLE001
        raise SystemUnavailable(f"The espeak-ng baseline failed to start ({type(exc).__name__}: {exc}).") from exc
    return LoadedSystem(key=SYSTEM_ESPEAK, label=getattr(synth, "label", SYSTEM_LABELS[SYSTEM_ESPEAK]),
                        synthesizer=synth)


# ----------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class SystemStatus:
    key: str
    label: str
    state: str  # "ready" | "failed" | "not loaded"
    message: str = ""


class SystemRegistry:
    """The three systems of one app process; `model` is what `rumik-oss-1` loads (hub id or path),
    `voices` a voice library folder it speaks too (`--voices`; its voices join `LoadedSystem.voices`).

    engine_options: `load_engine`'s (`rumik_app.cli_args.engine_kwargs` of app.py's flags):
    backend, device, dtype, compile (None = on for CUDA) and vLLM's options for rumik-oss-1;
    tiny always runs on the in-process engine (vLLM cannot serve its head size) with the
    same device, dtype and compile.
    """

    def __init__(self, model: str = DEFAULT_MODEL, voices: str | os.PathLike | None = None, **engine_options):
        self.model = model
        options = {k: v for k, v in engine_options.items() if v is not None}
        kind = options.pop("backend", "engine")
        local = tuple(sorted((k, v) for k, v in options.items() if k in LOAD_OPTIONS))
        library = (("voices", str(voices)),) if voices is not None else ()  # rumik-oss-1's voice library
        self._specs = {
            SYSTEM_RUMIK: (kind, str(model), (tuple(sorted(options.items())) if kind == "vllm" else local) + library),
            SYSTEM_ESPEAK: ("espeak", SYSTEM_ESPEAK, ()),
            SYSTEM_TINY: ("engine", TINY_MODEL, local),
        }

    def resolve_key(self, name: str | None) -> str:
        """A system key from a key or a label (case-insensitive); empty = rumik-oss-1."""
        wanted = (name or SYSTEM_RUMIK).strip().lower()
        for key in SYSTEM_KEYS:
            if wanted in (key.lower(), SYSTEM_LABELS[key].lower()):
                return key
        raise SystemUnavailable(f"Unknown system {name!r}. Choose one of: {', '.join(SYSTEM_KEYS)}.")

    def _args(self, key: str) -> tuple:
        return self._specs[key]

    def get(self, name: str | None) -> LoadedSystem:
        """The loaded system (loading it on first use); SystemUnavailable with reason and fix."""
        key = self.resolve_key(name)
        try:
            return load_cached(*self._args(key))
        except SystemUnavailable as exc:
            raise SystemUnavailable(f"{SYSTEM_LABELS[key]} is unavailable: {exc}") from exc

    def start_idle_unload(self, minutes: float) -> threading.Thread:
        """Unload any loaded engine (in-process backend) unused for `minutes` (a daemon thread)."""
        idle_s = minutes * 60

        def watch() -> None:
            while True:
                time.sleep(min(30.0, max(0.1, idle_s / 4)))
                with _CACHE_LOCK:
                    systems = [s for s in _CACHE.values() if isinstance(s, LoadedSystem)]
                for system in systems:
                    system.unload_if_idle(idle_s)

        thread = threading.Thread(target=watch, name="rumik-idle-unload", daemon=True)
        thread.start()
        return thread

    def preload(self, name: str) -> SystemStatus:
        """Load now (e.g. at startup); never raises."""
        try:
            self.get(name)
        except SystemUnavailable:
            pass
        return self.status(name)

    def status(self, name: str) -> SystemStatus:
        key = self.resolve_key(name)
        found = cached(*self._args(key))
        if found is None:
            return SystemStatus(key, SYSTEM_LABELS[key], "not loaded")
        if isinstance(found, SystemUnavailable):
            return SystemStatus(key, SYSTEM_LABELS[key], "failed", str(found))
        return SystemStatus(key, SYSTEM_LABELS[key], "ready")

    def choices(self) -> list[tuple[str, str]]:
        """(label, key) pairs for a dropdown; a failed system says so in its label."""
        out = []
        for key in SYSTEM_KEYS:
            st = self.status(key)
            out.append((st.label + (" (unavailable)" if st.state == "failed" else ""), key))
        return out

    def default_choice(self) -> str:
        """rumik-oss-1 unless it failed to load; then the first system not known to fail."""
        for key in SYSTEM_KEYS:
            if self.status(key).state != "failed":
                return key
        return SYSTEM_RUMIK

    def banner_markdown(self) -> str:
        """Empty when rumik-oss-1 is fine; else the reason, the fix and what still works."""
        st = self.status(SYSTEM_RUMIK)
        if st.state != "failed":
            return TINY_NOTE if self.model == TINY_MODEL else ""
        others = [SYSTEM_LABELS[k] for k in SYSTEM_KEYS if k != SYSTEM_RUMIK and self.status(k).state != "failed"]
        return (
            f"### ⚠ The rumik-oss-1 model (`{self.model}`) could not be loaded\n\n{st.message}\n\n"
            f"The app keeps running: {' and '.join(others) or 'the Evaluate tab'} still work"
            f"{'' if not others else ' (choose them under System)'}."
        )
