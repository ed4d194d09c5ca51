"""The one sampler (docs/ARCHITECTURE.md §5), in two implementations that give the same tokens.

    from rumik_app.decode.sampling import RowParams        # per-row settings, rules, inverse-CDF sampling
    from rumik_app.decode.slots import BatchDecoder, SlotDecoder   # the fast path every caller uses
    from rumik_app.decode.reference import ReferenceDecoder        # the eager loop it is tested against

Modules: `sampling` (row settings, stop modes, finish codes, pre-drawn uniforms, the sampler;
torch only, no transformers: the vLLM plugin reads its rules from here), `rollouts` (what a
batch produced, packed once for every decoder), `slots` (static KV cache, fixed-shape step,
compiled), `reference` (transformers' forward with a dynamic cache).
"""
