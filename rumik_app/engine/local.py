"""`TTSEngine`: load a checkpoint once, then synthesise, stream and batch (docs/ARCHITECTURE.md §5).

    from rumik_app import TTSEngine, SynthesisRequest
    engine = TTSEngine.from_pretrained("rumik-ai/rumik-oss-1")        # or a folder, or "tiny"
    audio = engine.synthesize(SynthesisRequest("नमस्ते! <laugh> कैसे हो?", tone="happy", seed=7))
    for chunk in engine.stream(SynthesisRequest("Hello there.")):    # float32 [n] pieces
        play(chunk)
    rollouts = engine.generate_batch(requests, num_samples=4)        # GRPO rollouts

The app, the CLI, the benchmark runner and GRPO all sample through this class.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from rumik_app.audio import Audio, CrossfadeStream, crossfade_concat
from rumik_app.cli_args import BACKENDS
from rumik_app.checkpoint.load import (
    DEFAULT_MODEL, auto_device, auto_dtype, load_codec, load_model, load_tokenizer, resolve_checkpoint,
)
from rumik_app.text.chunking import MAX_CHUNK_SECONDS, split_text
from rumik_app.model.codec import MimiCodec
from rumik_app.model.config import RumikOSSConfig
from rumik_app.decode.slots import SlotDecoder, batch_bucket, cache_length
from rumik_app.decode.reference import BatchDecoder, ReferenceDecoder, Rollouts, RowParams
from rumik_app.text.languages import expected_seconds
from rumik_app.model.lm import AudioHead
from rumik_app.request import DEFAULT_MAX_NEW_TOKENS, MAX_NEW_TOKENS_CAP, SynthesisRequest, resolve_seed
from rumik_app.model.tokens import FrameParser

__all__ = ["TTSEngine", "SynthesisRequest", "BACKENDS"]

CROSSFADE_SECONDS = 0.05
# A chunk's expected speech may use at most this share of its token budget, so normal
# variation in speaking rate does not run into max_new_tokens.
CHUNK_BUDGET_SHARE = 0.8
FIRST_STREAM_FRAMES = 2  # 160 ms: low time-to-first-audio
# `stream` and `synthesize` sample the same tokens; only the codec decode differs (chunk by
# chunk with carried state vs the whole sequence at once), so the float32 samples agree to
# rounding, |difference| <= STREAM_ATOL; written as 16-bit PCM that is at most 1 step (LSB),
# measured on 20 s: 907 of 480,000 samples one step apart, none further (tests/rumik_app/test_engine.py).
STREAM_ATOL = 1e-5
STREAM_FRAMES = 5  # then 400 ms pieces
MAX_BATCH = 8
DECODERS = ("fast", "reference")
# Slot decoders (static KV cache + compiled step) kept per shape; more shapes are built on demand.
MAX_CACHED_DECODERS = 4

log = logging.getLogger(__name__)

# progress(tokens done, token budget), called once per frame by synthesize / synthesize_many.
Progress = Callable[[int, int], None]


class TTSEngine:
    """One loaded checkpoint: model, tokenizer, codec, config; thread-unsafe, load once per process."""

    def __init__(self, model, tokenizer, codec: MimiCodec, config: RumikOSSConfig, checkpoint_dir: Path,
                 restrict_phase: bool = True, compile: bool = False, decoder: str = "fast"):
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, not {decoder!r}")
        self.model, self.tokenizer, self.codec, self.config = model, tokenizer, codec, config
        self.compile, self.decoder = bool(compile), decoder
        self._slot_decoders: OrderedDict[tuple, SlotDecoder] = OrderedDict()
        self._decoders_built_for: tuple | None = None  # the model structure the pooled decoders saw
        self.layout = config.layout
        self.checkpoint_dir = Path(checkpoint_dir)
        self.head = AudioHead(model, self.layout, restrict_phase=restrict_phase)
        self.bos_id = self._bos_id()
        self.pad_id = config.lm.pad_token_id if config.lm.pad_token_id is not None else self.bos_id

    @classmethod
    def from_pretrained(cls, model: str = DEFAULT_MODEL, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, restrict_phase: bool = True,
                        compile: bool | None = None, decoder: str = "fast", backend: str = "engine",
                        **vllm_args) -> "TTSEngine":
        """Load a folder, a hub id (through the HF cache) or `"tiny"`. Never runs remote code.

        device: None = CUDA if available else CPU. dtype: None = bf16 on CUDA, float32 on CPU.
        restrict_phase: sample each position only from its codebook's rows (docs/ARCHITECTURE.md §5).
        compile: compile the decode step (CUDA graphs on CUDA); None = on for CUDA, off for
            CPU. Compilation and warm-up happen here, at load, with one log line.
        decoder: "fast" (static cache, fixed-shape step) or "reference" (the eager loop the
            fast path is tested against).
        backend: "engine" (this class, in-process) or "vllm" (`rumik_app.vllm_backend.VLLMEngine`,
            the same API on vLLM's engine; needs the vLLM environment). vllm_args, for "vllm"
            only: tensor_parallel_size, data_parallel_size, gpu_memory_utilization, ...
        Raises CheckpointError with the fix in the message.
        """
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "vllm":
            from rumik_app.engine.vllm import VLLMEngine

            return VLLMEngine.from_pretrained(model, device=device, dtype=dtype, restrict_phase=restrict_phase,
                                              compile=compile, decoder=decoder, **vllm_args)
        if vllm_args:
            raise TypeError(f"{sorted(vllm_args)} apply to backend='vllm' only")
        path = resolve_checkpoint(model)
        config = RumikOSSConfig.from_file(path)
        dev = auto_device(device)
        lm = load_model(path, config, dev, auto_dtype(dev, dtype))
        codec = MimiCodec(load_codec(path, dev), config.layout.num_quantizers)
        compile = dev.type == "cuda" if compile is None else compile
        engine = cls(lm, load_tokenizer(path), codec, config, path, restrict_phase=restrict_phase,
                     compile=compile and decoder == "fast", decoder=decoder)
        if engine.compile:
            engine.warmup()
        return engine

    def warmup(self, batch: int = 1, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, prompt_len: int = 256) -> float:
        """Build (and compile, if on) the slot decoder for this shape and run it once.

        Returns the seconds it took; logs one line. Later requests of the same batch bucket
        and cache length reuse it.
        """
        dec = self.slot_decoder(batch, prompt_len, max_new_tokens)
        seconds = dec.warmup()
        log.info("decode step %s for batch %d, cache %d positions on %s in %.1f s",
                 "compiled" if dec.compiled else "warmed up", dec.batch, dec.max_len, self.device, seconds)
        return seconds

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
        key = (batch_bucket(rows), cache_length(longest_prompt, min(max_new_tokens, MAX_NEW_TOKENS_CAP)), stop_mode)
        dec = self._slot_decoders.get(key)
        if dec is not None and not dec.in_use:
            self._slot_decoders.move_to_end(key)
            return dec
        dec = SlotDecoder(self.model, self.head, key[0], key[1], stop_mode=stop_mode, pad_id=self.pad_id,
                          compile=self.compile)
        if key not in self._slot_decoders:
            self._slot_decoders[key] = dec
            while len(self._slot_decoders) > MAX_CACHED_DECODERS:
                self._slot_decoders.popitem(last=False)
        return dec

    def _model_structure(self) -> tuple:
        """What a compiled step bakes in besides shapes: the identity of every module and
        parameter and each module's train/eval mode (~2 ms at 36 layers on CPU, once per batch)."""
        return (tuple((id(m), m.training) for m in self.model.modules()),
                tuple(id(p) for p in self.model.parameters()))

    def _decoder(self, prompts: list[list[int]], rows: list[RowParams], stop_mode: str = "threshold",
                 request_index: list[int] | None = None):
        """The sampler for these rows: the fast BatchDecoder on a pooled slot decoder, or the reference."""
        if self.decoder == "reference":
            return ReferenceDecoder(self.model, self.head, prompts, rows, pad_id=self.pad_id, stop_mode=stop_mode,
                                    request_index=request_index)
        steps = max(r.max_new_tokens for r in rows)
        slots = self.slot_decoder(len(rows), max(len(p) for p in prompts), steps, stop_mode)
        return BatchDecoder(self.model, self.head, prompts, rows, pad_id=self.pad_id, stop_mode=stop_mode,
                            request_index=request_index, slots=slots)

    def _bos_id(self) -> int:
        bos = self.tokenizer.convert_tokens_to_ids("<BOS_TOKEN>")
        if bos is None or bos == self.tokenizer.unk_token_id:
            bos = self.config.lm.bos_token_id
        return int(bos)

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    @property
    def voices(self) -> tuple[str, ...]:
        return self.config.speakers

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    def prompt_text(self, req: SynthesisRequest) -> str:
        """The exact prompt string (BOS shown as `[BOS]`); raises PromptError on bad input."""
        return "[BOS]" + req.prompt(voices=self.voices)

    def prompt_ids(self, req: SynthesisRequest) -> list[int]:
        """[BOS] + tokens of the prompt string (docs/ARCHITECTURE.md §3)."""
        text = req.prompt(voices=self.voices)
        return [self.bos_id] + self.tokenizer.encode(text, add_special_tokens=False)

    def row_params(self, req: SynthesisRequest, seed: int) -> RowParams:
        return RowParams(seed=seed, temperature=req.temperature, top_k=req.top_k, top_p=req.top_p,
                         min_new_tokens=req.min_new_tokens,
                         max_new_tokens=min(req.max_new_tokens, MAX_NEW_TOKENS_CAP))

    def generate_batch(self, requests: Sequence[SynthesisRequest], num_samples: int = 1,
                       stop_mode: str = "threshold", progress: Callable[[int], None] | None = None) -> Rollouts:
        """Sample `num_samples` completions per request in one batch (the GRPO interface).

        Row order: request 0 samples 0..n-1, request 1 samples 0..n-1, ... Sample j of a
        request uses seed (request seed or a random one) + j. Texts are not chunked here.
        stop_mode: "threshold" (sigmoid > 0.5, as at inference) or "sample" (Bernoulli, for RL).
        progress: called once per frame with the tokens generated so far by the batch's
            longest row (host-side, where the frame's tokens arrive anyway: no extra sync).
        """
        prompts, rows, owners = [], [], []
        for i, req in enumerate(requests):
            ids, base = self.prompt_ids(req), resolve_seed(req.seed)
            for j in range(num_samples):
                prompts.append(ids)
                rows.append(self.row_params(req, base + j))
                owners.append(i)
        decoder = self._decoder(prompts, rows, stop_mode=stop_mode, request_index=owners)
        q = self.layout.num_quantizers
        for step in decoder.steps():
            if progress is not None and (step.t + 1) % q == 0:
                progress(step.t + 1)
        return decoder.rollouts()

    def decode(self, codes: torch.Tensor, num_frames: torch.Tensor | Sequence[int]) -> list[np.ndarray]:
        """codes: [B, Q, T] -> one float32 waveform per row, cut to its own frame count."""
        audio = self.codec.decode(codes).cpu().numpy()
        return [audio[i, : int(n) * self.codec.frame_size].astype(np.float32) for i, n in enumerate(num_frames)]

    def plan(self, req: SynthesisRequest) -> list[SynthesisRequest]:
        """Split a request into chunk requests of at most ~16 s (25 s with a larger budget)
        of expected speech (docs/ARCHITECTURE.md §5). `max_new_tokens` caps each chunk.

        Chunks keep voice, description and sampling settings; chunk i uses seed + i. The text
        is normalised first (`req.spoken_text()`), so chunking and the expected durations see
        the spoken words; the chunk requests carry that text with `normalize=False`.
        """
        text = req.spoken_text()
        seed = resolve_seed(req.seed)
        # Chunk size follows the default budget (or a larger one the caller set), never a
        # smaller one: max_new_tokens below the default truncates each chunk as asked,
        # rather than shredding the text into many tiny chunks.
        budget = min(max(req.max_new_tokens, DEFAULT_MAX_NEW_TOKENS), MAX_NEW_TOKENS_CAP)
        limit = min(MAX_CHUNK_SECONDS, CHUNK_BUDGET_SHARE * budget / self.layout.tokens_per_second)
        if expected_seconds(text, req.language, req.pace) <= limit:
            return [req.with_(text=text, seed=seed, normalize=False)]
        chunks = split_text(text, max_seconds=limit, language=req.language, pace=req.pace)
        return [req.with_(text=chunk, seed=seed + i, normalize=False) for i, chunk in enumerate(chunks)]

    def synthesize(self, req: SynthesisRequest, progress: Progress | None = None) -> Audio:
        """Synthesise any length of text; long text is chunked and crossfaded.

        progress: called once per frame as `progress(tokens_done, token_budget)` (see
        `synthesize_many`); 100 tokens = 1 s of audio.
        """
        return self.synthesize_many([req], progress=progress)[0]

    def synthesize_many(self, requests: Sequence[SynthesisRequest], max_batch: int = MAX_BATCH,
                        progress: Progress | None = None) -> list[Audio]:
        """Synthesise several requests, batching their chunks `max_batch` at a time.

        progress: called once per frame with (tokens done, token budget): the budget is the
        sum over batches of the largest `max_new_tokens` in each, the most the call can
        generate; a batch that stops early jumps `tokens done` to its budget.
        """
        start = time.perf_counter()
        plans = [self.plan(req) for req in requests]
        flat = [(i, chunk) for i, plan in enumerate(plans) for chunk in plan]
        waves: list[list[np.ndarray]] = [[] for _ in requests]
        stats = {"tokens": [0] * len(requests), "finish": [[] for _ in requests]}
        batches = [flat[lo : lo + max_batch] for lo in range(0, len(flat), max_batch)]
        budgets = [max(self.token_budget(chunk) for _, chunk in part) for part in batches]
        for k, part in enumerate(batches):
            done = sum(budgets[:k])
            report = None if progress is None else (lambda t, done=done: progress(done + t, sum(budgets)))
            rollouts = self.generate_batch([chunk for _, chunk in part], progress=report)
            if progress is not None:
                progress(done + budgets[k], sum(budgets))
            for (i, _), wave, n_tok, why in zip(part, self.decode(rollouts.codes, rollouts.num_frames),
                                                rollouts.lengths.tolist(), rollouts.finish_reasons):
                waves[i].append(wave)
                stats["tokens"][i] += n_tok
                stats["finish"][i].append(why)
        elapsed = time.perf_counter() - start
        fade = int(CROSSFADE_SECONDS * self.sample_rate)
        out = []
        for i, plan in enumerate(plans):
            audio = Audio(crossfade_concat(waves[i], fade), self.sample_rate, seed=plan[0].seed)
            audio.info = self._info(stats["tokens"][i], audio.duration, elapsed, len(plan), stats["finish"][i])
            out.append(audio)
        return out

    def _info(self, tokens: int, duration: float, elapsed: float, chunks: int, finish: list[str]) -> dict:
        return {"tokens": tokens, "chunks": chunks, "finish_reasons": finish, "seconds": elapsed,
                "tokens_per_second": tokens / elapsed if elapsed else 0.0,
                # RTF = compute s per audio s (below 1: faster than real time); x_real_time is its inverse
                "real_time_factor": elapsed / duration if duration else 0.0,
                "x_real_time": duration / elapsed if elapsed else 0.0}

    def stream(self, req: SynthesisRequest, first_frames: int = FIRST_STREAM_FRAMES,
               frames_per_chunk: int = STREAM_FRAMES, stats: dict | None = None) -> Iterator[np.ndarray]:
        """Yield float32 audio pieces as they are generated; their concatenation equals
        `synthesize(req)` with the same seed (chunks generated one after another) up to float
        rounding in the codec: within STREAM_ATOL, at most 1 LSB once written as 16-bit PCM.

        stats: optional dict, filled with `seed`, `chunks`, `max_tokens` (the token budget: the
        sum of the chunks' `max_new_tokens`) at the start, then `tokens` (generated so far,
        updated as each frame arrives: a progress readout) and `finish_reasons` (per chunk).
        """
        plan = self.plan(req)
        stats = stats if stats is not None else {}
        stats.update(seed=plan[0].seed, tokens=0, chunks=len(plan), finish_reasons=[],
                     max_tokens=sum(self.token_budget(chunk) for chunk in plan))
        if len(plan) == 1:  # nothing to crossfade: no hold-back, lowest latency
            yield from self._stream_chunk(plan[0], first_frames, frames_per_chunk, stats)
            return
        joiner = CrossfadeStream(int(CROSSFADE_SECONDS * self.sample_rate))
        for chunk in plan:
            joiner.start_chunk()
            for piece in self._stream_chunk(chunk, first_frames, frames_per_chunk, stats):
                out = joiner.push(piece)
                if len(out):
                    yield out
            tail = joiner.end_chunk()
            if len(tail):
                yield tail
        rest = joiner.finish()
        if len(rest):
            yield rest

    def _stream_chunk(self, req: SynthesisRequest, first_frames: int, frames_per_chunk: int,
                      stats: dict) -> Iterator[np.ndarray]:
        decoder = self._decoder([self.prompt_ids(req)], [self.row_params(req, req.seed)])
        parser, codec_stream = FrameParser(self.layout), self.codec.streaming_decoder(batch=1)
        pending: list[list[int]] = []
        want = first_frames
        for step in decoder.steps():
            stats["tokens"] += 1
            frame = parser.push(int(step.tokens[0]))
            if frame is not None:
                pending.append(frame)
            if len(pending) >= want:
                yield self._decode_frames(codec_stream, pending)
                pending, want = [], frames_per_chunk
        stats["finish_reasons"].append(decoder.finish[0])
        if pending:
            yield self._decode_frames(codec_stream, pending)

    def _decode_frames(self, codec_stream, frames: list[list[int]]) -> np.ndarray:
        codes = torch.tensor(frames, dtype=torch.long, device=self.codec.device).T[None]
        return codec_stream.decode(codes)[0].cpu().numpy().astype(np.float32)

    @staticmethod
    def token_budget(req: SynthesisRequest) -> int:
        """The most tokens one utterance (chunk) of `req` may generate."""
        return min(req.max_new_tokens, MAX_NEW_TOKENS_CAP)

    def max_new_tokens_for(self, seconds: float) -> int:
        """Token budget for at most `seconds` of audio, in whole frames (>= 1), capped at ~30 s."""
        per_frame = self.layout.num_quantizers
        tokens = math.floor(seconds * self.layout.frame_rate_hz + 1e-9) * per_frame
        return max(per_frame, min(tokens, MAX_NEW_TOKENS_CAP))

    def __repr__(self) -> str:
        lm = self.config.lm
        return (f"TTSEngine({self.checkpoint_dir}, layers={lm.num_hidden_layers}, hidden={lm.hidden_size}, "
                f"device={self.device}, dtype={self.model.dtype}, decoder={self.decoder}, compile={self.compile})")

