"""The published reference decode loop, kept as it was, for side-by-side speed comparisons.

    from benchmarks.published_loop import reference_generate
    tokens = reference_generate(engine, prompt_ids, new_tokens=200, seed=1234)

Each token: one transformers forward returning full-vocabulary logits (277k rows x h) and
`output_hidden_states=True` (all layers) for the stop head, a freshly built -inf mask over
the non-audio ids, top-k sampling, and the token read back to the host. No streaming, no
batching. Used by decode_speed.py, decode_overhead.py and gpu_speed.py; not a test oracle
(the engine's oracle is `rumik_app.decode.reference.ReferenceDecoder`).
"""

from __future__ import annotations

import torch

TEMPERATURE, TOP_K, SEED = 0.8, 30, 1234


@torch.no_grad()
def reference_generate(engine, prompt_ids: list[int], new_tokens: int, seed: int = SEED) -> list[int]:
    """The published loop: full logits, fresh mask, all hidden states, one host sync per token."""
    model, lay = engine.model, engine.layout
    device = engine.device
    generator = torch.Generator(device=device).manual_seed(seed)
    input_ids = torch.tensor([prompt_ids], device=device)
    cache, generated = None, []
    for step in range(new_tokens):
        out = model(input_ids=input_ids, cache=cache, use_cache=True, output_hidden_states=True)
        cache = getattr(out, "cache", None) or out.past_key_values  # transformers 5.20+ | 5.19 (vLLM's)
        logits = out.logits[:, -1, :].float()  # [1, vocab]: every row of the tied embedding
        mask = torch.full_like(logits, float("-inf"))  # rebuilt every step, as published
        mask[:, lay.first_unit_id : lay.last_unit_id + 1] = 0
        mask[:, lay.audio_end_token_id] = 0
        logits = (logits + mask) / TEMPERATURE
        if step % lay.num_quantizers == 0:  # stop head on the last layer's hidden state
            hidden = out.hidden_states[-1][:, -1]
            torch.sigmoid(model.stop_predictor(hidden))  # min_new_tokens = max: never acted on
        top = torch.topk(logits, TOP_K)
        probs = torch.softmax(top.values, dim=-1)
        token = top.indices.gather(1, torch.multinomial(probs, 1, generator=generator))
        generated.append(int(token))
        input_ids = token
    return generated
