"""`VLLMEngine`: the `TTSEngine` API served by vLLM's engine (issue 11).

    engine = TTSEngine.from_pretrained("rumik-ai/rumik-oss-1", backend="vllm",
                                       tensor_parallel_size=2, gpu_memory_utilization=0.8)
    audio = engine.synthesize(SynthesisRequest("नमस्ते! <laugh>", seed=7))   # same API as the engine
    rollouts = engine.generate_batch(requests, num_samples=4)               # same Rollouts (GRPO)
    async for piece in engine.astream(req):      # from any asyncio loop: a server's request handler
        send(piece)

It needs the vLLM environment (`./setup.sh --vllm` builds `.venv-vllm`; see the README).
vLLM brings paged attention, continuous batching, CUDA graphs and tensor/data parallelism;
the model is our plugin (rumik_vllm: vLLM's Cohere2 + the stop head + audio-only logits)
and the sampling rules run in its logits processors (rumik_vllm.logits), so greedy tokens
equal the engine's and log-probs are defined as the engine's. What stays here, outside
vLLM: prompts (`prompt_ids`, sent as token ids with `skip_tokenizer_init`), chunking of
long text, Mimi decoding (the same exact streaming codec), crossfades.

vLLM's `AsyncLLM` runs on an asyncio loop in a daemon thread of this object. Every request
is a vLLM request, so concurrent callers (threads calling `synthesize`/`stream`, or
coroutines awaiting `astream`/`asynthesize`/`agenerate_batch` on their own loop) are
batched together by vLLM's scheduler. A caller that stops iterating (a client that hangs
up) aborts its request in vLLM. Sampling seeds go to vLLM's seeded sampler: the same
seed gives the same tokens (different ones from the engine backend's at temperature > 0).

Rollouts differ from the engine's in one field: vLLM returns no stop-head probabilities
for "continue" decisions, so `stop_log_probs` is NaN there (the terminal "stop" decision's
log-prob is returned exactly). GRPO rescores every action with the trainer's own head.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import torch

from rumik_app.engine.async_bridge import LoopThread
from rumik_app.audio import Audio, CrossfadeStream, crossfade_concat
from rumik_app.checkpoint.load import (
    DEFAULT_MODEL, CheckpointError, auto_device, auto_dtype, load_codec, load_tokenizer, resolve_checkpoint,
)
from rumik_app.model.codec import MimiCodec
from rumik_app.model.config import RumikOSSConfig
from rumik_app.engine.local import (
    CROSSFADE_SECONDS, FIRST_STREAM_FRAMES, STREAM_FRAMES, TTSEngine, resolve_seed,
)
from rumik_app.decode.reference import (
    FINISH_END_TOKEN, FINISH_MAX_TOKENS, FINISH_STOP_HEAD, STOP_MODES, Rollouts, RowParams,
)
from rumik_app.prompt import PromptError
from rumik_app.request import MAX_NEW_TOKENS_CAP, SynthesisRequest
from rumik_app.model.tokens import FrameParser, TokenLayout

PLUGIN_GROUP, PLUGIN_NAME = "vllm.general_plugins", "rumik_oss"
INSTALL_FIX = ("Set up the vLLM environment with `./setup.sh --vllm` (it installs requirements-vllm.txt and this "
               "project into .venv-vllm) and run with .venv-vllm/bin/python.")
# Requests synthesize_many hands to vLLM at once (vLLM's scheduler decides how many run);
# also bounds the rows Mimi decodes in one call.
VLLM_MAX_BATCH = 64
DEFAULT_GPU_MEMORY_UTILIZATION = 0.8  # leaves room on the GPU for Mimi decoding
WARMUP_REQUEST = SynthesisRequest("Hello.", seed=0, temperature=0.0, max_new_tokens=16)


def _require_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise CheckpointError(f"backend='vllm' needs vLLM, which is not installed here. {INSTALL_FIX}") from exc
    if not any(ep.name == PLUGIN_NAME for ep in entry_points(group=PLUGIN_GROUP)):
        raise CheckpointError("vLLM is installed, but the rumik_oss plugin is not registered with it "
                              f"(no '{PLUGIN_NAME}' entry point in {PLUGIN_GROUP}). {INSTALL_FIX}")


@dataclass
class _Row:
    """One vLLM request's output so far: generated ids and their log-probs."""

    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    reason: str = ""
    stop_log_prob: float = math.nan

    def extend(self, completion) -> list[int]:
        """Append a DELTA/FINAL completion; returns the new ids."""
        new = list(completion.token_ids)
        self.tokens += new
        for token, entry in zip(new, completion.logprobs or [{}] * len(new)):
            self.log_probs.append(float(entry[token].logprob) if token in entry else math.nan)
        return new

    def finish(self, completion, layout: TokenLayout, stop_column: int) -> None:
        """Classify the end: the stop column means the stop head (dropped), `</audio>` is kept."""
        last = self.tokens[-1] if self.tokens else None
        if last == stop_column:
            self.tokens.pop()
            self.stop_log_prob = self.log_probs.pop()
            self.reason = FINISH_STOP_HEAD
        elif last == layout.audio_end_token_id:
            self.reason = FINISH_END_TOKEN
        elif completion.finish_reason == "length":
            self.reason = FINISH_MAX_TOKENS
        else:
            raise RuntimeError(f"vLLM ended a row with finish_reason={completion.finish_reason!r}")


