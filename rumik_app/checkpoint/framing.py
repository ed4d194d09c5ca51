"""The framing check at load: the tokenizer must frame prompts with the ids config.json declares.

    check_framing(tokenizer, config)     # CheckpointError naming the token and both ids, else the BOS id

A prompt is `[BOS, <text>, …, <audio>]` (docs/ARCHITECTURE.md §3) and the model then emits
units up to `</audio>`, all by id. If the tokenizer and config.json disagree on one of those
ids (a tokenizer from another checkpoint, a transformers or tokenizers change in how special
tokens are read) the model still runs, and quietly speaks worse. So every load (both
backends, every entry point: `load_tokenizer` runs it) checks, from the real files:
  1. `<text>`, `<audio>`, `</audio>` map to `text_start_token_id`, `audio_start_token_id`,
     `audio_end_token_id`, and `<BOS_TOKEN>` to `bos_token_id`;
  2. a prompt built by `rumik_app.prompt.build_prompt` encodes to ids that start with
     `<text>` and end with `<audio>` (each a single token), so with BOS in front it is
     `[BOS, <text>, …, <audio>]`.
"""

from __future__ import annotations

from rumik_app.errors import CheckpointError
from rumik_app.model.config import RumikOSSConfig
from rumik_app.prompt import AUDIO_MARKER, TEXT_MARKER, build_prompt

BOS_TOKEN = "<BOS_TOKEN>"
AUDIO_END_MARKER = "</audio>"
PROBE_TEXT = "Hello, नमस्ते."  # Latin and Devanagari: both must frame the same way
FIX = ("The tokenizer and config.json must come from the same checkpoint: download the checkpoint again "
       "(hf download rumik-ai/rumik-oss-1), or pin the transformers/tokenizers versions in pyproject.toml.")


def _token_id(tokenizer, token: str) -> int | None:
    found = tokenizer.convert_tokens_to_ids(token)
    return None if found is None or found == tokenizer.unk_token_id else int(found)


def _declared(config: RumikOSSConfig) -> dict[str, tuple[str, int | None]]:
    lay = config.layout
    return {AUDIO_MARKER: ("audio_start_token_id", lay.audio_start_token_id),  # generation starts after it
            TEXT_MARKER: ("text_start_token_id", lay.text_start_token_id),
            AUDIO_END_MARKER: ("audio_end_token_id", lay.audio_end_token_id),
            BOS_TOKEN: ("bos_token_id", config.lm.bos_token_id)}


def check_framing(tokenizer, config: RumikOSSConfig) -> int:
    """Check the tokenizer against config.json (module docstring); returns the BOS id."""
    for token, (field, want) in _declared(config).items():
        got = _token_id(tokenizer, token)
        if want is not None and got != want:
            said = f"does not know {token}" if got is None else f"maps {token} to id {got}"
            raise CheckpointError(f"The tokenizer {said}, but config.json declares {field} = {want}. {FIX}")
    bos = _token_id(tokenizer, BOS_TOKEN)
    if bos is None:
        bos = config.lm.bos_token_id
    ids = tokenizer.encode(build_prompt(PROBE_TEXT, config.speakers[0]), add_special_tokens=False)
    lay = config.layout
    if not ids or ids[0] != lay.text_start_token_id or ids[-1] != lay.audio_start_token_id:
        raise CheckpointError(
            f"The tokenizer frames a prompt as [{ids[0] if ids else None}, …, {ids[-1] if ids else None}] instead of "
            f"[{TEXT_MARKER} = {lay.text_start_token_id}, …, {AUDIO_MARKER} = {lay.audio_start_token_id}] (after "
            f"BOS = {bos}): its special tokens are not read as single tokens. {FIX}")
    return int(bos)
