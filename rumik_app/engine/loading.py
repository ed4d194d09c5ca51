"""`load_engine`: the one place that picks a backend (docs/ARCHITECTURE.md §12).

    from rumik_app.engine.loading import load_engine
    engine = load_engine("rumik-ai/rumik-oss-1")                          # TTSEngine, in-process
    engine = load_engine("tiny", backend="vllm", tensor_parallel_size=1)  # VLLMEngine (.venv-vllm)
    engine = load_engine(args.model, **engine_options(args))              # from the shared CLI flags

Both engines are a `BaseEngine` with the same API (synthesize, stream, generate_batch, plan,
...); each builds itself in its own `from_pretrained`. vLLM is imported only when asked for.
"""

from __future__ import annotations

from rumik_app.cli_args import BACKENDS, VLLM_OPTIONS
from rumik_app.engine.base import BaseEngine
from rumik_app.request import DEFAULT_MODEL


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}. Choose one of: {', '.join(BACKENDS)}.")
    return backend


def load_engine(model: str = DEFAULT_MODEL, backend: str = "engine", **options) -> BaseEngine:
    """Load `model` (a folder, a hub id or "tiny") on `backend`; never runs remote code.

    options: device, dtype, compile, quantize (int8/int4/nf4 on "engine", fp8 on "vllm";
    `rumik_app.cli_args.check_quantize`), and for "engine" restrict_phase, decoder
    (`TTSEngine.from_pretrained`); for "vllm" also tensor_parallel_size, data_parallel_size,
    gpu_memory_utilization, max_num_seqs and other vLLM engine arguments
    (`VLLMEngine.from_pretrained`). Raises CheckpointError with the fix in the message, and
    TypeError for vLLM's options on the engine backend.
    """
    if check_backend(backend) == "vllm":
        from rumik_app.engine.vllm import VLLMEngine

        return VLLMEngine.from_pretrained(model, **options)
    given = sorted(set(options) & set(VLLM_OPTIONS))
    if given:
        raise TypeError(f"{given} apply to backend='vllm' only")
    from rumik_app.engine.local import TTSEngine

    return TTSEngine.from_pretrained(model, **options)