class VLLMEngine(TTSEngine):
    """`TTSEngine`'s API on vLLM. Request planning, chunking, streaming pieces, crossfades
    and `Rollouts` are shared with the engine backend; token generation is vLLM's."""

    backend = "vllm"

    def __init__(self, engine_loop: LoopThread, tokenizer, codec: MimiCodec, config: RumikOSSConfig,
                 checkpoint_dir: Path, dtype: torch.dtype, compile: bool = False):
        # Not TTSEngine.__init__: there is no in-process model or audio head here.
        self.model, self.head = None, None
        self.compile, self.decoder = compile, "vllm"  # what the engine backend reports in these
        self.tokenizer, self.codec, self.config = tokenizer, codec, config
        self.layout = config.layout
        self.checkpoint_dir = Path(checkpoint_dir)
        self.bos_id = self._bos_id()
        self.pad_id = config.lm.pad_token_id if config.lm.pad_token_id is not None else self.bos_id
        self.dtype = dtype
        self.engine_loop = engine_loop
        weakref.finalize(self, engine_loop.close)  # at garbage collection or interpreter exit
        from rumik_vllm.rules import AudioColumns  # vLLM-free: the column layout the plugin uses

        self.stop_column = AudioColumns.from_layout(self.layout, config.lm.vocab_size).stop_column

    @classmethod
    def from_pretrained(cls, model: str = DEFAULT_MODEL, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, restrict_phase: bool = True,
                        compile: bool | None = None, decoder: str = "fast",
                        tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                        seed: int = 0, warmup: bool = True, **engine_args) -> "VLLMEngine":
        """Start vLLM on a checkpoint (folder, hub id or "tiny"); never runs remote code.

        device: where Mimi decodes (None: CUDA if available, else CPU); vLLM uses its own
        platform. dtype: None = bf16 on CUDA, float32 on CPU. compile: vLLM's torch.compile +
        CUDA graphs (False = vLLM's enforce_eager); None = on for GPUs, off on CPU, where
        compiling costs minutes. decoder: the engine backend's option; only "fast" (the
        default) is accepted here. tensor_parallel_size, data_parallel_size,
        gpu_memory_utilization: vLLM's. warmup: run one short
        request now, so the first caller does not wait for vLLM's first-step set-up. Other
        keyword arguments go to vLLM's `AsyncEngineArgs` (e.g. max_model_len,
        pipeline_parallel_size, distributed_executor_backend="ray").
        """
        if not restrict_phase:
            raise ValueError("backend='vllm' samples with the phase restriction only (restrict_phase=True)")
        if decoder != "fast":
            raise ValueError(f"decoder={decoder!r} is an option of the engine backend; vLLM has its own")
        _require_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs

        path = resolve_checkpoint(model)
        config = RumikOSSConfig.from_file(path)
        mimi_device = auto_device(device)
        torch_dtype = auto_dtype(mimi_device, dtype)
        compile = torch.cuda.is_available() if compile is None else compile
        args = AsyncEngineArgs(
            model=str(path), skip_tokenizer_init=True, dtype=str(torch_dtype).removeprefix("torch."), seed=seed,
            tensor_parallel_size=tensor_parallel_size, data_parallel_size=data_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=not compile,
            logprobs_mode="processed_logits", generation_config="vllm", disable_log_stats=True, **engine_args,
        )
        engine_loop = LoopThread(lambda: _start_async_llm(args))
        try:
            codec = MimiCodec(load_codec(path, mimi_device), config.layout.num_quantizers)
            engine = cls(engine_loop, load_tokenizer(path), codec, config, path, torch_dtype, compile=compile)
            if warmup:
                engine.warmup()
            return engine
        except BaseException:
            engine_loop.close()
            raise

    @property
    def device(self) -> torch.device:
        """Where Mimi decodes (vLLM places the language model itself)."""
        return self.codec.device

    def warmup(self, *_, **__) -> float:
        """One short request, so the first caller does not pay vLLM's first-step set-up;
        returns the seconds it took (the engine backend's arguments are not needed here)."""
        start = time.perf_counter()
        self.generate_batch([WARMUP_REQUEST.with_(voice=self.voices[0])])
        return time.perf_counter() - start

    def close(self) -> None:
        """Shut vLLM down (also at interpreter exit)."""
        self.engine_loop.close()

    def num_unfinished_requests(self) -> int:
        """Requests vLLM is running or queueing now, from every caller of this engine.

        Read without a hop to the engine loop (the length of vLLM's table of open requests),
        so a server's event loop can ask at any time without waiting on vLLM's."""
        return self._llm().get_num_unfinished_requests()

    @property
    def max_num_seqs(self) -> int:
        """Requests vLLM decodes together at most (its scheduler's `max_num_seqs`)."""
        return int(self._llm().vllm_config.scheduler_config.max_num_seqs)

    @property
    def max_model_len(self) -> int:
        """Prompt plus generated tokens one vLLM request may hold."""
        return int(self._llm().model_config.max_model_len)

    def is_healthy(self) -> bool:
        """False once vLLM's engine core has died or this engine was closed."""
        llm = self.engine_loop.llm
        return llm is not None and not llm.errored

    def _llm(self):
        if self.engine_loop.llm is None:
            raise RuntimeError("this VLLMEngine was closed")
        return self.engine_loop.llm

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ one vLLM request per row

    def sampling_params(self, row: RowParams, stop_mode: str = "threshold", stream: bool = False):
        """vLLM SamplingParams for one row: temperature 1 (0 = greedy) and the row's real
        temperature in extra_args, because the logits processor divides by it itself."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from rumik_vllm.rules import RequestRules

        if stop_mode not in STOP_MODES:
            raise ValueError(f"stop_mode must be one of {STOP_MODES}")
        rules = RequestRules(row.temperature, row.min_new_tokens, stop_mode, row.seed)
        return SamplingParams(
            temperature=0.0 if row.temperature <= 0 else 1.0, top_k=max(row.top_k, 0), top_p=row.top_p,
            seed=row.seed, max_tokens=min(row.max_new_tokens, MAX_NEW_TOKENS_CAP),
            stop_token_ids=[self.layout.audio_end_token_id, self.stop_column], ignore_eos=True, logprobs=0,
            detokenize=False, skip_special_tokens=False, extra_args=rules.to_extra_args(),
            output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
        )

    def check_length(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        """PromptError when a chunk's prompt plus its token budget exceeds vLLM's max_model_len
        (vLLM would cut the row short or refuse it with a message about its own settings)."""
        need, limit = len(prompt_ids) + max_new_tokens, self.max_model_len
        if need > limit:
            raise PromptError(
                f"This text needs {need:,} positions (a {len(prompt_ids):,}-token prompt plus up to "
                f"{max_new_tokens:,} new tokens); vLLM holds {limit:,} per request (max_model_len). Shorten the "
                "sentence or the description, or lower max_seconds.")

    async def _deltas(self, prompt_ids: list[int], params) -> AsyncIterator[tuple[_Row, list[int]]]:
        """On the engine loop: (row so far, new ids) per vLLM output; the row is finished last."""
        self.check_length(prompt_ids, params.max_tokens)
        row = _Row()
        completion = None
        async for out in self._llm().generate({"prompt_token_ids": prompt_ids}, params, request_id=uuid.uuid4().hex):
            completion = out.outputs[0]
            new = row.extend(completion)
            if out.finished:
                row.finish(completion, self.layout, self.stop_column)
            yield row, new
        if completion is None or not row.reason:
            raise RuntimeError("vLLM returned no output for a request")

    async def _generate_rows(self, prompts: list[list[int]], rows: list[RowParams], stop_mode: str) -> list[_Row]:
        """All rows as concurrent vLLM requests; if one fails (or we are cancelled), the
        others are cancelled too, which aborts them in vLLM."""

        async def one(ids, row):
            last = None
            async for last, _ in self._deltas(ids, self.sampling_params(row, stop_mode)):
                pass
            return last

        tasks = [asyncio.ensure_future(one(ids, row)) for ids, row in zip(prompts, rows)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _batch_rows(self, requests: Sequence[SynthesisRequest], num_samples: int):
        prompts, rows, owners = [], [], []
        for i, req in enumerate(requests):
            ids, base = self.prompt_ids(req), resolve_seed(req.seed)
            for j in range(num_samples):
                prompts.append(ids)
                rows.append(self.row_params(req, base + j))
                owners.append(i)
        return prompts, rows, owners

    def generate_batch(self, requests: Sequence[SynthesisRequest], num_samples: int = 1,
                       stop_mode: str = "threshold", progress: Callable[[int], None] | None = None) -> Rollouts:
        """As `TTSEngine.generate_batch` (row order, seeds seed + j), sampled by vLLM.
        `progress` is accepted for the engine's API and not called: vLLM returns the batch
        whole (`synthesize_many` still reports each batch as it ends)."""
        return self.engine_loop.call(self._rollouts(requests, num_samples, stop_mode))

    async def agenerate_batch(self, requests: Sequence[SynthesisRequest], num_samples: int = 1,
                              stop_mode: str = "threshold") -> Rollouts:
        """`generate_batch` for coroutines on any event loop."""
        return await self.engine_loop.acall(self._rollouts(requests, num_samples, stop_mode))

    async def _rollouts(self, requests, num_samples: int, stop_mode: str) -> Rollouts:
        if stop_mode not in STOP_MODES:
            raise ValueError(f"stop_mode must be one of {STOP_MODES}")
        prompts, rows, owners = self._batch_rows(requests, num_samples)
        start = time.perf_counter()
        results = await self._generate_rows(prompts, rows, stop_mode)
        return build_rollouts(results, prompts, rows, owners, stop_mode, self.layout,
                              {"total_s": time.perf_counter() - start})

    def synthesize_many(self, requests: Sequence[SynthesisRequest], max_batch: int = VLLM_MAX_BATCH,
                        progress: Callable[[int, int], None] | None = None) -> list[Audio]:
        """As `TTSEngine.synthesize_many`; all chunks go to vLLM at once by default."""
        return super().synthesize_many(requests, max_batch=max_batch, progress=progress)

    async def asynthesize(self, req: SynthesisRequest) -> Audio:
        """`synthesize` for coroutines: chunks generated concurrently, decoded off the loop."""
        start = time.perf_counter()
        plan = self.plan(req)
        rollouts = await self.agenerate_batch(plan)
        waves = await asyncio.to_thread(self.decode, rollouts.codes, rollouts.num_frames)
        audio = Audio(crossfade_concat(waves, int(CROSSFADE_SECONDS * self.sample_rate)), self.sample_rate,
                      seed=plan[0].seed)
        audio.info = self._info(int(rollouts.lengths.sum()), audio.duration, time.perf_counter() - start,
                                len(plan), rollouts.finish_reasons)
        return audio

    # ------------------------------------------------------------------ streaming

    def stream(self, req: SynthesisRequest, first_frames: int = FIRST_STREAM_FRAMES,
               frames_per_chunk: int = STREAM_FRAMES, stats: dict | None = None) -> Iterator[np.ndarray]:
        """As `TTSEngine.stream`: pieces whose concatenation equals `synthesize(req)`."""
        yield from self.engine_loop.iterate(lambda: self.astream(req, first_frames, frames_per_chunk, stats))

    async def astream(self, req: SynthesisRequest, first_frames: int = FIRST_STREAM_FRAMES,
                      frames_per_chunk: int = STREAM_FRAMES, stats: dict | None = None) -> AsyncIterator[np.ndarray]:
        """Float32 audio pieces as tokens arrive, from any event loop (see `stream`).

        Mimi decodes in a worker thread, so neither the caller's loop nor vLLM's waits on it.
        Stopping the iteration early (`aclose`, a cancelled task) aborts the vLLM request at
        once: every inner generator is closed explicitly, not left to garbage collection.
        stats gets seed, tokens, chunks, finish_reasons (as `TTSEngine.stream`) and
        prompt_tokens, updated as the request runs.
        """
        plan = self.plan(req)
        stats = stats if stats is not None else {}
        stats.update(seed=plan[0].seed, tokens=0, chunks=len(plan), finish_reasons=[], prompt_tokens=0,
                     max_tokens=sum(self.token_budget(chunk) for chunk in plan))
        if len(plan) == 1:  # nothing to crossfade: no hold-back, lowest latency
            async with contextlib.aclosing(self._astream_chunk(plan[0], first_frames, frames_per_chunk,
                                                               stats)) as pieces:
                async for piece in pieces:
                    yield piece
            return
        joiner = CrossfadeStream(int(CROSSFADE_SECONDS * self.sample_rate))
        for chunk in plan:
            joiner.start_chunk()
            async with contextlib.aclosing(self._astream_chunk(chunk, first_frames, frames_per_chunk,
                                                               stats)) as pieces:
                async for piece in pieces:
                    out = joiner.push(piece)
                    if len(out):
                        yield out
            tail = joiner.end_chunk()
            if len(tail):
                yield tail
        rest = joiner.finish()
        if len(rest):
            yield rest

    async def aframes(self, req: SynthesisRequest, stats: dict) -> AsyncIterator[list[int]]:
        """One chunk request's frames (Q codes each) as vLLM generates them, on any loop."""
        params = self.sampling_params(self.row_params(req, req.seed), stream=True)
        prompt_ids = self.prompt_ids(req)
        stats["prompt_tokens"] = stats.get("prompt_tokens", 0) + len(prompt_ids)
        parser = FrameParser(self.layout)
        deltas = self.engine_loop.aiterate(lambda: self._deltas(prompt_ids, params))
        async with contextlib.aclosing(deltas):
            async for row, new in deltas:
                for token in new:
                    if token == self.stop_column:
                        continue
                    stats["tokens"] += 1
                    if (frame := parser.push(token)) is not None:
                        yield frame
                if row.reason:
                    stats["finish_reasons"].append(row.reason)

    async def _astream_chunk(self, req: SynthesisRequest, first_frames: int, frames_per_chunk: int,
                             stats: dict) -> AsyncIterator[np.ndarray]:
        codec_stream = self.codec.streaming_decoder(batch=1)
        pending: list[list[int]] = []
        want = first_frames
        async with contextlib.aclosing(self.aframes(req, stats)) as frames:
            async for frame in frames:
                pending.append(frame)
                if len(pending) >= want:
                    yield await asyncio.to_thread(self._decode_frames, codec_stream, pending)
                    pending, want = [], frames_per_chunk
        if pending:
            yield await asyncio.to_thread(self._decode_frames, codec_stream, pending)

    def __repr__(self) -> str:
        lm = self.config.lm
        return (f"VLLMEngine({self.checkpoint_dir}, layers={lm.num_hidden_layers}, hidden={lm.hidden_size}, "
                f"dtype={self.dtype}, compile={self.compile}, mimi on {self.device})")


