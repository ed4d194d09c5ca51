"""Planning long text into chunk requests: text only, no weights and no torch (docs/ARCHITECTURE.md §5).

    chunks = plan_request(req, config.layout)      # what BaseEngine.plan does, from a config alone
    for chunk in chunks:
        print("[BOS]" + chunk.prompt(voices=config.speakers))   # `synthesize --print-prompt`

The text is read as spoken first (`SynthesisRequest.spoken_text`: lexicons, then
normalisation), then cut into chunks of at most ~16 s (25 s with a larger budget) of expected
speech; chunk i uses seed + i and carries its spoken text with `normalize=False` and no
lexicons (they are applied once, here). BaseEngine.plan calls this, so the CLI's prompt
preview and every backend plan alike.
"""

from __future__ import annotations

from rumik_app.model.tokens import TokenLayout
from rumik_app.request import DEFAULT_MAX_NEW_TOKENS, LIBRARY_LIMITS, RequestLimits, SynthesisRequest, resolve_seed
from rumik_app.text.chunking import MAX_CHUNK_SECONDS, split_text
from rumik_app.text.languages import expected_seconds

# A chunk's expected speech may use at most this share of its token budget, so normal
# variation in speaking rate does not run into max_new_tokens.
CHUNK_BUDGET_SHARE = 0.8


def plan_request(req: SynthesisRequest, layout: TokenLayout,
                 limits: RequestLimits = LIBRARY_LIMITS) -> list[SynthesisRequest]:
    """The chunk requests of `req` (see the module docstring). limits: a front end's bounds
    (PromptError past them): typed and spoken characters, and audio seconds over the chunks."""
    text = req.spoken_text(limits.max_chars, limits.max_spoken_chars)
    limits.check_spoken(req.text, text)
    chunks = _chunks(req, text, layout.tokens_per_second)
    limits.check_budget([c.max_new_tokens for c in chunks], layout.tokens_per_second)
    return chunks


def _chunks(req: SynthesisRequest, text: str, tokens_per_second: float) -> list[SynthesisRequest]:
    seed = resolve_seed(req.seed)
    # Chunk size follows the default budget (or a larger one the caller set), never a
    # smaller one: max_new_tokens below the default truncates each chunk as asked,
    # rather than shredding the text into many tiny chunks.
    budget = max(req.max_new_tokens, DEFAULT_MAX_NEW_TOKENS)
    limit = min(MAX_CHUNK_SECONDS, CHUNK_BUDGET_SHARE * budget / tokens_per_second)
    spoken = {"normalize": False, **({"lexicons": ()} if req.lexicons else {})}  # applied once, above
    if expected_seconds(text, req.language, req.pace) <= limit:
        return [req.with_(text=text, seed=seed, **spoken)]
    chunks = split_text(text, max_seconds=limit, language=req.language, pace=req.pace)
    return [req.with_(text=chunk, seed=seed + index, **spoken) for index, chunk in enumerate(chunks)]
