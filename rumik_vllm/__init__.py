"""rumik_vllm: the vLLM backend of rumik-oss-1, in one package (docs/ARCHITECTURE.md §12).

    engine = load_engine("rumik-ai/rumik-oss-1", backend="vllm")   # rumik_app.engine.loading finds it

Two entry points in pyproject.toml (installed into the vLLM environment with `pip install -e
. --no-deps`): `rumik_app.backends: vllm` names `rumik_vllm.engine:VLLMEngine`, which
`load_engine(backend="vllm")` loads (rumik_app never imports this package); and
`vllm.general_plugins: rumik_oss`, through which vLLM calls `register()` in every process it
starts. `register()` teaches transformers' AutoConfig the checkpoint's `model_type:
rumik_oss` (a Cohere2 config plus the audio-token fields: `config`), so vLLM reads
config.json without remote code, and registers the architecture `RumikOSSForCausalLM`
(`model`: vLLM's Cohere2 model, our stop head, and a `compute_logits` that keeps only the
audio rows).

Modules: `engine` (`VLLMEngine`: the engine API on vLLM's AsyncLLM), `rollouts` (its outputs
as the engine's `Rollouts`), `loop` (its event loop in
a thread; starting vLLM from any `__main__`), `rules` (the sampling rules on vLLM's logits,
vLLM-free) and `logits` (the logits processors that apply them), `weights` (pushing a
trainer's weights into the served model: the sender and the worker extension), `model`,
`config`, `lora_fix` (vLLM's CPU multi-LoRA gave rows without an adapter the last one's).
Importing the package itself loads nothing (vLLM imports it in every process).
"""

from __future__ import annotations

ARCHITECTURE = "RumikOSSForCausalLM"
MODEL_CLASS = "rumik_vllm.model:RumikOSSForCausalLM"


def register() -> None:
    """vLLM general-plugin hook; safe to call more than once in a process."""
    from vllm import ModelRegistry
    from vllm.platforms import current_platform

    from rumik_vllm.config import register_config

    register_config()
    if current_platform.is_cpu():
        from rumik_vllm.lora_fix import patch_cpu_lora_ops

        patch_cpu_lora_ops()  # library voices beside built-in ones on vLLM's CPU multi-LoRA
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        # A string, not the class: vLLM imports the model lazily, after CUDA is set up.
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)
