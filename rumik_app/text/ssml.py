"""SSML input: a subset of W3C SSML 1.1 read as segments of this project's plain text.

    from rumik_app.text.ssml import is_ssml, parse_ssml
    text = ('<speak xml:lang="hi-IN">नमस्ते <break time="500ms"/>'
            '<prosody rate="fast">आज <say-as interpret-as="date">15/08/2026</say-as> है</prosody></speak>')
    if is_ssml(text):                # starts with <speak (after whitespace or <?xml ...?>)
        segments = parse_ssml(text)  # PromptError(field="text") naming what is wrong
    # [SsmlSegment('नमस्ते', language='hi', pause_after_s=0.5),
    #  SsmlSegment('आज पंद्रह अगस्त दो हज़ार छब्बीस है', language='hi', pace='fast')]

A segment is a run of text in the project's input syntax (inline `<laugh>` tags, no other
markup), the voice, language and pace it is said in (None: the base request's) and the
silence after it. Supported; anything else is one PromptError that lists this table:

    <speak version xml:lang>  the root; xml:lang "hi-IN" -> code "hi" (also on <lang>, <p>, <s>)
    <break time strength>     cuts the text; time ("300ms", "1.5s") wins over strength: none 0 (no cut),
                              x-weak 0.25 s, weak 0.5, medium 0.75 (a bare <break/>), strong 1.0, x-strong 1.25
    <say-as interpret-as format>  (`say_as`) words by the normaliser's rules (`rules`, `numwords`) in the segment's
                              xml:lang, else the script's language as `normalize_text` decides: cardinal,
                              ordinal, digits, characters = spell-out (letters or aksharas one by one, Latin
                              upper-cased, digits as words), date (format dmy (default), mdy, ymd, dm, md),
                              time, telephone, currency (format INR/USD/EUR/GBP for a bare amount).
                              Where the language has no verified words the content stays as typed.
    <sub alias>               the alias replaces the text
    <prosody rate>            x-slow, slow -> slow; medium -> steady; fast, x-fast -> fast; 50%-200%:
                              under 90% slow, over 110% fast, else steady (the model has three paces)
    <voice name> <lang xml:lang>  the voice (checked against `voices` when given) and language inside
    <laugh/> <chuckle/> <sigh/>   the inline tags, spaced: "a<laugh/>b" -> "a <laugh> b"
    <p> <s>                   sentence ends: a stop (। in Devanagari, Bengali, Gurmukhi, Odia script, ۔ in
                              Arabic, else .) after the last word unless it has one; no segment cut

Whitespace is collapsed; adjacent segments with the same settings and no pause merge; a
break before any text is a leading segment with empty text. Hardened: defusedxml (no DTD,
entities or external references), at most MAX_SSML_BYTES, depth and element count checked
while expat streams 1 KB at a time (a 10,000-deep document stops at MAX_DEPTH), breaks,
pauses, say-as content and the output text bounded.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from rumik_app.errors import PromptError
from rumik_app.prompt import MAX_TEXT_CHARS, check_characters, normalize_voice
from rumik_app.text.languages import INDIC_SCRIPTS, SENTENCE_END, dominant_script, get_language, script_counts
from rumik_app.text.normalize import LANGUAGE_SCRIPT, SCRIPT_DEFAULT_LANGUAGE
from rumik_app.text.say_as import SayAs, check_say_as, render_say_as

MAX_SSML_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_ELEMENTS = 1000
MAX_BREAKS = 100
MAX_BREAK_S = 10.0
MAX_TOTAL_PAUSE_S = 60.0
SCRIPT_SAMPLE = 4000  # characters whose script decides a say-as language without xml:lang
BREAK_STRENGTH_S = {"none": 0.0, "x-weak": 0.25, "weak": 0.5, "medium": 0.75, "strong": 1.0, "x-strong": 1.25}
RATE_PACE = {"x-slow": "slow", "slow": "slow", "medium": "steady", "fast": "fast", "x-fast": "fast"}
RATE_PERCENT = (50.0, 200.0)
INLINE = ("laugh", "chuckle", "sigh")
SUPPORTED: dict[str, tuple[str, ...]] = {
    "speak": ("version", "xml:lang"), "break": ("time", "strength"), "say-as": ("interpret-as", "format"),
    "sub": ("alias",), "prosody": ("rate",), "voice": ("name",), "lang": ("xml:lang",),
    "p": ("xml:lang",), "s": ("xml:lang",), **{tag: () for tag in INLINE},
}
EMPTY = ("break", *INLINE)  # no text, no children
TEXT_ONLY = ("say-as", "sub")  # text, no children
SSML_NS = "http://www.w3.org/2001/10/synthesis"
XML_NS = "http://www.w3.org/XML/1998/namespace"
# Both are used with `match` only (anchored at the start): searched, `\s*` at every position of a
# run of spaces rescans the rest of the run, quadratic in the document.
_START = re.compile(r"\s*(?:<\?xml[^>]*\?>\s*)?<speak[\s>/]")
_XML_DECL = re.compile(r"\s*<\?xml[^>]*\?>")
_TIME = re.compile(r"(\d{1,6}(?:\.\d+)?)\s*(ms|s)")
_PERCENT = re.compile(r"(\d{1,4}(?:\.\d+)?)%")
_MARK = "\x00"  # a sentence end (<p>, <s>); XML text cannot hold U+0000
_STOP = {"Devanagari": "।", "Bengali": "।", "Gurmukhi": "।", "Odia": "।", "Arabic": "۔"}


@dataclass(frozen=True)
class SsmlSegment:
    """One run of text to synthesise, its settings (None: the base request's) and the silence after it."""

    text: str
    voice: str | None = None
    language: str | None = None
    pace: str | None = None
    pause_after_s: float = 0.0


def _error(message: str) -> PromptError:
    return PromptError(f"SSML: {message}", field="text")


def is_ssml(text: str) -> bool:
    """True when `text` is SSML: it starts (after whitespace or an XML declaration) with `<speak`."""
    return isinstance(text, str) and _START.match(text) is not None


def parse_ssml(text: str, language: str | None = None, voices: Sequence[str] | None = None) -> list[SsmlSegment]:
    """The segments of an SSML document; PromptError(field="text") names what is wrong.

    language: the base request's (code or name); say-as outside any xml:lang reads in it when
    the text's script is its script. voices: the checkpoint's; when given, <voice name> is
    checked and spelled as there (else the request checks it when its prompt is built).
    """
    root = _parse(text)
    _check_structure(root)
    default = get_language(language).code if language else None
    builder = _Builder(default, voices, root)
    builder.visit(root, SsmlSegment(""))
    builder.flush()
    return _finish(builder.segments)


def supported_text() -> str:
    """The supported elements and their attributes, as every refusal lists them."""
    return ", ".join(f"<{tag}>" + (f" ({', '.join(attrs)})" if attrs else "") for tag, attrs in SUPPORTED.items())


def _parse(text: str) -> Element:
    """The tree, refused before parsing when too big and while streaming when too deep or too many."""
    too_big = _error(f"the document is over {MAX_SSML_BYTES // 1024} KB; split it into several requests.")
    if len(text) > MAX_SSML_BYTES:  # characters first: a 5 MB string is refused without encoding it
        raise too_big
    check_characters(text)
    declaration = _XML_DECL.match(text)  # only at the start, where XML allows one
    raw = text[declaration.end() if declaration else 0:].strip().encode("utf-8")
    if len(raw) > MAX_SSML_BYTES:
        raise too_big
    root, depth, count = None, 0, 0
    try:
        for event, element in iterparse(_Chunks(raw), events=("start", "end"), forbid_dtd=True):
            depth += 1 if event == "start" else -1
            count += event == "start"
            root = element if root is None else root
            if depth > MAX_DEPTH:
                raise _error(f"elements are nested more than {MAX_DEPTH} deep.")
            if count > MAX_ELEMENTS:
                raise _error(f"the document has more than {MAX_ELEMENTS} elements.")
    except DefusedXmlException:
        raise _error("a DTD, entity declaration or external reference is not allowed "
                     "(write characters directly; &lt; &gt; &amp; &quot; &apos; work).") from None
    except ParseError as exc:
        raise _error(f"not well-formed XML ({exc}).") from None
    if root is None or _name(root.tag) != "speak":
        raise _error("the root element must be <speak>.")
    return root


class _Chunks(io.BytesIO):
    """Hands expat 1 KB at a time, so depth and count are checked every ~300 elements, not ~5,000."""

    def read(self, size: int | None = -1) -> bytes:
        return super().read(1024)


def _name(tag: str, attribute: bool = False) -> str:
    """A tag or attribute as written: the SSML namespace dropped, xml:lang, else `name (namespace uri)`."""
    if not tag.startswith("{"):
        return tag
    uri, _, local = tag[1:].partition("}")
    if uri == SSML_NS and not attribute:
        return local
    return f"xml:{local}" if uri == XML_NS else f"{local} (namespace {uri})"


def _check_structure(root: Element) -> None:
    """One PromptError naming every unsupported element and attribute (and misplaced content)."""
    problems: list[str] = []
    for element in root.iter():
        tag = _name(element.tag)
        if tag not in SUPPORTED:
            problems.append(f"element <{tag}>")
            continue
        if tag == "speak" and element is not root:
            problems.append("<speak> inside <speak>")
        attributes = (_name(key, attribute=True) for key in element.attrib)
        problems += [f"attribute {a} on <{tag}>" for a in attributes if a not in SUPPORTED[tag]]
        if tag in EMPTY + TEXT_ONLY and len(element):
            problems.append(f"an element inside <{tag}>")
        if tag in EMPTY and (element.text or "").strip():
            problems.append(f"text inside <{tag}> (write <{tag}/>)")
    if problems:
        raise _error(f"unsupported {'; '.join(list(dict.fromkeys(problems))[:12])}. Supported: {supported_text()}.")


class _Builder:
    """Walks the checked tree (depth <= MAX_DEPTH), collecting segments in document order."""

    def __init__(self, language: str | None, voices: Sequence[str] | None, root: Element):
        self.default, self.voices, self.root = language, voices, root
        self.segments: list[SsmlSegment] = []
        self.pieces: list[str | SayAs] = []  # text of the open segment; say-as rendered at flush
        self.scope = SsmlSegment("")
        self.breaks, self.paused, self.spoken = 0, 0.0, False
        self.stopped = 0  # how many segments there were when the last one was given its stop

    def visit(self, element: Element, outer: SsmlSegment) -> None:
        tag = _name(element.tag)
        scope = self._scope(element, tag, outer)
        self._enter(scope)
        if tag in EMPTY + TEXT_ONLY:
            return self._leaf(element, tag)
        if tag in ("p", "s"):
            self._end_sentence()
        self._text(element.text)
        for child in element:
            self.visit(child, scope)
            self._enter(scope)
            self._text(child.tail)
        if tag in ("p", "s"):
            self._end_sentence()

    def _scope(self, element: Element, tag: str, outer: SsmlSegment) -> SsmlSegment:
        lang = element.get(f"{{{XML_NS}}}lang")
        if tag == "lang" and lang is None:
            raise _error('<lang> needs xml:lang, e.g. <lang xml:lang="hi-IN">.')
        if lang is not None:
            outer = replace(outer, language=_language(lang))
        if tag == "voice":
            outer = replace(outer, voice=self._voice(element.get("name", "")))
        if tag == "prosody" and element.get("rate") is not None:
            outer = replace(outer, pace=_pace(element.get("rate", "")))
        return outer

    def _voice(self, name: str) -> str:
        if not name.strip():
            raise _error('<voice> needs a name, e.g. <voice name="Ira">.')
        try:
            return normalize_voice(name, self.voices) if self.voices is not None else name.strip()
        except PromptError as exc:
            raise _error(f'<voice name="{name}">: {exc}') from None

    def _enter(self, scope: SsmlSegment) -> None:
        if scope != self.scope:
            self.flush()
            self.scope = scope

    def _text(self, text: str | None) -> None:
        if text and ("<" in text or ">" in text):
            raise _error("a literal < or > cannot be spoken; the inline sounds are <laugh/>, <chuckle/>, <sigh/>.")
        if text:
            self.pieces.append(text)
            self.spoken = self.spoken or not text.isspace()

    def _leaf(self, element: Element, tag: str) -> None:
        if tag == "break":
            self._break(element)
        elif tag in INLINE:
            self.pieces.append(f" <{tag}> ")
        elif tag == "say-as":
            self.pieces.append(check_say_as(element.get("interpret-as"), element.get("format"), element.text))
            self.spoken = True
        elif not element.get("alias", "").strip():
            raise _error('<sub> needs a non-empty alias, e.g. <sub alias="World Wide Web">WWW</sub>.')
        else:
            self._text(element.get("alias"))

    def _break(self, element: Element) -> None:
        self.breaks += 1
        if self.breaks > MAX_BREAKS:
            raise _error(f"more than {MAX_BREAKS} <break> elements.")
        seconds = _break_seconds(element.get("time"), element.get("strength"))
        self.paused += seconds
        if self.paused > MAX_TOTAL_PAUSE_S:
            raise _error(f"the breaks add up to more than {MAX_TOTAL_PAUSE_S:g} s of silence.")
        if seconds:
            self.flush(seconds)

    def _end_sentence(self) -> None:
        """Mark a sentence end (a stop is placed at flush); after a child's segment, stop that one."""
        if self.spoken:
            self.pieces.append(_MARK)
        elif self.segments and self.stopped < len(self.segments):  # stopping it again changes nothing
            self.segments[-1] = replace(self.segments[-1], text=_place_stops(self.segments[-1].text + _MARK))
            self.stopped = len(self.segments)
        self.pieces.append(" ")

    def flush(self, pause: float = 0.0) -> None:
        """The open pieces become a segment (whitespace kept for merging) with `pause` after it."""
        has_say_as = any(isinstance(p, SayAs) for p in self.pieces)
        language = self._say_as_language("".join(p for p in self.pieces if isinstance(p, str))) if has_say_as else ""
        text = _place_stops("".join(p if isinstance(p, str) else render_say_as(p.kind, p.fmt, p.content, language)
                                    for p in self.pieces))
        if text or pause:
            self.segments.append(replace(self.scope, text=text, pause_after_s=pause))
        self.pieces, self.spoken = [], False

    @functools.cached_property
    def document_scripts(self) -> dict[str, int]:
        return script_counts(" ".join(self.root.itertext())[:SCRIPT_SAMPLE])

    def _say_as_language(self, plain: str) -> str:
        """xml:lang if given; else the script's language as `normalize_text` decides it (Indic first)."""
        if self.scope.language:
            return self.scope.language
        counts = script_counts(plain[:SCRIPT_SAMPLE]) or self.document_scripts
        pool = {s: n for s, n in counts.items() if s in INDIC_SCRIPTS} or counts
        if not pool:
            return self.default or "en"
        script = max(pool, key=pool.get)
        in_default = self.default is not None and LANGUAGE_SCRIPT[self.default] == script
        return self.default if in_default else SCRIPT_DEFAULT_LANGUAGE[script]


def _finish(raw: list[SsmlSegment]) -> list[SsmlSegment]:
    """Blank runs join the segment before; same-settings neighbours without a pause merge."""
    out: list[SsmlSegment] = []
    for seg in raw:
        blank = not seg.text.strip()
        prev = out[-1] if out else None
        same = prev is not None and prev.pause_after_s == 0 and replace(prev, text="") == replace(seg, text="")
        if prev is not None and (blank or same):
            out[-1] = replace(prev, text=prev.text + seg.text, pause_after_s=prev.pause_after_s + seg.pause_after_s)
        elif not blank or seg.pause_after_s:
            out.append(seg)
    out = [replace(seg, text=" ".join(seg.text.split())) for seg in out]
    total = sum(len(seg.text) for seg in out)
    if not total:
        raise _error("the document has no text to speak.")
    if total > MAX_TEXT_CHARS:
        raise _error(f"the text is {total:,} characters; the limit is {MAX_TEXT_CHARS:,}.")
    return out


def _place_stops(text: str) -> str:
    """Each _MARK -> a stop after the last spoken character before it (before trailing spaces and
    sound tags), unless there is a terminal mark already or nothing was said."""
    parts, last, end = text.split(_MARK), -1, 0  # last: the latest part with spoken text; end: its spoken end
    for k in range(1, len(parts)):
        if found := _spoken_end(parts[k - 1]):  # each part scanned once, when its mark is reached
            last, end = k - 1, found
        if end and parts[last][end - 1] not in SENTENCE_END:
            stop = _STOP.get(dominant_script(parts[last][max(0, end - 80):end]), ".")
            parts[last] = parts[last][:end] + stop + parts[last][end:]
            end += len(stop)
    return "".join(parts)


def _spoken_end(text: str) -> int:
    """The index after the last character that is not a space or an inline sound tag (0: none)."""
    end = len(text)
    while end:
        if text[end - 1].isspace():
            end -= 1
        elif tag := next((t for t in INLINE if text.endswith(f"<{t}>", 0, end)), None):
            end -= len(tag) + 2
        else:
            break
    return end


def _language(tag: str) -> str:
    try:
        return get_language(re.split(r"[-_]", tag.strip(), maxsplit=1)[0]).code
    except PromptError as exc:
        raise _error(f'xml:lang="{tag}": {exc}') from None


def _pace(rate: str) -> str:
    value = rate.strip().lower()
    percent = _PERCENT.fullmatch(value)
    if value in RATE_PACE:
        return RATE_PACE[value]
    if percent and RATE_PERCENT[0] <= (n := float(percent.group(1))) <= RATE_PERCENT[1]:
        return "slow" if n < 90 else "fast" if n > 110 else "steady"
    raise _error(f'<prosody rate="{rate}"> cannot be mapped to the model\'s paces (slow, steady, fast). '
                 f"Use {', '.join(RATE_PACE)} or {RATE_PERCENT[0]:g}% to {RATE_PERCENT[1]:g}% "
                 "(under 90% slow, over 110% fast); <prosody> supports rate only.")


def _break_seconds(time: str | None, strength: str | None) -> float:
    if time is None:
        key = "medium" if strength is None else strength.strip()
        if key not in BREAK_STRENGTH_S:
            raise _error(f'<break strength="{strength}">: use one of {", ".join(BREAK_STRENGTH_S)}.')
        return BREAK_STRENGTH_S[key]
    m = _TIME.fullmatch(time.strip())
    if m is None:
        raise _error(f'<break time="{time}">: write a duration such as 300ms or 1.5s.')
    seconds = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
    if seconds > MAX_BREAK_S:
        raise _error(f'<break time="{time}"> is longer than {MAX_BREAK_S:g} s.')
    return seconds
