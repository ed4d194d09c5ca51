"""Engines: a loaded checkpoint that synthesises, streams and batches (docs/ARCHITECTURE.md §5, §12).

    from rumik_app.engine.loading import load_engine
    engine = load_engine("rumik-ai/rumik-oss-1")                 # backend="engine": in-process
    engine = load_engine("rumik-ai/rumik-oss-1", backend="vllm")  # the same API on vLLM's engine (rumik_vllm)

Modules: `base` (what every engine shares: planning, prompts, rows, batches), `stream` (the
one stream assembler: tokens in, crossfaded audio pieces out), `local` (`TTSEngine`, the
in-process engine on the fast decode path), `scheduler` (continuous batching across
requests over the in-process engine: what the speech server serves), `serving` (what a
serving engine raises and reports: admission errors, stats; light), `loading` (`load_engine`,
the only place that picks a backend; other backends register an entry point, so the vLLM
engine lives in `rumik_vllm`).
"""
