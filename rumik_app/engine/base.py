"""What every engine shares: prompts, rows, planning long text, batching, stats (docs/ARCHITECTURE.md §5).

    engine = load_engine("tiny")                       # a TTSEngine or a VLLMEngine: both are a BaseEngine
    plan = engine.plan(req)                            # chunk requests, seeds seed, seed+1, ...
    prompts, rows, owners = engine.batch_rows(plan, num_samples=4)
    audio = engine.synthesize(req)                     # chunks batched, decoded, crossfaded

A subclass generates tokens (`generate_batch`, `stream`) and says where Mimi runs (`device`);
everything before (validation, prompt ids, sampling rows, chunking) and after (decoding
rows, crossfading, the watermark, the info dict) is here, so both backends plan and join audio
the same way.

The watermark (docs/watermark.md): `engine.watermark` is "library" (the default: library
voices' audio carries PerthNet's mark), "all" or "off". Every audio path goes through one of
two places here: `joined_audio` (synthesize, synthesize_many, scripts, vLLM's asynthesize) marks
the whole clip, `assembler` (every stream: TTSEngine.stream, VLLMEngine.astream, the server's
scheduler) gives the stream assembler a `StreamWatermarker`, equal to it piece by piece. `plan`
refuses a request that must be marked when the weights cannot load (WatermarkUnavailable,
naming the install) before any compute; built-in voices under "library" need nothing and their
audio is untouched, bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from rumik_app.align import AlignerSet
from rumik_app.align.timeline import time_words
from rumik_app.audio import Audio, crossfade_concat
from rumik_app.decode.rollouts import Rollouts
from rumik_app.decode.sampling import RowParams
from rumik_app.engine.planning import plan_request
from rumik_app.engine.stream import (
    CROSSFADE_SECONDS,
    FIRST_PIECE_FRAMES,
    PIECE_FRAMES,
    StreamAssembler,
    chunk_seconds,
)
from rumik_app.errors import PromptError
from rumik_app.model.config import RumikOSSConfig
from rumik_app.prompt import normalize_voice
from rumik_app.request import LIBRARY_LIMITS, RequestLimits, SynthesisRequest, resolve_seed, tokens_for_seconds
from rumik_app.settings import derive
from rumik_app.watermark import DEFAULT_POLICY, check_policy, marks
from rumik_app.watermark.marker import Watermarker, shared_watermarker
from rumik_app.watermark.stream import StreamWatermarker

# progress(tokens done, token budget), called once per frame by synthesize / synthesize_many.
Progress = Callable[[int, int], None]


class BaseEngine:
    """One loaded checkpoint's tokenizer, codec and config, and what both backends do with them.

    Subclasses set `synth_batch_size` (chunks `synthesize_many` hands over at once) and
    implement `generate_batch`, `stream` and `device`.
    """

    backend = ""  # "engine" or "vllm" (rumik_app.cli_args.BACKENDS)
    synth_batch_size = 8
    library = None  # a VoiceLibrary whose voices are served besides the checkpoint's (use_voices)
    _watermark = DEFAULT_POLICY
    _aligners: AlignerSet | None = None

    def __init__(self, tokenizer, codec, config: RumikOSSConfig, checkpoint_dir: str | Path):
        self.tokenizer = tokenizer
        self.codec = codec
        self.config = config
        self.layout = config.layout
        self.checkpoint_dir = Path(checkpoint_dir)
        self.bos_id = self._bos_id()
        self.pad_id = config.lm.pad_token_id if config.lm.pad_token_id is not None else self.bos_id

    def _bos_id(self) -> int:
        bos = self.tokenizer.convert_tokens_to_ids("<BOS_TOKEN>")
        if bos is None or bos == self.tokenizer.unk_token_id:
            bos = self.config.lm.bos_token_id
        return int(bos)

    # ------------------------------------------------------------------ what a subclass provides

    @property
    def device(self) -> torch.device:
        raise NotImplementedError

    def generate_batch(self, requests: Sequence[SynthesisRequest], num_samples: int = 1,
                       stop_mode: str = "threshold", progress: Callable[[int], None] | None = None) -> Rollouts:
        """Sample `num_samples` completions per request in one batch (the GRPO interface).

        Row order: request 0 samples 0..n-1, request 1 samples 0..n-1, ... (`batch_rows`).
        Texts are not chunked here. stop_mode: "threshold" (inference) or "sample" (RL).
        """
        raise NotImplementedError

    def stream(self, req: SynthesisRequest, first_frames: int = FIRST_PIECE_FRAMES,
               frames_per_piece: int = PIECE_FRAMES, stats: dict | None = None) -> Iterator[np.ndarray]:
        """Float32 audio pieces as they are generated (see `rumik_app.engine.stream`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared

    def use_voices(self, library) -> None:
        """Serve `library`'s voices (rumik_app.voices.library.VoiceLibrary) besides the
        checkpoint's, each row with its voice's LoRA adapter; None: the checkpoint's only."""
        self.library = library

    @property
    def voices(self) -> tuple[str, ...]:
        """The checkpoint's voices, then the library's (as it is now: it reloads when it changes)."""
        return self.config.speakers + (self.library.names() if self.library is not None else ())

    def adapter_for(self, voice: str) -> str | None:
        """The library voice `voice` names (case-insensitive), or None for any other voice."""
        if self.library is None or not isinstance(voice, str):
            return None
        wanted = voice.strip().lower()
        return next((name for name in self.library.names() if name.lower() == wanted), None)

    @property
    def watermark(self) -> str:
        """Whose audio carries the watermark: "library" (library voices', the default), "all" or "off"."""
        return self._watermark

    @watermark.setter
    def watermark(self, policy: str) -> None:
        self._watermark = check_policy(policy)

    def watermarker_for(self, req: SynthesisRequest) -> Watermarker | None:
        """The Watermarker `req`'s audio goes through under `watermark` (loaded once per process and
        device), or None; WatermarkUnavailable, naming the install, when it is needed and cannot load.
        A library voice is any voice but the checkpoint's own, so one deleted from the library while
        its request runs is still marked."""
        builtin = str(req.voice).strip().lower() in {name.lower() for name in self.config.speakers}
        if not marks(self.watermark, library_voice=not builtin):
            return None
        return shared_watermarker(str(self.device))

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

    def row_params(self, req: SynthesisRequest, seed: int | None = None) -> RowParams:
        """The sampling row of `req` (its seed unless `seed` is given), with its library voice's
        adapter when it names one."""
        row = RowParams.of(req, req.seed if seed is None else seed)
        adapter = self.adapter_for(req.voice)
        if adapter is None and self.library is not None and str(req.voice).strip().lower() not in {
                voice.lower() for voice in self.config.speakers}:  # deleted since its prompt was built
            raise PromptError(f"Unknown voice {req.voice!r}: it left the voice library. Choose one of: "
                              f"{', '.join(self.voices)}.", field="voice")
        return derive(row, RowParams, adapter=adapter) if adapter else row

    def batch_rows(self, requests: Sequence[SynthesisRequest],
                   num_samples: int = 1) -> tuple[list[list[int]], list[RowParams], list[int]]:
        """(prompt ids, rows, owning request) for every sample: sample j of a request uses seed
        (the request's, or a random one) + j."""
        prompts = []
        rows = []
        owners = []
        for owner, req in enumerate(requests):
            ids = self.prompt_ids(req)
            base = resolve_seed(req.seed)
            for sample in range(num_samples):
                prompts.append(ids)
                rows.append(self.row_params(req, base + sample))
                owners.append(owner)
        return prompts, rows, owners

    def max_new_tokens_for(self, seconds: float) -> int:
        """Token budget for at most `seconds` of audio, in whole frames (PromptError outside 0-30 s)."""
        return tokens_for_seconds(seconds, self.layout.frame_rate_hz, self.layout.num_quantizers)

    def plan(self, req: SynthesisRequest, limits: RequestLimits = LIBRARY_LIMITS) -> list[SynthesisRequest]:
        """Split a request into chunk requests of at most ~16 s (25 s with a larger budget)
        of expected speech (`rumik_app.engine.planning.plan_request`, docs/ARCHITECTURE.md §5).
        `max_new_tokens` caps each chunk; chunk i uses seed + i; limits: a front end's bounds.
        PromptError for an unknown voice, then WatermarkUnavailable when `req` must be watermarked
        and cannot be (`watermarker_for`): every path plans first, so it is refused before any compute."""
        chunks = plan_request(req, self.layout, limits)
        normalize_voice(req.voice, self.voices)  # an unknown voice is refused as such, not for the watermark
        self.watermarker_for(req)
        return chunks

    def assembler(self, plan: Sequence[SynthesisRequest], stats: dict | None = None,
                  first_frames: int = FIRST_PIECE_FRAMES, frames_per_piece: int = PIECE_FRAMES) -> StreamAssembler:
        """The stream assembler for one planned request (fills `stats`), watermarking its pieces
        when `watermark` asks it for this voice."""
        marker = self.watermarker_for(plan[0])
        watermark = StreamWatermarker(marker, self.sample_rate) if marker is not None else None
        return StreamAssembler(self.codec, self.layout, plan, stats, first_frames, frames_per_piece, watermark)

    def decode(self, codes: torch.Tensor, num_frames: torch.Tensor | Sequence[int]) -> list[np.ndarray]:
        """codes: [B, Q, T] -> one float32 waveform per row, cut to its own frame count."""
        audio = self.codec.decode(codes).cpu().numpy()
        return [audio[row, : int(frames) * self.codec.frame_size].astype(np.float32)
                for row, frames in enumerate(num_frames)]

    def synthesize(self, req: SynthesisRequest, progress: Progress | None = None, timestamps: bool = False) -> Audio:
        """Synthesise any length of text; long text is chunked and crossfaded.

        progress: called once per frame as `progress(tokens_done, token_budget)` (see
        `synthesize_many`); 100 tokens = 1 s of audio. timestamps: also align the words
        (`Audio.timings`, docs/ARCHITECTURE.md §16).
        """
        return self.synthesize_many([req], progress=progress, timestamps=timestamps)[0]

    @property
    def aligners(self) -> AlignerSet:
        """The word aligners `timestamps=True` uses: `use_aligners`'s, else the default set, loaded once."""
        if self._aligners is None:
            self._aligners = AlignerSet.load()
        return self._aligners

    def use_aligners(self, aligners: AlignerSet | Sequence[str]) -> None:
        """Align with these aligners, or specs (`rumik_app.align.load_aligner`: AlignmentError when one cannot load)."""
        self._aligners = aligners if isinstance(aligners, AlignerSet) else AlignerSet.load(aligners, strict=True)

    def synthesize_many(self, requests: Sequence[SynthesisRequest], batch_size: int | None = None,
                        progress: Progress | None = None, timestamps: bool = False) -> list[Audio]:
        """Synthesise several requests, batching their chunks `batch_size` at a time
        (default `synth_batch_size`: 8 in-process, 64 on vLLM, whose scheduler decides the rest).

        progress: called once per frame with (tokens done, token budget): the budget is the
        sum over batches of the largest `max_new_tokens` in each, the most the call can
        generate; a batch that stops early jumps `tokens done` to its budget.
        timestamps: each `Audio.timings` holds its words' times (an aligner failing is said in
        `timings.missing`; the audio is returned all the same).
        """
        start = time.perf_counter()
        size = batch_size or self.synth_batch_size
        plans = [self.plan(req) for req in requests]
        flat = [(owner, chunk) for owner, plan in enumerate(plans) for chunk in plan]  # (request, chunk)
        waves: list[list[np.ndarray]] = [[] for _ in requests]
        tokens = [0] * len(requests)
        finish: list[list[str]] = [[] for _ in requests]
        batches = [flat[first : first + size] for first in range(0, len(flat), size)]
        budgets = [max(chunk.max_new_tokens for _, chunk in batch) for batch in batches]
        for index, batch in enumerate(batches):
            done = sum(budgets[:index])
            report = None if progress is None else (lambda t, done=done: progress(done + t, sum(budgets)))
            rollouts = self.generate_batch([chunk for _, chunk in batch], progress=report)
            if progress is not None:
                progress(done + budgets[index], sum(budgets))
            for (owner, _), wave, length, reason in zip(batch, self.decode(rollouts.codes, rollouts.num_frames),
                                                         rollouts.lengths.tolist(), rollouts.finish_reasons,
                                                         strict=True):
                waves[owner].append(wave)
                tokens[owner] += length
                finish[owner].append(reason)
        elapsed = time.perf_counter() - start
        audios = [self.joined_audio(waves[owner], plan, tokens[owner], elapsed, finish[owner])
                  for owner, plan in enumerate(plans)]
        for req, plan, audio in zip(requests, plans, audios, strict=True) if timestamps else ():
            audio.timings = time_words(req, [chunk.text for chunk in plan], audio.samples, audio.sample_rate,
                                       audio.info["chunk_seconds"], self.aligners)
        return audios

    def joined_audio(self, waves: list[np.ndarray], plan: Sequence[SynthesisRequest], tokens: int, elapsed: float,
                     finish: list[str]) -> Audio:
        """One request's chunks crossfaded into an `Audio` with its info dict, watermarked when
        `watermark` asks it for this voice (info["watermarked"])."""
        fade = int(CROSSFADE_SECONDS * self.sample_rate)
        samples = crossfade_concat(waves, fade)
        marker = self.watermarker_for(plan[0])
        if marker is not None and samples.size:
            samples = marker.apply(samples, self.sample_rate)
        audio = Audio(samples, self.sample_rate, seed=plan[0].seed)
        audio.info = {"tokens": tokens, "chunks": len(plan), "finish_reasons": list(finish), "seconds": elapsed,
                      "watermarked": marker is not None,
                      # where each planned chunk lies in the audio, in seconds (long-form speaker drift)
                      "chunk_seconds": chunk_seconds([len(w) for w in waves], self.sample_rate),
                      "tokens_per_second": tokens / elapsed if elapsed else 0.0,
                      # RTF = compute s per audio s (below 1: faster than real time); x_real_time is its inverse
                      "real_time_factor": elapsed / audio.duration if audio.duration else 0.0,
                      "x_real_time": audio.duration / elapsed if elapsed else 0.0}
        return audio
