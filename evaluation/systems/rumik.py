"""`RumikSystem`: rumik-oss-1 through the one inference core (`rumik_app.engine.loading.load_engine`).

    system = RumikSystem()                       # the hub checkpoint rumik-ai/rumik-oss-1
    system = RumikSystem("/ckpt/sft-step-2000")  # a local checkpoint folder (docs/ARCHITECTURE.md §2 format)
    system = RumikSystem("tiny", device="cpu")   # the random tiny checkpoint used by tests
    system = RumikSystem(path, backend="vllm")   # any load_engine option (rumik_app.cli_args flags)
    audio = system.synthesize(SynthesisRequest("नमस्ते <laugh> दोस्तों", seed=7))

The engine (torch, transformers, the codec) is loaded once, on the first `synthesize` (or
an explicit `load()`), so building the system is cheap.

Not a CLI; tested by tests/evaluation/test_systems.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import fields

from evaluation.systems.base import SynthesisError, Synthesizer, conform
from rumik_app.audio import SAMPLE_RATE, Audio
from rumik_app.request import DEFAULT_MODEL, TINY_MODEL, SamplingSettings, SynthesisRequest

# How evaluation.run names a checkpoint (load_system specs), for the fixes of a missing model.
SYSTEM_FLAGS = {"flag": "--system rumik:", "tiny": "--system tiny"}


class RumikSystem(Synthesizer):
    """rumik-oss-1 (or any checkpoint in its format) via `load_engine`.

    engine_options: `load_engine`'s keywords (backend, device, dtype, compile, vLLM's options;
    `rumik_app.cli_args.engine_kwargs` builds them from the shared flags).
    """

    def __init__(self, model: str = DEFAULT_MODEL, **engine_options) -> None:
        self.model = str(model)
        self.engine_options = {k: v for k, v in engine_options.items() if v is not None}
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
            from rumik_app.checkpoint.load import ModelUnavailable
            from rumik_app.engine.loading import load_engine

            try:
                self._engine = load_engine(self.model, **self.engine_options)
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
                        run: int | None = None, native: bool = False) -> list[Audio | Exception]:
        """Batched through the engine's `synthesize_many`; if the batch fails (e.g. one invalid
        prompt), each request is retried alone so only the bad one carries the error."""
        engine = self.engine
        try:
            return [conform(a, None if native else SAMPLE_RATE) for a in engine.synthesize_many(list(requests))]
        except Exception:  # noqa: BLE001 - fall back to one by one to isolate the failure
            return super().synthesize_many(requests, clip_ids, run, native)

    def fingerprint(self) -> str:
        """The checkpoint's identity (config.json's bytes; every weight file's name, size and
        modification time), read without loading it: a retrained or replaced checkpoint gets new
        voice references, an unchanged one keeps its cached ones."""
        from rumik_app.checkpoint.load import ModelUnavailable, resolve_checkpoint

        try:
            folder = resolve_checkpoint(self.model)
        except ModelUnavailable as exc:
            raise SynthesisError(exc.with_flags(**SYSTEM_FLAGS)) from exc
        h = hashlib.sha256((folder / "config.json").read_bytes())
        for path in sorted(folder.rglob("*.safetensors")):
            stat = path.stat()
            h.update(f"|{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        return f"rumik: {h.hexdigest()}"

    def request_settings(self, request: SynthesisRequest) -> dict:
        """The base fields and every sampling setting the request declares (`SamplingSettings`)."""
        sampling = {spec.name: getattr(request, spec.name) for spec in fields(SamplingSettings)}
        return {**super().request_settings(request), **sampling}

    def settings(self) -> dict:
        opts = self.engine_options
        return {**super().settings(), "model": self.model, "device": opts.get("device"), "dtype": opts.get("dtype"),
                "backend": opts.get("backend", "engine")}
