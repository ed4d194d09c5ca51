"""The engine-load flags, defined once for every entry point that loads the model.

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)                  # --device --dtype --compile --backend + vLLM's flags
    args = parser.parse_args()
    engine = load_engine(args.model, **engine_options(parser, args))   # rumik_app.engine.loading

`backend` "engine" is the in-process engine (`rumik_app.engine.local`); "vllm" the same API
on vLLM (`rumik_app.engine.vllm`; run from the vLLM environment, `./setup.sh --vllm`).
`python -m rumik_app.synthesize`, `.serve`, `app.py`, `evaluation.run`, the campaign CLI and
the benchmarks use these flags; an entry point with other defaults (a GPU benchmark) sets
them with `parser.set_defaults`. Torch-free, so CLIs parse their arguments before loading
anything heavy.
"""

from __future__ import annotations

import argparse
import os

BACKENDS = ("engine", "vllm")
# vLLM's own engine options, as `load_engine(backend="vllm")` keywords and --kebab-case flags.
VLLM_OPTIONS = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                "distributed_executor_backend", "gpu_memory_utilization")
LOAD_OPTIONS = ("device", "dtype", "compile")


def add_engine_arguments(parser: argparse.ArgumentParser, backend: bool = True) -> None:
    """--device, --dtype, --compile/--no-compile, and (backend=True) --backend with vLLM's flags."""
    group = parser.add_argument_group("model loading")
    group.add_argument("--device", default=None, help="cuda | cpu | cuda:1 ... (default: CUDA if available)")
    group.add_argument("--dtype", default=None, help="bf16 | fp16 | fp32 (default: bf16 on CUDA, fp32 on CPU)")
    group.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                       help="compile the decode step at load (CUDA graphs on CUDA; default: on for CUDA, off for "
                            "CPU); vllm: torch.compile + CUDA graphs, --no-compile = vLLM's enforce_eager")
    if not backend:
        return
    group.add_argument("--backend", choices=BACKENDS, default="engine",
                       help="engine: in-process (default); vllm: vLLM's engine (continuous batching, several "
                            "GPUs; needs the vLLM environment, ./setup.sh --vllm)")
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


def engine_kwargs(args: argparse.Namespace) -> dict:
    """Keyword arguments for `load_engine(model, **kwargs)` from parsed flags: backend (when the
    parser has it), device/dtype/compile when given, and vLLM's options when given.
    ValueError when vLLM options come with the engine backend."""
    backend = getattr(args, "backend", "engine")
    vllm = {name: getattr(args, name) for name in VLLM_OPTIONS if getattr(args, name, None) is not None}
    if vllm and backend != "vllm":
        flags = ", ".join("--" + name.replace("_", "-") for name in vllm)
        raise ValueError(f"{flags} apply to --backend vllm only")
    load = {name: getattr(args, name) for name in LOAD_OPTIONS if getattr(args, name, None) is not None}
    return {"backend": backend, **load, **vllm}


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
