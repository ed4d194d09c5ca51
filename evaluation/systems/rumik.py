"""`RumikSystem`: rumik-oss-1 through the one inference core (`rumik_app.TTSEngine`).

    system = RumikSystem()                       # the hub checkpoint rumik-ai/rumik-oss-1
    system = RumikSystem("/ckpt/sft-step-2000")  # a local checkpoint folder (docs/ARCHITECTURE.md §2 format)
    system = RumikSystem("tiny")                 # the random tiny checkpoint used by tests
    audio = system.synthesize(SynthesisRequest("नमस्ते <laugh> दोस्तों", seed=7))

The engine (torch, transformers, the codec) is loaded once, on the first `synthesize` (or
an explicit `load()`), so building the system is cheap.

Not a CLI; tested by tests/evaluation/test_systems.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaluation.systems.base import SynthesisError, Synthesizer, conform
from rumik_app.audio import Audio
from rumik_app.request import DEFAULT_MODEL, TINY_MODEL, SynthesisRequest


# How evaluation.run names a checkpoint (load_system specs), for the fixes of a missing model.
SYSTEM_FLAGS = {"flag": "--system rumik:", "tiny": "--system tiny"}


class RumikSystem(Synthesizer):
    """rumik-oss-1 (or any checkpoint in its format) via `TTSEngine.from_pretrained`."""

    def __init__(self, model: str = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None,
                 compile: bool | None = None, backend_args: dict | None = None) -> None:
        self.model = str(model)
        self.device = device
        self.dtype = dtype
        self.compile = compile  # None: on for CUDA, off for CPU (TTSEngine.from_pretrained)
        # TTSEngine.from_pretrained's backend="engine" | "vllm" and vLLM's options
        self.backend_args = dict(backend_args or {})
        self._engine = None
        self.name = "rumik" if self.model == DEFAULT_MODEL else f"rumik:{self.model}"
        if self.model == DEFAULT_MODEL:
            self.label = "rumik-oss-1"
        elif self.model == TINY_MODEL:
            self.label = "rumik-oss-1 architecture, tiny random checkpoint (tests only)"
        else:
            self.label = f"rumik-oss-1 ({self.model})"

    def load(self):
        """Load the engine once (returns it); loader errors become SynthesisError."""
        if self._engine is None:
            from rumik_app import TTSEngine

            from rumik_app.checkpoint.load import ModelUnavailable

            try:
                self._engine = TTSEngine.from_pretrained(self.model, device=self.device, dtype=self.dtype,
                                                         compile=self.compile, **self.backend_args)
            except ModelUnavailable as exc:  # the fixes in the runner's terms (--system), not --model
                raise SynthesisError(exc.with_flags(**SYSTEM_FLAGS)) from exc
            except (OSError, ValueError, RuntimeError) as exc:
                raise SynthesisError(f"Could not load the rumik-oss-1 checkpoint {self.model!r}: {exc}") from exc
        return self._engine

    @property
    def engine(self):
        return self.load()

    def _synthesize(self, request: SynthesisRequest, *, clip_id: str | None, run: int | None) -> Audio:
        return self.engine.synthesize(request)

    def synthesize_many(self, requests: Sequence[SynthesisRequest], clip_ids: Sequence[str | None] | None = None,
                        run: int | None = None) -> list[Audio | Exception]:
        """Batched through `TTSEngine.synthesize_many`; if the batch fails (e.g. one invalid
        prompt), each request is retried alone so only the bad one carries the error."""
        engine = self.engine
        try:
            return [conform(a) for a in engine.synthesize_many(list(requests))]
        except Exception:  # noqa: BLE001 - fall back to one by one to isolate the failure
            return super().synthesize_many(requests, clip_ids, run)

    def request_settings(self, request: SynthesisRequest) -> dict:
        sampling = ("temperature", "top_k", "top_p", "min_new_tokens", "max_new_tokens")
        return {**super().request_settings(request), **{k: getattr(request, k) for k in sampling}}

    def settings(self) -> dict:
        return {**super().settings(), "model": self.model, "device": self.device, "dtype": self.dtype,
                "backend": self.backend_args.get("backend", "engine")}
