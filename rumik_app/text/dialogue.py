"""Dialogue scripts: one turn a line, `Name: text`, read into `Turn`s (torch-free).

    from rumik_app.text.dialogue import parse_dialogue, Speaker
    turns = parse_dialogue('''
        Host: Welcome back to the show!
        Guest (excited, fast): Thanks, it's great to be here. <laugh>
        Aisha (sad, slow): I wish I could say the same.
        It has been a long week.          # no name: this line continues Aisha's turn
    ''', speakers={"Host": "Ira", "Guest": Speaker("Zoya", tone="happy")})
    turns[1]    # Turn(speaker='Guest', voice='Zoya', text="Thanks, it's ...", tone='excited', pace='fast', ...)

`rumik_app.engine.script.dialogue_parts(turns, base_request)` turns them into a script the
engine synthesises in one batch (the text layer never imports the engine).

Rules (each broken rule is one `PromptError` that names the line):
- A turn line is `Name: text` or `Name (word, word): text`. Name: a voice of the checkpoint
  (case-insensitive, spelled as the checkpoint spells it), or a name of `speakers` (matched
  case-insensitively; it wins over a voice of the same name). A name is 1-40 characters of
  letters, marks, digits, spaces and `.'-_`, at most 4 words, starting with a letter; a line
  whose text before its first `:` looks like that is always a turn, and an unknown name is an
  error, so a misspelt name is never read aloud.
- Bracket words are tones, paces and accents of the prompt (docs/ARCHITECTURE.md §3),
  comma-separated, case-insensitive ("Hindi accent" and "slow pace" are accepted too); at most
  one of each. They override the speaker's defaults (`Speaker`) field by field.
- Blank lines are skipped. A line that is not a turn line continues the turn above (joined
  with a space); before the first turn it is an error.
- Each turn's text is checked as a request's text is (`validate_text`: tags, brackets, length
  at most `max_chars`); so is the sum over the turns. At most `MAX_TURNS` turns, lines of at most
  `MAX_LINE_CHARS` characters, and a script of at most `SCRIPT_OVERHEAD` x `max_chars`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rumik_app.prompt import ACCENTS, MAX_TEXT_CHARS, PACES, TONES, VOICES, PromptError, normalize_voice, validate_text

MAX_TURNS = 200
MAX_LINE_CHARS = 10_000
MAX_NAME_CHARS = 40
MAX_NAME_WORDS = 4
SCRIPT_OVERHEAD = 2  # a script may be this many times max_chars long: names, settings, blank lines
NAME_PUNCTUATION = " .'-_"
SETTINGS = ("tone", "pace", "accent")
FIELD = "text"  # the request field a dialogue error is about (the server's `param`: input)


@dataclass(frozen=True)
class Speaker:
    """A script name's voice and its default settings (any of them None: the model's own)."""

    voice: str
    tone: str | None = None
    pace: str | None = None
    accent: str | None = None


@dataclass(frozen=True)
class Turn:
    """One speaker's turn: the name as written in the script, the checkpoint voice it maps to,
    the checked text, its settings, and the script line it starts on (1-based)."""

    speaker: str
    voice: str
    text: str
    tone: str | None = None
    pace: str | None = None
    accent: str | None = None
    line: int = 0


def _setting_words() -> dict[str, tuple[str, str]]:
    """lower-case word -> (field, canonical spelling), with the "X accent" / "X pace" forms."""
    words = {}
    for field, choices in (("tone", TONES), ("pace", PACES), ("accent", ACCENTS)):
        for choice in choices:
            words[choice.lower()] = words[f"{choice.lower()} {field}"] = (field, choice)
    return words


SETTING_WORDS = _setting_words()


def allowed_words() -> str:
    """The bracket words, as an error message lists them."""
    return f"tones ({', '.join(TONES)}), paces ({', '.join(PACES)}) or accents ({', '.join(ACCENTS)})"


def _error(line: int, message: str) -> PromptError:
    return PromptError(f"Dialogue line {line}: {message}", field=FIELD)


def parse_settings(words: str, line: int, who: str) -> dict[str, str]:
    """`"sad, slow"` -> {"tone": "sad", "pace": "slow"}; PromptError naming the line otherwise."""
    found: dict[str, str] = {}
    for raw in words.split(","):
        word = " ".join(raw.split()).lower()
        if not word:
            continue
        if word not in SETTING_WORDS:
            raise _error(line, f"unknown setting {raw.strip()!r} for {who}. Use {allowed_words()}, "
                               "comma-separated.")
        field, choice = SETTING_WORDS[word]
        if field in found and found[field] != choice:
            raise _error(line, f"two {field}s ({found[field]}, {choice}) for {who}; give at most one tone, "
                               "one pace and one accent.")
        found[field] = choice
    return found


def _is_name(name: str) -> bool:
    """1-40 characters of letters, marks and `.'-_ `, at most 4 words, a letter first (no digits:
    "It starts at 10:30" continues a turn; it does not name a speaker)."""
    if not name or len(name) > MAX_NAME_CHARS or len(name.split()) > MAX_NAME_WORDS:
        return False
    if not unicodedata.category(name[0]).startswith("L"):
        return False
    return all(ch in NAME_PUNCTUATION or unicodedata.category(ch)[0] in "LM" for ch in name)


def split_turn_line(line: str) -> tuple[str, str, str] | None:
    """`"Aisha (sad, slow): hi"` -> ("Aisha", "sad, slow", "hi"); None if the line is not a turn line."""
    head, colon, text = line.partition(":")
    if not colon:
        return None
    head = head.strip()
    settings = ""
    if head.endswith(")") and "(" in head:
        head, _, settings = head[:-1].partition("(")
        head = head.strip()
        if "(" in settings or ")" in settings:
            return None
    if "(" in head or ")" in head or not _is_name(head):
        return None
    return " ".join(head.split()), settings, text.strip()


def _as_speaker(name: str, value, voices: Sequence[str]) -> Speaker:
    """A `speakers` value (a voice name, a Speaker, or a mapping with voice/tone/pace/accent),
    checked: voice against `voices`, settings against the prompt's words."""
    if isinstance(value, str):
        value = Speaker(value)
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"voice", *SETTINGS})
        if unknown or "voice" not in value:
            raise PromptError(f"Speaker {name!r}: give a voice and optionally {', '.join(SETTINGS)}"
                              + (f", not {unknown[0]!r}." if unknown else "."), field="speakers")
        value = Speaker(**value)
    elif not isinstance(value, Speaker):
        raise PromptError(f"Speaker {name!r}: give a voice name, not {type(value).__name__}.", field="speakers")
    try:
        voice = normalize_voice(value.voice, voices)
    except PromptError as exc:
        raise PromptError(f"Speaker {name!r}: {exc}", field="speakers") from None
    return Speaker(voice, **{f: _speaker_setting(name, f, getattr(value, f)) for f in SETTINGS})


