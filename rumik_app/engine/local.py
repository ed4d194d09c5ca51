"""`TTSEngine`: the in-process engine, on the fast decode path (docs/ARCHITECTURE.md §5).

    from rumik_app import TTSEngine, SynthesisRequest
    engine = TTSEngine.from_pretrained("rumik-ai/rumik-oss-1")        # or a folder, or "tiny"
    audio = engine.synthesize(SynthesisRequest("नमस्ते! <laugh> कैसे हो?", tone="happy", seed=7))
    for piece in engine.stream(SynthesisRequest("Hello there.")):    # float32 [n] pieces
        play(piece)
    rollouts = engine.generate_batch(requests, num_samples=4)        # GRPO rollouts

The app, the CLI, the benchmark runner, the speech server's scheduler and GRPO all sample
through this class (or rumik_vllm's `VLLMEngine`, the same API on vLLM: `rumik_app.engine.loading`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from rumik_app.checkpoint.load import (
    auto_device,
    choose_dtype,
    load_codec,
    load_model,
    load_tokenizer,
    resolve_checkpoint,
)
from rumik_app.decode.reference import ReferenceDecoder
from rumik_app.decode.rollouts import Rollouts
from rumik_app.decode.sampling import RowParams
from rumik_app.decode.slots import BatchDecoder, SlotDecoder, batch_bucket, cache_length
from rumik_app.engine.base import BaseEngine
from rumik_app.engine.stream import FIRST_PIECE_FRAMES, PIECE_FRAMES
from rumik_app.model.codec import MimiCodec
from rumik_app.model.config import RumikOSSConfig
from rumik_app.model.lm import AudioHead
from rumik_app.model.quantize import QUANTIZE_ATTRIBUTE, check_ready, module_bytes, quantize_model
from rumik_app.request import DEFAULT_MAX_NEW_TOKENS, DEFAULT_MODEL, SynthesisRequest
from rumik_app.voices.lora import DEFAULT_CAPACITY, DEFAULT_MAX_BYTES, DEFAULT_RANK, AdapterBank, library_source
from rumik_app.voices.package import VoiceError

__all__ = ["TTSEngine", "SynthesisRequest"]

DECODERS = ("fast", "reference")
# Slot decoders (static KV cache + compiled step) kept per shape; more shapes are built on demand.
MAX_CACHED_DECODERS = 4

log = logging.getLogger(__name__)


class TTSEngine(BaseEngine):
    """One loaded checkpoint in this process: model, tokenizer, codec, config; thread-unsafe,
    load once per process."""

    backend = "engine"
    synth_batch_size = 8

    def __init__(self, model, tokenizer, codec: MimiCodec, config: RumikOSSConfig, checkpoint_dir: Path,
                 restrict_phase: bool = True, compile: bool = False, decoder: str = "fast"):
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, not {decoder!r}")
        super().__init__(tokenizer, codec, config, checkpoint_dir)
        self.model = model
        self.compile = bool(compile)
        self.decoder = decoder
        self._slot_decoders: OrderedDict[tuple, SlotDecoder] = OrderedDict()
        self._decoders_built_for: tuple | None = None  # the model structure the pooled decoders saw
        self.restrict_phase = restrict_phase
        self.head = AudioHead(model, self.layout, restrict_phase=restrict_phase)
        self.bank: AdapterBank | None = None  # library voices' adapters (use_voices)
        self.bank_options: dict = {}
        self.home: torch.device | None = None  # set by unload(): where the weights go back to
        self.loader: Callable[[], torch.nn.Module] | None = None  # re-reads the weights after unload()

    @classmethod
    def from_pretrained(cls, model: str = DEFAULT_MODEL, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, restrict_phase: bool = True,
                        compile: bool | None = None, decoder: str = "fast", quantize: str | None = None,
                        backend: str = "engine") -> "TTSEngine":
        """Load a folder, a hub id (through the HF cache) or `"tiny"`. Never runs remote code.

        device: None = CUDA if available else CPU. dtype: None = bf16 on CUDA and on CPUs
            with native bf16 (AVX512-BF16 or AMX), else float32 (`checkpoint.load.choose_dtype`).
        restrict_phase: sample each position only from its codebook's rows (docs/ARCHITECTURE.md §5).
        compile: compile the decode step (CUDA graphs on CUDA); None = on for CUDA, off for
            CPU. Compilation and warm-up happen here, at load, with one log line.
        decoder: "fast" (static cache, fixed-shape step) or "reference" (the eager loop the
            fast path is tested against).
        quantize: None, "int8" (CPU and CUDA), "int4" or "nf4" (CUDA): the body's linears
            quantised at load, the stop head, norms and embedding kept (`rumik_app.model.quantize`).
        One log line says the dtype chosen and why, and the weight bytes before and after.
        backend: only "engine" (this class); the vLLM backend is
        `rumik_app.load_engine(model, backend="vllm")`, and asking this class for it is a
        TypeError that says so. Raises CheckpointError with the fix in the message.
        """
        if backend != "engine":
            raise TypeError(f"TTSEngine is the in-process engine (backend='engine'); for backend={backend!r} use "
                            f"rumik_app.load_engine(model, backend={backend!r}), which loads the right engine class.")
        path = resolve_checkpoint(model)
        config = RumikOSSConfig.from_file(path)
        tokenizer = load_tokenizer(path, config)  # the framing check: before any weights load
        target = auto_device(device)
        lm = _load_lm(path, config, target, dtype, quantize)
        codec = MimiCodec(load_codec(path, target), config.layout.num_quantizers)
        compile = target.type == "cuda" if compile is None else compile
        engine = cls(lm, tokenizer, codec, config, path, restrict_phase=restrict_phase,
                     compile=compile and decoder == "fast", decoder=decoder)
        engine.loader = lambda: _load_lm(path, config, target, dtype, quantize)
        if engine.compile:
            engine.warmup()
        return engine

    @property
    def quantize(self) -> str | None:
        """The quantisation mode the weights were loaded with (None: none)."""
        return getattr(self.model, QUANTIZE_ATTRIBUTE, None)

    def warmup(self, batch: int = 1, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, prompt_len: int = 256) -> float:
        """Build (and compile, if on) the slot decoder for this shape and run it once.

        Returns the seconds it took; logs one line. Later requests of the same batch bucket
        and cache length reuse it.
        """
        slots = self.slot_decoder(batch, prompt_len, max_new_tokens)
        seconds = slots.warmup()
        log.info("decode step %s for batch %d, cache %d positions on %s in %.1f s",
                 "compiled" if slots.compiled else "warmed up", slots.batch, slots.max_len, self.device, seconds)
        return seconds

    def use_voices(self, library, capacity: int = DEFAULT_CAPACITY, rank: int | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        """Serve `library`'s voices: an AdapterBank (rumik_app.voices.lora) of at most `capacity`
        adapters of rank <= `rank` in `max_bytes` of device memory, shared by every slot decoder.
        rank None: the library's highest, at least DEFAULT_RANK (every row reads the bank's rank,
        so a needlessly high one costs memory traffic). Rows of built-in voices run as before;
        None removes the library."""
        super().use_voices(library)
        if rank is None:
            ranks = [package.lora.rank for package in library.packages()] if library is not None else []
            rank = max([DEFAULT_RANK, *ranks])
        self.bank_options = dict(capacity=capacity, rank=rank, max_bytes=max_bytes)
        self._slot_decoders.clear()
        self.bank = self._new_bank()

    def _new_bank(self) -> AdapterBank | None:
        if self.library is None or self.model is None:
            return None
        return AdapterBank(self.model, library_source(self.library), **self.bank_options)

    def slot_decoder(self, rows: int, longest_prompt: int, max_new_tokens: int,
                     stop_mode: str = "threshold") -> SlotDecoder:
        """A free SlotDecoder for `rows` rows (batch bucket) and this cache length bucket.

        Decoders are kept per shape (compiled once); one in use by another caller is never
        shared: a fresh one is built instead. When the model's structure has changed since
        they were built (modules swapped, e.g. wrapped by peft for LoRA after load; a parameter
        object replaced; train/eval mode), the pool is emptied first: a compiled decoder skips
        those guards after its first frame (`SlotDecoder._stance`), so it would run the old graph.
        Eager decoders call the live modules every step, so they need no such check.
        """
        if self.compile:
            structure = self._model_structure()
            if structure != self._decoders_built_for:
                self._slot_decoders.clear()
                self._decoders_built_for = structure
        key = (batch_bucket(rows), cache_length(longest_prompt, max_new_tokens), stop_mode)
        slots = self._slot_decoders.get(key)
        if slots is not None and not slots.in_use:
            self._slot_decoders.move_to_end(key)
            return slots
        slots = SlotDecoder(self.model, self.head, key[0], key[1], stop_mode=stop_mode, pad_id=self.pad_id,
                            compile=self.compile, bank=self.bank)
        if key not in self._slot_decoders:
            self._slot_decoders[key] = slots
            while len(self._slot_decoders) > MAX_CACHED_DECODERS:
                self._slot_decoders.popitem(last=False)
        return slots

    def _model_structure(self) -> tuple:
        """What a compiled step bakes in besides shapes: the identity of every module and
        parameter and each module's train/eval mode (~2 ms at 36 layers on CPU, once per batch)."""
        return (tuple((id(m), m.training) for m in self.model.modules()),
                tuple(id(p) for p in self.model.parameters()))

    def _decoder(self, prompts: list[list[int]], rows: list[RowParams], stop_mode: str = "threshold",
                 request_index: list[int] | None = None):
        """The sampler for these rows: the fast BatchDecoder on a pooled slot decoder, or the reference."""
        if self.decoder == "reference":
            if any(row.adapter for row in rows):
                raise VoiceError("Library voices need the fast decoder (decoder='fast'); the reference decoder runs "
                                 "the checkpoint's own weights only.")
            return ReferenceDecoder(self.model, self.head, prompts, rows, pad_id=self.pad_id, stop_mode=stop_mode,
                                    request_index=request_index)
        steps = max(r.max_new_tokens for r in rows)
        slots = self.slot_decoder(len(rows), max(len(p) for p in prompts), steps, stop_mode)
        return BatchDecoder(self.model, self.head, prompts, rows, pad_id=self.pad_id, stop_mode=stop_mode,
                            request_index=request_index, slots=slots)

    @property
    def device(self) -> torch.device:
        return self.home if self.home is not None else self.model.get_input_embeddings().weight.device

    @property
    def loaded(self) -> bool:
        """Whether the weights are on their device, ready to decode (False after `unload`)."""
        return self.home is None

    def unload(self) -> int:
        """Free the model's memory on its device until `reload`; returns the weight bytes freed.

        On CUDA the weights (and Mimi) wait in host memory, so the GPU is free and the reload
        is a copy; on CPU they are released and `reload` reads the checkpoint again (from the
        page cache, usually). Slot decoders (static KV caches, compiled steps) are dropped.
        Not while another thread decodes: the engine is not thread-safe (the server's
        scheduler and the app unload from the thread that decodes, or under its lock)."""
        if not self.loaded:
            return 0
        if self.home is None and self.loader is None and self.device.type != "cuda":
            raise RuntimeError("this engine was not loaded by from_pretrained, so it cannot reload its weights")
        freed = module_bytes(self.model)  # quantised weights too (buffers, tensor subclasses)
        self._slot_decoders.clear()
        self._decoders_built_for = None
        self.bank = None  # its adapters are reloaded from the library on demand
        self.home = self.device
        if self.home.type == "cuda":
            self.model.to("cpu")
            self.codec.mimi.to("cpu")
            torch.cuda.empty_cache()
        else:
            self.model = self.head = None  # nothing else holds the weights: they are freed
        return freed

    def reload(self) -> float:
        """Bring the weights back after `unload` (a no-op when loaded); returns the seconds it took."""
        start = time.perf_counter()
        if self.loaded:
            return 0.0
        if self.model is None:
            self.model = self.loader()
        else:
            self.model.to(self.home)
            self.codec.mimi.to(self.home)
        self.home = None
        self.head = AudioHead(self.model, self.layout, restrict_phase=self.restrict_phase)
        self.bank = self._new_bank()
        if self.compile:
            self.warmup()
        return time.perf_counter() - start

    def generate_batch(self, requests: Sequence[SynthesisRequest], num_samples: int = 1,
                       stop_mode: str = "threshold", progress: Callable[[int], None] | None = None) -> Rollouts:
        """Sample `num_samples` completions per request in one batch (the GRPO interface).

        Row order: request 0 samples 0..n-1, request 1 samples 0..n-1, ... Sample j of a
        request uses seed (request seed or a random one) + j. Texts are not chunked here.
        stop_mode: "threshold" (sigmoid > 0.5, as at inference) or "sample" (Bernoulli, for RL).
        progress: called once per frame with the tokens generated so far by the batch's
            longest row (host-side, where the frame's tokens arrive anyway: no extra sync).
        """
        prompts, rows, owners = self.batch_rows(requests, num_samples)
        decoder = self._decoder(prompts, rows, stop_mode=stop_mode, request_index=owners)
        for step in decoder.steps():
            if progress is not None and (step.t + 1) % self.layout.num_quantizers == 0:  # once per frame
                progress(step.t + 1)
        return decoder.rollouts()

    def stream(self, req: SynthesisRequest, first_frames: int = FIRST_PIECE_FRAMES,
               frames_per_piece: int = PIECE_FRAMES, stats: dict | None = None) -> Iterator[np.ndarray]:
        """Yield float32 audio pieces as they are generated; their concatenation equals
        `synthesize(req)` with the same seed (chunks generated one after another) up to float
        rounding in the codec: within STREAM_ATOL, at most 1 LSB once written as 16-bit PCM.

        stats: optional dict, filled with `seed`, `chunks`, `max_tokens` (the token budget: the
        sum of the chunks' `max_new_tokens`) at the start, then `tokens` (generated so far,
        updated as each frame arrives: a progress readout) and `finish_reasons` (per chunk).
        """
        plan = self.plan(req)
        assembler = self.assembler(plan, stats, first_frames, frames_per_piece)
        for chunk in plan:
            assembler.start_chunk()
            decoder = self._decoder([self.prompt_ids(chunk)], [self.row_params(chunk)])
            for step in decoder.steps():
                if assembler.push(int(step.tokens[0])) and len(piece := assembler.piece()):
                    yield piece
            if len(rest := assembler.end_chunk(decoder.finish[0])):
                yield rest
        if len(rest := assembler.finish()):
            yield rest

    def __repr__(self) -> str:
        lm = self.config.lm
        return (f"TTSEngine({self.checkpoint_dir}, layers={lm.num_hidden_layers}, hidden={lm.hidden_size}, "
                f"device={self.device}, loaded={self.loaded}, decoder={self.decoder}, compile={self.compile}"
                + (f", quantize={self.quantize})" if self.quantize else ")"))


def _load_lm(path: Path, config: RumikOSSConfig, device: torch.device, dtype, quantize: str | None):
    """The language model on `device` in the chosen dtype, quantised if asked; one log line.

    A model quantised for CUDA is read into host memory first and moved a linear at a time,
    so a GPU smaller than the unquantised model can hold it."""
    torch_dtype, why = choose_dtype(device, dtype)
    check_ready(quantize, device, torch_dtype)  # before reading gigabytes of weights
    staging = torch.device("cpu") if quantize and device.type == "cuda" else device
    lm = load_model(path, config, staging, torch_dtype)
    report = quantize_model(lm, quantize, device)
    log.info("loaded %s on %s in %s (%s); %s", path.name, device, str(torch_dtype).removeprefix("torch."), why,
             report.describe())
    return lm
