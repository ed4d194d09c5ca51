"""The `--backend` command-line flags, shared by every entry point that loads the model.

    parser = argparse.ArgumentParser()
    add_backend_arguments(parser)        # --backend, --tensor-parallel-size, ...
    args = parser.parse_args()
    engine = TTSEngine.from_pretrained(args.model, **backend_kwargs(args))

`engine` is the in-process engine (rumik_app.engine.local); `vllm` is the same API on vLLM
(rumik_app.engine.vllm; run from the vLLM environment, `./setup.sh --vllm`). Torch-free,
so CLIs can parse arguments before loading anything heavy.
"""

from __future__ import annotations

import argparse
import os

BACKENDS = ("engine", "vllm")
VLLM_ONLY = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
             "gpu_memory_utilization")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("backend")
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


def backend_kwargs(args: argparse.Namespace) -> dict:
    """Keyword arguments for `TTSEngine.from_pretrained`: backend, plus vLLM's options when
    given. ValueError when vLLM options come with the engine backend."""
    options = {name: getattr(args, name) for name in VLLM_ONLY if getattr(args, name, None) is not None}
    if options and args.backend != "vllm":
        flags = ", ".join("--" + name.replace("_", "-") for name in options)
        raise ValueError(f"{flags} apply to --backend vllm only")
    return {"backend": args.backend, **options}


def parsed_backend_kwargs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """`backend_kwargs(args)`, a conflict reported as the parser's usage error (exit 2)."""
    try:
        return backend_kwargs(args)
    except ValueError as exc:
        parser.error(str(exc))


def quiet_vllm_logs() -> None:
    """For command-line tools: vLLM logs warnings and errors only, to stderr, so stdout keeps
    the tool's own lines. VLLM_LOGGING_LEVEL / VLLM_LOGGING_STREAM set by the user win."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