def _speaker_setting(name: str, field: str, value) -> str | None:
    """A speaker's default tone, pace or accent, canonical; PromptError if it is not one."""
    if value in (None, ""):
        return None
    found = SETTING_WORDS.get(" ".join(str(value).split()).lower())
    if found is None or found[0] != field:
        choices = {"tone": TONES, "pace": PACES, "accent": ACCENTS}[field]
        raise PromptError(f"Speaker {name!r}: unknown {field} {value!r}. Choose one of: {', '.join(choices)}.",
                          field="speakers")
    return found[1]


def speaker_table(speakers: Mapping[str, object] | None,
                  voices: Sequence[str] = VOICES) -> dict[str, tuple[str, Speaker]]:
    """lower-case name -> (name as given, Speaker): the caller's names over the checkpoint's voices."""
    table = {voice.lower(): (voice, Speaker(voice)) for voice in voices}
    for name, value in (speakers or {}).items():
        if not isinstance(name, str) or not _is_name(" ".join(name.split())):
            raise PromptError(f"Speaker name {name!r} is not a name: 1-{MAX_NAME_CHARS} letters, digits, spaces "
                              f"or .'-_ (at most {MAX_NAME_WORDS} words), starting with a letter.", field="speakers")
        name = " ".join(name.split())
        table[name.lower()] = (name, _as_speaker(name, value, voices))
    return table


