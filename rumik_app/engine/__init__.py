"""Engines: a loaded checkpoint that synthesises, streams and batches (docs/ARCHITECTURE.md §5, §12).

    from rumik_app.engine.loading import load_engine
    engine = load_engine("rumik-ai/rumik-oss-1")                 # backend="engine": in-process
    engine = load_engine("rumik-ai/rumik-oss-1", backend="vllm")  # the same API on vLLM's engine

Modules: `base` (what both engines share: planning, prompts, rows, batches), `stream` (the
one stream assembler: tokens in, crossfaded audio pieces out), `local` (`TTSEngine`, the
in-process engine on the fast decode path), `vllm` (`VLLMEngine`), `vllm_sync` (pushing a
trainer's weights into vLLM; starting vLLM from any `__main__`), `async_bridge` (vLLM's event
loop in a thread), `loading` (`load_engine`, the only place that picks a backend).
"""
