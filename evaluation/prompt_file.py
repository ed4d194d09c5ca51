"""Prompt files: one JSON object per line (`id`, `text`, optional `language`, `domain`, NoVA's
`text_with_mark`, `nvv`, `requested_index`, and any request condition such as `voice`), read and
checked line by line, and the request and seed of each prompt's clip.

    prompts = load_prompts("evaluation/prompts/intelligibility_en.jsonl")   # PromptFileError names the line
    request = prompt_request(prompts[0], clip_seed(0, prompts[0]["id"], run=1))

Kept apart from `evaluation.run` (the runner) so that what only reads prompt files (campaigns,
their command line) does not import the runner's judges and systems.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from rumik_app.errors import RumikError
from rumik_app.request import CONDITION_FIELDS, SEED_RANGE, SynthesisRequest
from rumik_app.text.languages import LANGUAGES, dominant_script, get_language

SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NOVA_FIELDS = ("text_with_mark", "nvv", "requested_index")


class PromptFileError(RumikError, ValueError):
    """A prompt file that cannot be run; the message names the line and the fix."""


def is_nova(prompt: dict) -> bool:
    return all(f in prompt for f in NOVA_FIELDS)


def infer_language(text: str) -> str | None:
    """The language code when the script names exactly one language (Latin -> en), else None."""
    script = dominant_script(text)
    codes = [lang.code for lang in LANGUAGES if lang.script == script]
    return codes[0] if len(codes) == 1 else None


def load_prompts(path: str | os.PathLike, limit: int | None = None) -> list[dict]:
    """Prompt records with `language` (ISO code) and `domain` filled in; PromptFileError on bad lines."""
    path = Path(path)
    if not path.is_file():
        raise PromptFileError(f"Prompt file {path} does not exist.")
    prompts, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            p = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: not valid JSON ({exc.msg}).") from exc
        if not isinstance(p, dict) or not p.get("id") or not str(p.get("text", "")).strip():
            raise PromptFileError(f"{where}: every line needs non-empty `id` and `text` fields.")
        p["id"] = str(p["id"])
        if not SAFE_ID.match(p["id"]):
            raise PromptFileError(f"{where}: id {p['id']!r} is not usable as a file name; use letters, digits, . _ -")
        if p["id"] in seen:
            raise PromptFileError(f"{where}: duplicate id {p['id']!r}; ids must be unique.")
        seen.add(p["id"])
        if p.get("language"):
            try:
                p["language"] = get_language(str(p["language"])).code
            except ValueError as exc:
                raise PromptFileError(f"{where}: {exc}") from exc
        else:
            p["language"] = infer_language(p["text"])
            if p["language"] is None:
                raise PromptFileError(f"{where}: no `language` field and the script does not tell; add one.")
        p["domain"] = str(p.get("domain") or ("nova" if is_nova(p) else "general"))
        prompts.append(p)
    if not prompts:
        raise PromptFileError(f"{path} holds no prompts.")
    return prompts[:limit] if limit else prompts


def clip_seed(base_seed: int, clip_id: str, run: int) -> int:
    """Deterministic per-clip seed from (base seed, run, id), so runs differ but reproduce."""
    digest = hashlib.sha256(f"{base_seed}:{run}:{clip_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_RANGE


def prompt_request(prompt: dict, seed: int, max_new_tokens: int | None = None,
                   normalize: bool = True) -> SynthesisRequest:
    """The request for a prompt: NoVA prompts are spoken from `text_with_mark`; `normalize`
    reads numbers, money, dates and times as words (the request's switch)."""
    text = prompt["text_with_mark"] if is_nova(prompt) else prompt["text"]
    fields = {k: prompt[k] for k in CONDITION_FIELDS if prompt.get(k)}
    if max_new_tokens is not None:
        fields["max_new_tokens"] = max_new_tokens
    return SynthesisRequest(text=text, seed=seed, language=prompt["language"], normalize=normalize, **fields)
