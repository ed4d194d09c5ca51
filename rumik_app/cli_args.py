"""The engine-load flags, defined once for every entry point that loads the model.

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)                  # --device --dtype --compile --quantize --backend + vLLM's
    args = parser.parse_args()
    engine = load_engine(args.model, **engine_options(parser, args))   # rumik_app.engine.loading

`backend` "engine" is the in-process engine (`rumik_app.engine.local`); "vllm" the same API
on vLLM (`rumik_vllm.engine`, found through an entry point; installed with the vllm extra, `./setup.sh --dev`).
`python -m rumik_app.synthesize`, `.serve`, `app.py`, `evaluation.run`, the campaign CLI and
the benchmarks use these flags; an entry point with other defaults (a GPU benchmark) sets
them with `parser.set_defaults`. Torch-free, so CLIs parse their arguments before loading
anything heavy.

`--voices DIR` (`add_voices_argument`: the speech server, the CLI synthesiser and the app) is a
voice library served besides the checkpoint's voices (`rumik_app.voices.library.use_library`).
It comes with `--watermark library|all|off` (`add_watermark_argument`; also the benchmark runner):
whose audio carries the PerthNet watermark, `load_engine(watermark=...)`, `BaseEngine.watermark`
(docs/watermark.md); `engine_kwargs` passes it on with the load options when given.

`--quantize` (`quantize=` of `load_engine`) has its one home here: `QUANTIZE_MODES`, where
each runs (`QUANTIZE_SUPPORT`) and `check_quantize`, the one message for a mode that a
backend or device lacks; `rumik_app.model.quantize` does the work (docs/ARCHITECTURE.md §2).
"""

from __future__ import annotations

import argparse
import os

from rumik_app.errors import CheckpointError
from rumik_app.watermark import DEFAULT_POLICY, POLICIES

BACKENDS = ("engine", "vllm")
# vLLM's own engine options, as `load_engine(backend="vllm")` keywords and --kebab-case flags.
VLLM_OPTIONS = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                "distributed_executor_backend", "gpu_memory_utilization", "kv_cache_memory_bytes")
LOAD_OPTIONS = ("device", "dtype", "compile", "quantize", "watermark")
# Weight quantisation at load: int8 weight-only (CPU: aten's int8 GEMV; CUDA: torchao), int4
# (torchao, CUDA), nf4 (bitsandbytes, CUDA); fp8 is vLLM's own online quantisation.
QUANTIZE_MODES = ("int8", "int4", "nf4", "fp8")
QUANTIZE_SUPPORT = {("engine", "cpu"): ("int8",), ("engine", "cuda"): ("int8", "int4", "nf4"),
                    ("vllm", "cuda"): ("fp8",), ("vllm", "cpu"): ()}
QUANTIZE_HELP = ("quantise the body's weights at load: int8 (CPU and CUDA), int4 / nf4 (CUDA), fp8 (--backend "
                 "vllm, CUDA); the stop head, norms and embedding stay unquantised (default: none)")


class QuantizeError(CheckpointError, ValueError):
    """A `quantize` mode this backend or device does not have; the message names one that works."""


def positive_bytes(text: str) -> int:
    """argparse type: a whole number of bytes above zero (2**27, not 128MiB: vLLM's unit)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"wants a whole number of bytes above zero, e.g. 134217728; got {text!r}")
    return value


def check_quantize(quantize: str | None, backend: str = "engine", device_type: str = "cpu") -> str | None:
    """`quantize` if `backend` on `device_type` ("cpu", "cuda", ...) has it, else QuantizeError
    naming what works there. None (no quantisation) always passes."""
    if quantize is None:
        return None
    if quantize not in QUANTIZE_MODES:
        raise QuantizeError(f"Unknown quantize mode {quantize!r}; use one of: {', '.join(QUANTIZE_MODES)}.")
    place = "cuda" if device_type == "cuda" else "cpu"
    if quantize in QUANTIZE_SUPPORT[backend, place]:
        return quantize
    raise QuantizeError(_unsupported(quantize, backend, place))


def _unsupported(quantize: str, backend: str, place: str) -> str:
    """The one message for `quantize` missing on (backend, place), with the fix."""
    if backend == "vllm":
        why = {"int8": "vLLM 0.32 quantises dense layers at load only to fp8 (its int8_per_channel_weight_only "
                       "covers MoE experts, not this model's linears)",
               "int4": "vLLM runs int4 only from a checkpoint quantised beforehand (GPTQ/AWQ)",
               "nf4": "vLLM 0.32 has no bitsandbytes quantisation",
               "fp8": "vLLM's fp8 needs a CUDA GPU"}[quantize]
        return (f"quantize={quantize!r} is not available on the vLLM backend: {why}. Use quantize='fp8' "
                "(--quantize fp8) with vLLM on a GPU, or the engine backend: --backend engine --quantize int8 "
                "(CPU or CUDA), int4 or nf4 (CUDA).")
    if quantize == "fp8":
        return ("quantize='fp8' is vLLM's own quantisation (--backend vllm --quantize fp8, on a GPU); the engine "
                "backend quantises to int8 (CPU and CUDA), int4 or nf4 (CUDA).")
    return (f"quantize={quantize!r} needs a CUDA GPU; on CPU use quantize='int8' (--quantize int8), which "
            "stores the body's weights in a quarter of float32's bytes.")


def add_engine_arguments(parser: argparse.ArgumentParser, backend: bool = True) -> None:
    """--device, --dtype, --compile/--no-compile, --quantize, and (backend=True) --backend with vLLM's flags."""
    group = parser.add_argument_group("model loading")
    group.add_argument("--device", default=None, help="cuda | cpu | cuda:1 ... (default: CUDA if available)")
    group.add_argument("--dtype", default=None, help="bf16 | fp16 | fp32 (default: bf16 on CUDA and on CPUs with "
                                                     "native bf16, AVX512-BF16 or AMX; fp32 on other CPUs)")
    group.add_argument("--quantize", choices=QUANTIZE_MODES, default=None, help=QUANTIZE_HELP)
    group.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                       help="compile the decode step at load (CUDA graphs on CUDA; default: on for CUDA, off for "
                            "CPU); vllm: torch.compile + CUDA graphs, --no-compile = vLLM's enforce_eager")
    if not backend:
        return
    group.add_argument("--backend", choices=BACKENDS, default="engine",
                       help="engine: in-process (default); vllm: vLLM's engine (continuous batching, several "
                            "GPUs; needs vLLM: pip install -e .[vllm])")
    group.add_argument("--tensor-parallel-size", type=int, default=None,
                       help="vllm: GPUs that split each layer (default 1)")
    group.add_argument("--data-parallel-size", type=int, default=None,
                       help="vllm: model replicas (default 1)")
    group.add_argument("--pipeline-parallel-size", type=int, default=None,
                       help="vllm: stages the layers are split into, e.g. one per node (default 1)")
    group.add_argument("--distributed-executor-backend", choices=("mp", "ray"), default=None,
                       help="vllm: mp = processes on this node (default); ray = a Ray cluster, for several nodes")
    group.add_argument("--gpu-memory-utilization", type=float, default=None,
                       help="vllm: share of each GPU's memory vLLM may take (default 0.8; Mimi needs the rest)")
    group.add_argument("--kv-cache-memory-bytes", type=positive_bytes, default=None, metavar="BYTES",
                       help="vllm: the KV cache's size in bytes, instead of --gpu-memory-utilization's share "
                            "(on a CPU, instead of VLLM_CPU_KVCACHE_SPACE's whole GiB)")