def _start_turn(number: int, name: str, settings: str, text: str,
                table: dict[str, tuple[str, Speaker]], extra: str) -> dict:
    if name.lower() not in table:
        raise _error(number, f"unknown speaker {name!r}. Start the line with a voice's name ({extra}).")
    shown, speaker = table[name.lower()]
    chosen = {f: getattr(speaker, f) for f in SETTINGS} | parse_settings(settings, number, shown)
    return {"speaker": shown, "voice": speaker.voice, "lines": [text] if text else [], "line": number, **chosen}


def _finish_turn(turn: dict, max_chars: int) -> Turn:
    who = f"{turn['speaker']}'s turn"
    if not turn["lines"]:
        raise _error(turn["line"], f"{who} has no text. Write it after the colon: `{turn['speaker']}: text`.")
    try:
        text = validate_text(" ".join(turn["lines"]), max_chars=max_chars)
    except PromptError as exc:
        raise _error(turn["line"], f"{who}: {exc}") from None
    return Turn(turn["speaker"], turn["voice"], text, turn["tone"], turn["pace"], turn["accent"], turn["line"])


def _check_size(script: str, max_chars: int) -> None:
    if not isinstance(script, str) or not script.strip():
        raise PromptError("The dialogue is empty. Write one turn a line, as `Name: text` "
                          "(e.g. `Ira: Hello!`).", field=FIELD)
    if len(script) > SCRIPT_OVERHEAD * max_chars:
        raise PromptError(f"The dialogue script is {len(script):,} characters; the limit is "
                          f"{SCRIPT_OVERHEAD * max_chars:,} (names and settings included). Split it.", field=FIELD)


def parse_dialogue(script: str, speakers: Mapping[str, object] | None = None, voices: Sequence[str] = VOICES,
                   max_chars: int = MAX_TEXT_CHARS, max_turns: int = MAX_TURNS) -> list[Turn]:
    """The turns of a dialogue script (rules: the module docstring). speakers: script name ->
    voice name, `Speaker`, or {"voice", "tone", "pace", "accent"}; voices: the checkpoint's;
    max_chars: a front end's typed limit (`RequestLimits.max_chars`), per turn and in total."""
    _check_size(script, max_chars)
    table = speaker_table(speakers, voices)
    extra = ", ".join(voices)
    turns: list[Turn] = []
    current: dict | None = None
    for number, raw in enumerate(script.splitlines(), start=1):
        if len(raw) > MAX_LINE_CHARS:
            raise _error(number, f"the line is {len(raw):,} characters; the limit is {MAX_LINE_CHARS:,}.")
        line = raw.strip()
        if not line:
            continue
        parsed = split_turn_line(line)
        if parsed is None:
            if current is None:
                raise _error(number, "the script must start with a speaker, as `Name: text` (e.g. `Ira: Hello!`).")
            current["lines"].append(line)
            continue
        if current is not None:
            turns.append(_finish_turn(current, max_chars))
        if len(turns) >= max_turns:
            raise _error(number, f"the dialogue has more than {max_turns} turns. Split it into several scripts.")
        current = _start_turn(number, *parsed, table, extra)
    if current is None:
        raise PromptError("The dialogue is empty. Write one turn a line, as `Name: text`.", field=FIELD)
    turns.append(_finish_turn(current, max_chars))
    _check_total(turns, max_chars)
    return turns


def _check_total(turns: list[Turn], max_chars: int) -> None:
    total = sum(len(turn.text) for turn in turns)
    if total > max_chars:
        raise PromptError(f"The dialogue's turns hold {total:,} characters of text; the limit is {max_chars:,}. "
                          "Split it into several scripts.", field=FIELD)
