"""Word timestamps for a clip whose words are known: forced alignment from the command line
(docs/ARCHITECTURE.md §16).

    python -m evaluation.align clip.wav --text "hello there, world" --language en --out words.json
    python -m evaluation.align clip.wav --text "नमस्ते दुनिया" --language hi --out words.json \\
        --aligner indicconformer:/models/indicconf
    python -m evaluation.align clip.wav --text "It costs 5 dollars" --language en --normalize --out words.json

Writes `[{"word", "start", "end"}]` (seconds, 1 ms) atomically and prints a table. The words
are TEXT split at whitespace, as typed (punctuation stays on them; `--normalize` first spells
numbers, dates, ... out with `rumik_app.text.normalize.normalize_text`, and the words are then
the normalised ones). The aligner is the first of `--aligner` (default: pocketsphinx) that covers
the language in the script most of the words are written in; words in another script are
aligned as wildcards (`rumik_app.align.STAR`), so they get the stretch between their neighbours.
Boundaries are snapped to the clip's pauses (`rumik_app.align.refine`) unless `--no-refine`.
The clip is at most MAX_ALIGN_SECONDS (60 s), refused from its header when longer.

Errors (an unreadable clip, no aligner for the language, words that cannot be placed) are one
`error: ...` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from evaluation.audio_io import load_native
from rumik_app.align import (
    DEFAULT_ALIGNERS,
    MAX_ALIGN_SECONDS,
    ROUND,
    STAR,
    Aligner,
    AlignerSet,
    AlignmentError,
    word_script,
)
from rumik_app.align.refine import refine_boundaries
from rumik_app.errors import user_errors
from rumik_app.files import atomic_write
from rumik_app.text.languages import dominant_script


def aligned_words(words: Sequence[str], language: str, aligners: AlignerSet) -> tuple[Aligner, list[str]]:
    """(the aligner, the words it is given): the first aligner that covers the language in
    the words' dominant script, words of other scripts replaced by STAR. AlignmentError (with
    the fix) when none covers it."""
    script = dominant_script(" ".join(words))
    aligner = aligners.find(language, script)
    if aligner is None:
        raise AlignmentError(aligners.why_none(language, script))
    given = [w if word_script(w) in (None, script) else STAR for w in words]
    return aligner, given


def align_clip(path: str, text: str, language: str, specs: Sequence[str], normalize: bool = False,
               refine: bool = True) -> list[dict]:
    """[{"word", "start", "end"}] of TEXT's whitespace words in the clip at `path`."""
    if normalize:
        from rumik_app.text.normalize import normalize_text

        text = normalize_text(text, language)
    words = text.split()
    if not words:
        raise AlignmentError("--text has no words to align.")
    aligners = AlignerSet.load(specs, strict=True)
    aligner, given = aligned_words(words, language, aligners)
    clip = load_native(path, max_seconds=MAX_ALIGN_SECONDS)
    spans = aligner.align(clip.samples, clip.sample_rate, given, language)
    if refine:
        spans = refine_boundaries(clip.samples, clip.sample_rate, spans)
    return [{"word": w, "start": round(a, ROUND), "end": round(b, ROUND)}
            for w, (a, b) in zip(words, spans, strict=True)]


def table(rows: list[dict]) -> str:
    """The words as a fixed-width table: start, end, word."""
    lines = [f"{'start':>8} {'end':>8}  word"]
    lines += [f"{r['start']:8.3f} {r['end']:8.3f}  {r['word']}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("clip", help="audio file (wav, flac, ogg, mp3, ...), at most 60 s")
    parser.add_argument("--text", required=True, help="the words spoken in the clip")
    parser.add_argument("--language", required=True, help="ISO code or name, e.g. en, hi, Tamil")
    parser.add_argument("--out", required=True, help="JSON file to write: [{word, start, end}]")
    parser.add_argument("--aligner", action="append", default=None,
                        help="NAME[:ARG], repeatable, first covering one wins (default: pocketsphinx); "
                             "indicconformer[:PATH], ctc:PATH")
    parser.add_argument("--normalize", action="store_true", help="spell numbers, dates, ... out first")
    parser.add_argument("--no-refine", action="store_true", help="keep the aligner's boundaries as they are")
    args = parser.parse_args(argv)
    with user_errors(OSError):
        rows = align_clip(args.clip, args.text, args.language, args.aligner or DEFAULT_ALIGNERS,
                          normalize=args.normalize, refine=not args.no_refine)
        atomic_write(args.out, json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
        print(table(rows))
        print(f"{len(rows)} words -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
