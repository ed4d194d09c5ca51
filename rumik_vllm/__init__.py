"""rumik_vllm: the vLLM plugin that serves rumik-oss-1 on vLLM's engine (docs/ARCHITECTURE.md §12).

vLLM finds this package through the `vllm.general_plugins` entry point in pyproject.toml
(installed into the vLLM environment with `pip install -e . --no-deps`) and calls
`register()` in every process it starts. `register()`:

- teaches transformers' AutoConfig the checkpoint's `model_type: rumik_oss` (a Cohere2
  config plus the audio-token fields), so vLLM reads config.json without remote code;
- registers the architecture `RumikOSSForCausalLM` (rumik_vllm.model): vLLM's Cohere2
  model, our stop head, and a `compute_logits` that keeps only the audio rows.

The sampling rules (codebook phase, `</audio>` at frame boundaries, the stop head) live in
the logits processors of rumik_vllm.logits, which `rumik_app.engine.vllm` passes to the
engine. Use the backend, not this package, directly:

    engine = load_engine("rumik-ai/rumik-oss-1", backend="vllm")   # rumik_app.engine.loading
"""

from __future__ import annotations

ARCHITECTURE = "RumikOSSForCausalLM"
MODEL_CLASS = "rumik_vllm.model:RumikOSSForCausalLM"


def register() -> None:
    """vLLM general-plugin hook; safe to call more than once in a process."""
    from vllm import ModelRegistry

    from rumik_vllm.config import register_config

    register_config()
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        # A string, not the class: vLLM imports the model lazily, after CUDA is set up.
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)