VOICES_HELP = ("a voice library folder (created if missing): its voice packages are served besides the "
               "checkpoint's voices, reloaded when it changes; packages made on another checkpoint are skipped "
               "with a warning (docs/voices.md)")


# vLLM's multi-LoRA when --voices is given: adapters on the device at once, and the highest rank it
# takes (vLLM allocates its slots at that rank, so the engine's own bank default, "the library's
# highest", cannot apply: vLLM starts before the library is read).
VLLM_MAX_LORAS = 16
VLLM_MAX_LORA_RANK = 64


WATERMARK_HELP = (f"whose audio carries the inaudible PerthNet watermark (docs/watermark.md): library = library "
                  f"voices' (default: {DEFAULT_POLICY}), all = every voice's, off = none")


def add_watermark_argument(parser: argparse.ArgumentParser) -> None:
    """--watermark {library,all,off}, the one declaration of the watermark policy flag (None when not
    given: the engine's default)."""
    parser.add_argument("--watermark", choices=POLICIES, default=None, help=WATERMARK_HELP)


def add_voices_argument(parser: argparse.ArgumentParser) -> None:
    """--voices DIR, the one declaration of the voice library flag, its adapter bank's sizes, and
    --watermark (add_watermark_argument)."""
    parser.add_argument("--voices", metavar="DIR", default=None, help=VOICES_HELP)
    add_watermark_argument(parser)
    parser.add_argument("--max-adapters", type=int, default=None, metavar="N",
                        help="library voices' adapters held on the device at once, least recently used "
                             f"evicted (default: 16; vllm: {VLLM_MAX_LORAS})")
    parser.add_argument("--adapter-rank", type=int, default=None, metavar="R",
                        help="the highest LoRA rank served (default: the library's highest, at least 16; "
                             f"vllm: {VLLM_MAX_LORA_RANK})")


def lora_options(args: argparse.Namespace, backend: str) -> dict:
    """vLLM's LoRA keywords for `load_engine` when --voices is given on the vLLM backend, else {}."""
    if getattr(args, "voices", None) is None or backend != "vllm":
        return {}
    return {"enable_lora": True, "max_loras": args.max_adapters or VLLM_MAX_LORAS,
            "max_lora_rank": args.adapter_rank or VLLM_MAX_LORA_RANK}


def engine_kwargs(args: argparse.Namespace) -> dict:
    """Keyword arguments for `load_engine(model, **kwargs)` from parsed flags: backend (when the
    parser has it), device/dtype/compile/quantize/watermark when given, and vLLM's options when given.
    ValueError when vLLM options come with the engine backend."""
    backend = getattr(args, "backend", "engine")
    vllm = {name: getattr(args, name) for name in VLLM_OPTIONS if getattr(args, name, None) is not None}
    if vllm and backend != "vllm":
        flags = ", ".join("--" + name.replace("_", "-") for name in vllm)
        raise ValueError(f"{flags} apply to --backend vllm only")
    load = {name: getattr(args, name) for name in LOAD_OPTIONS if getattr(args, name, None) is not None}
    return {"backend": backend, **load, **vllm, **lora_options(args, backend)}


def engine_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """`engine_kwargs(args)`, a conflict reported as the parser's usage error (exit 2)."""
    try:
        return engine_kwargs(args)
    except ValueError as exc:
        parser.error(str(exc))


def quiet_vllm_logs() -> None:
    """For command-line tools: vLLM logs warnings and errors only, to stderr, so stdout keeps
    the tool's own lines. VLLM_LOGGING_LEVEL / VLLM_LOGGING_STREAM set by the user win."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
