"""Captions from word timings: SubRip (.srt) and WebVTT (.vtt), and the timestamps JSON file.

    from rumik_app.align.captions import write_captions
    write_captions("out.srt", audio.timings.words)      # the format follows the suffix: .srt or .vtt
    to_vtt(words)                                       # the text itself

Words are grouped into cues the way subtitle guidelines ask (BBC, Netflix: at most two lines of
about 42 characters, a few seconds each): a cue ends at a sentence's end, before it would pass
MAX_CUE_CHARS or MAX_CUE_SECONDS, or at a pause longer than CUE_PAUSE_SECONDS. Tags
(`<laugh>`) are shown as a sound label, "[laugh]", as captions for deaf viewers do. Light: no numpy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from rumik_app.align import Timings, WordTime
from rumik_app.errors import RumikError
from rumik_app.files import atomic_write

MAX_CUE_CHARS = 84  # two lines of 42
MAX_CUE_SECONDS = 6.0
CUE_PAUSE_SECONDS = 0.8
SENTENCE_END = (".", "?", "!", "।", "॥", "۔", "؟")
CAPTION_SUFFIXES = (".srt", ".vtt")


def cues(words: Sequence[WordTime]) -> list[tuple[float, float, str]]:
    """(start, end, text) per cue, in order (see the module docstring)."""
    out: list[tuple[float, float, str]] = []
    group: list[WordTime] = []
    for word in words:
        if group and _breaks(group, word):
            out.append(_cue(group))
            group = []
        group.append(word)
    if group:
        out.append(_cue(group))
    return out


def _breaks(group: list[WordTime], word: WordTime) -> bool:
    text = " ".join(_shown(w) for w in [*group, word])
    return (group[-1].word.endswith(SENTENCE_END) or len(text) > MAX_CUE_CHARS
            or word.end - group[0].start > MAX_CUE_SECONDS or word.start - group[-1].end > CUE_PAUSE_SECONDS)


def _shown(word: WordTime) -> str:
    return f"[{word.word.strip('<>')}]" if word.kind == "tag" else word.word


def _cue(group: list[WordTime]) -> tuple[float, float, str]:
    return group[0].start, group[-1].end, " ".join(_shown(w) for w in group)


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{separator}{rest % 1000:03d}"


def to_srt(words: Sequence[WordTime]) -> str:
    blocks = [f"{n}\n{_clock(a, ',')} --> {_clock(b, ',')}\n{text}\n" for n, (a, b, text) in enumerate(cues(words), 1)]
    return "\n".join(blocks)


def to_vtt(words: Sequence[WordTime]) -> str:
    blocks = [f"{_clock(a, '.')} --> {_clock(b, '.')}\n{text}\n" for a, b, text in cues(words)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def check_caption_path(path: str | os.PathLike) -> Path:
    """The path, if its suffix names a caption format; a RumikError naming them otherwise."""
    path = Path(path)
    if path.suffix.lower() not in CAPTION_SUFFIXES:
        raise RumikError(f"captions are written as .srt or .vtt; {path.name!r} is neither (name the file out.srt "
                         "or out.vtt).")
    return path


def write_captions(path: str | os.PathLike, words: Sequence[WordTime]) -> Path:
    """Write SubRip or WebVTT by the suffix, atomically."""
    path = check_caption_path(path)
    return atomic_write(path, to_srt(words) if path.suffix.lower() == ".srt" else to_vtt(words))


def write_timestamps(path: str | os.PathLike, timings: Timings) -> Path:
    """The timestamps JSON: {"words": [{word, start, end, kind}], "segments", "aligner", "missing"}."""
    return atomic_write(path, json.dumps(timings.to_dict(), ensure_ascii=False, indent=1))
