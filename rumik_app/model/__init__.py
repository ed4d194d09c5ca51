"""The published format and the network (docs/ARCHITECTURE.md §2, §4, §5).

    from rumik_app.model.config import RumikOSSConfig     # config.json, read without remote code
    from rumik_app.model.tokens import TokenLayout, FrameParser   # unit ids <-> Mimi codes (numpy only)
    from rumik_app.model.lm import RumikOSSForCausalLM, AudioHead
    from rumik_app.model.codec import MimiCodec            # exact streaming Mimi decode

Modules: `config`, `tokens`, `lm` (Cohere2 + stop head,
the audio-only head), `static_body` (the body over a static KV cache, for the fast path),
`codec`. Nothing is imported here, so `rumik_app.model.tokens` stays torch-free.
"""
