"""Prompt strings for rumik-oss-1 (docs/ARCHITECTURE.md §3) and validation of user text.

    [BOS]<text>{Speaker}: <description="{tone}, {accent} accent, {pace} pace"> {text}<audio>

Without a description the `<description="...">` part and its trailing space are dropped.
The BOS token is prepended at tokenisation time (see `rumik_app.model.tokens`), not here, so the
string this module returns is exactly what the app shows as "the prompt the model receives"
minus `[BOS]`.

    >>> build_prompt("नमस्ते <laugh> दोस्त", voice="Ira", tone="happy", accent="Hindi", pace="fast")
    '<text>Ira: <description="happy, Hindi accent, fast pace"> नमस्ते <laugh> दोस्त<audio>'
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from rumik_app.errors import PromptError

VOICES: tuple[str, ...] = ("Ira", "Aisha", "Siya", "Zoya")
TONES: tuple[str, ...] = ("happy", "sad", "angry", "excited", "professional")
ACCENTS: tuple[str, ...] = ("Hindi", "Telugu", "Tamil", "Kannada", "Bengali", "Punjabi", "Indian English")
PACES: tuple[str, ...] = ("slow", "steady", "fast")
ALLOWED_TAGS: tuple[str, ...] = ("<laugh>", "<chuckle>", "<sigh>")
VOICE_NOTE = "All four voices (Ira, Aisha, Siya, Zoya) are female-presenting; a description cannot change that."

TEXT_MARKER = "<text>"
AUDIO_MARKER = "<audio>"
# Anything that looks like an inline tag: `<` + up to 40 non-space, non-bracket chars + `>`.
# Catches `<laugh>`, `<Laugh>`, `</sigh>`, `<giggle>`, `<laugh >` is caught by STRAY_BRACKET below.
TAG_PATTERN = re.compile(r"<[^<>\s]{1,40}>")
STRAY_BRACKET = re.compile(r"[<>]")
SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: JSON can carry one alone
# One generous bound: a 30-minute audiobook chapter is ~25k characters. Longer input is
# almost certainly a mistake (a pasted file) and would tie up the engine for hours.
MAX_TEXT_CHARS = 50_000
MAX_DESCRIPTION_CHARS = 300


def _match_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    """Case-insensitive match of `value` against `choices`, returning the canonical spelling."""
    wanted = value.strip().lower()
    for choice in choices:
        if choice.lower() == wanted:
            return choice
    raise PromptError(f"Unknown {what} {value!r}. Choose one of: {', '.join(choices)}.", field=what)


def normalize_voice(voice: str, voices: Sequence[str] = VOICES) -> str:
    """Canonical speaker name (`"ira"` -> `"Ira"`); raises PromptError for unknown voices.

    `voices` comes from the checkpoint's config (`speakers`), so a fine-tuned checkpoint
    with its own voices validates against those.
    """
    if not voice or not str(voice).strip():
        raise PromptError(f"No voice given. Choose one of: {', '.join(voices)}.", field="voice")
    return _match_choice(str(voice), tuple(voices), "voice")


def check_characters(text: str) -> None:
    """PromptError (field "text") if `text` holds an unpaired surrogate: JSON's "\\ud800" alone
    is not a character, and cannot be encoded, spoken or echoed back."""
    if (surrogate := SURROGATE.search(text)) is not None:
        raise PromptError(
            f"Text has an unpaired surrogate (U+{ord(surrogate.group()):04X}) at character {surrogate.start() + 1}, "
            "which is not a character. Send the text as valid UTF-8 (an emoji's two-part escape is fine).",
            field="text")


def validate_text(text: str, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Return NFC-normalised, stripped `text`, or raise PromptError.

    Errors: empty text, text longer than `max_chars`, an inline tag other than
    `<laugh>`, `<chuckle>`, `<sigh>`, or a stray `<`/`>` that is not part of a tag.
    """
    if text is None or not str(text).strip():
        raise PromptError("Text is empty. Type something for the voice to say.", field="text")
    text = unicodedata.normalize("NFC", str(text)).strip()
    if len(text) > max_chars:
        raise PromptError(
            f"Text is {len(text):,} characters; the limit is {max_chars:,}. Split it into smaller parts.",
            field="text")
    check_characters(text)
    unknown = [tag for tag in TAG_PATTERN.findall(text) if tag not in ALLOWED_TAGS]
    if unknown:
        raise PromptError(
            f"Unknown tag {unknown[0]}. Allowed inline tags: {', '.join(ALLOWED_TAGS)} (lower case).",
            field="text")
    if STRAY_BRACKET.search(TAG_PATTERN.sub("", text)):
        raise PromptError(
            f"Stray '<' or '>' in the text. Only the tags {', '.join(ALLOWED_TAGS)} may use angle brackets.",
            field="text")
    return text


def format_description(
    tone: str | None = None,
    accent: str | None = None,
    pace: str | None = None,
    description: str | None = None,
) -> str | None:
    """The text inside `<description="...">`, or None when no description is given.

    Either the structured fields (any subset of tone/accent/pace, in that order, e.g.
    `"sad, Hindi accent, slow pace"`) or a free-form `description`, not both.
    """
    structured = [v for v in (tone, accent, pace) if v not in (None, "")]
    free = (description or "").strip()
    if structured and free:
        raise PromptError("Give either tone/accent/pace or a free-form description, not both.", field="description")
    if free:
        if len(free) > MAX_DESCRIPTION_CHARS:
            raise PromptError(f"Description is longer than {MAX_DESCRIPTION_CHARS} characters; shorten it.",
                              field="description")
        if any(ch in free for ch in '"<>'):
            raise PromptError('A description cannot contain double quotes or angle brackets (" < >).',
                              field="description")
        return unicodedata.normalize("NFC", free)
    parts = []
    if tone not in (None, ""):
        parts.append(_match_choice(tone, TONES, "tone"))
    if accent not in (None, ""):
        parts.append(f"{_match_choice(accent, ACCENTS, 'accent')} accent")
    if pace not in (None, ""):
        parts.append(f"{_match_choice(pace, PACES, 'pace')} pace")
    return ", ".join(parts) if parts else None


def build_prompt(
    text: str,
    voice: str = "Ira",
    tone: str | None = None,
    accent: str | None = None,
    pace: str | None = None,
    description: str | None = None,
    max_chars: int = MAX_TEXT_CHARS,
    voices: Sequence[str] = VOICES,
) -> str:
    """The prompt string (without BOS) for one utterance; validates every field."""
    text = validate_text(text, max_chars=max_chars)
    speaker = normalize_voice(voice, voices)
    desc = format_description(tone, accent, pace, description)
    condition = f'<description="{desc}"> ' if desc else ""
    return f"{TEXT_MARKER}{speaker}: {condition}{text}{AUDIO_MARKER}"


def split_tags(text: str) -> list[str]:
    """Split text into words and tag tokens: `"a <laugh> b"` -> `["a", "<laugh>", "b"]`."""
    return TAG_PATTERN.sub(lambda m: f" {m.group(0)} ", text).split()
