"""A fix for vLLM's CPU multi-LoRA: rows with no adapter must get no adapter (vLLM PRs #48421, #49656).

    patch_cpu_lora_ops()   # register() calls it in every vLLM process on the CPU platform

vLLM marks a token of a request without a LoRA with the index -1 (`token_lora_indices`). The
Triton kernels skip such tokens; the pure-torch ops the CPU platform runs
(vllm/lora/ops/torch_ops/lora_ops.py: bgmv_shrink, bgmv_expand, bgmv_expand_slice, and the
sgmv_* prefill ops that call them) gather `lora_weights[indices]`, so -1 picks the last
adapter slot. Once every slot holds an adapter, a built-in voice's row batched beside library
voices gets the last one's delta: wrong audio, no error (tests/vllm/test_voices.py saw it).

The wrapped ops give those rows a zero input and a valid index, so their delta is an exact
zero and every other row is computed as before, as the upstream fix does. A no-op once vLLM
fixes it; remove this module when the pinned vLLM carries the fix.
"""

from __future__ import annotations

import functools

PATCHED = "_rumik_no_lora_rows_fixed"
OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
NAMESPACES = ("vllm.lora.ops.torch_ops.lora_ops", "vllm.lora.ops.torch_ops",
              "vllm.lora.punica_wrapper.punica_cpu")


def skip_no_lora_rows(op):
    """`op(inputs, weights, output, indices, ...)` with rows of index < 0 contributing exactly zero."""
    if getattr(op, PATCHED, False):
        return op

    @functools.wraps(op)
    def wrapped(inputs, weights, output, indices, *args, **kwargs):
        no_lora = indices < 0
        inputs = inputs.masked_fill(no_lora[:, None], 0)
        return op(inputs, weights, output, indices.clamp(min=0), *args, **kwargs)

    setattr(wrapped, PATCHED, True)
    return wrapped


def patch_cpu_lora_ops() -> None:
    """Wrap the three ops wherever vLLM's CPU LoRA path looks them up (module globals included,
    so the sgmv_* ops that call them are fixed too). Safe to call more than once."""
    import importlib

    for name in NAMESPACES:
        module = importlib.import_module(name)
        for op in OPS:
            if hasattr(module, op):
                setattr(module, op, skip_no_lora_rows(getattr(module, op)))