def _start_async_llm(args):
    """AsyncLLM with the logits processor of the model runner this configuration uses."""
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.executor import Executor

    from rumik_vllm.logits import processor_for

    vllm_config = args.create_engine_config(UsageContext.ENGINE_CONTEXT)
    vllm_config.model_config.logits_processors = [processor_for(vllm_config.use_v2_model_runner)]
    return AsyncLLM(vllm_config=vllm_config, executor_class=Executor.get_class(vllm_config), log_stats=False,
                    log_requests=False)


def build_rollouts(results: list[_Row], prompts: list[list[int]], rows: list[RowParams], owners: list[int],
                   stop_mode: str, layout: TokenLayout, timings: dict) -> Rollouts:
    """`Rollouts` exactly as `BatchDecoder.rollouts()` lays them out, from vLLM's rows.

    The stop head was checked at every boundary t = kQ with max(min_new_tokens, Q) <= t up
    to the row's end: the stop position (stop head), the `</audio>` position, or the last
    generated position (max_new_tokens). vLLM reports only the stopping decision's log-prob.
    """
    batch, q = len(results), layout.num_quantizers
    width = max((len(r.tokens) for r in results), default=0)
    token_ids = torch.full((batch, width), -1, dtype=torch.long)
    log_probs = torch.zeros(batch, width)
    slots = width // q + 1
    stop_mask = torch.zeros(batch, slots, dtype=torch.bool)
    stop_decisions = torch.zeros(batch, slots, dtype=torch.bool)
    stop_log_probs = torch.zeros(batch, slots)
    for i, (res, row) in enumerate(zip(results, rows)):
        n = len(res.tokens)
        token_ids[i, :n] = torch.tensor(res.tokens, dtype=torch.long)
        log_probs[i, :n] = torch.tensor(res.log_probs, dtype=torch.float32)
        last_check = n if res.reason == FINISH_STOP_HEAD else n - 1
        floor = max(row.min_new_tokens, q)
        for k in range(1, last_check // q + 1):
            if k * q >= floor:
                stop_mask[i, k], stop_log_probs[i, k] = True, math.nan
        if res.reason == FINISH_STOP_HEAD:
            stop_decisions[i, n // q], stop_log_probs[i, n // q] = True, res.stop_log_prob
    parsed = [torch.from_numpy(layout.parse(r.tokens)[0]) for r in results]
    num_frames = torch.tensor([c.shape[-1] for c in parsed], dtype=torch.long)
    codes = torch.zeros(batch, q, int(num_frames.max()) if batch else 0, dtype=torch.long)
    for i, c in enumerate(parsed):
        codes[i, :, : c.shape[-1]] = c
    return Rollouts(
        token_ids=token_ids, token_mask=token_ids >= 0, log_probs=log_probs, stop_mask=stop_mask,
        stop_decisions=stop_decisions, stop_log_probs=stop_log_probs, codes=codes, num_frames=num_frames,
        lengths=(token_ids >= 0).sum(1), finish_reasons=[r.reason for r in results], prompt_ids=prompts,
        request_index=owners, seeds=[r.seed for r in rows], params=list(rows), restrict_phase=True,
        stop_mode=stop_mode, timings=timings,
    )
