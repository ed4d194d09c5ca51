"""Text front end at its bounds: lexicons with MAX_ENTRIES entries, the largest legal SSML, refused attacks.

    python benchmarks/text_bounds.py               # 20 repeats per row
    python benchmarks/text_bounds.py --repeats 5

Every synthesis request may carry lexicons and SSML, so their worst legal inputs and the
hostile documents they refuse must cost about what the normaliser (which every request runs)
costs on the same text. Each row is the median over warm runs, and its ratio against
`normalize_text` on a 4,000-character text measured in the same run:

  lexicon build     apply_lexicons with 5,000 entries, its table not yet built (first request)
  lexicon cached    the same again (every later request with that lexicon)
  ssml largest      parse_ssml on the largest legal documents (tags, spell-out, prosody)
  ssml refused      parse_ssml refusing 5 MB, 10,000-deep and too-many-element documents
  pls refused       read_lexicon refusing billion laughs, quadratic blow-up, 140,000-deep, 5 MB

Goal: every row at most GOAL_RATIO x the reference. The tests check what bounds the work
(one table per lexicon, bounded memory); the time is measured here, not asserted there.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_RATIO = 10.0
TEXT_CHARS = 4_000
PLS_HEAD = '<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa"'


def median_ms(work: Callable[[], object], repeats: int, before: Callable[[], object] = lambda: None) -> float:
    times = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def refusing(parse: Callable[[str], object], documents: list[str]) -> Callable[[], None]:
    """Parses each document, which must be refused with a PromptError."""
    from rumik_app.errors import PromptError

    def run() -> None:
        for document in documents:
            try:
                parse(document)
            except PromptError:
                continue
            raise SystemExit(f"not refused: {document[:60]!r}...")
    return run


def lexicon_rows(repeats: int) -> dict[str, float]:
    from rumik_app.text import lexicon

    rng = random.Random(38)
    words = list(dict.fromkeys("".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9)))
                                for _ in range(8_000)))[:lexicon.MAX_ENTRIES]
    big = lexicon.Lexicon("big", tuple(lexicon.LexiconEntry(w, w.upper() + " 1") for w in words))
    text = " ".join(rng.choice(words) for _ in range(1_000))[:TEXT_CHARS]
    apply = lambda: lexicon.apply_lexicons(text, [big], "en")  # noqa: E731
    return {"lexicon build": median_ms(apply, repeats, before=lexicon._TABLES.clear),
            "lexicon cached": median_ms(apply, repeats)}


def ssml_rows(repeats: int) -> dict[str, float]:
    from rumik_app.text.ssml import MAX_ELEMENTS, MAX_SSML_BYTES, parse_ssml

    def speak(body: str) -> str:
        return f'<speak version="1.0" xml:lang="en">{body}</speak>'
    largest = [speak("<s>a<laugh/></s>" * 495),
               speak("<s>" + "a " * 24_990 + '<say-as interpret-as="digits">1</say-as></s>'),
               speak('<prosody rate="fast">a</prosody><prosody rate="slow">b</prosody>' * 450),
               speak(('<say-as interpret-as="spell-out">' + "9" * 200 + "</say-as>") * 30)]
    attacks = [speak("a " * 2_500_000), speak("न" * (MAX_SSML_BYTES - 20)), "<speak>" + "<s>" * 10_000 + "x",
               speak("<laugh/>" * (MAX_ELEMENTS + 1))]
    return {"ssml largest": median_ms(lambda: [parse_ssml(doc) for doc in largest], repeats),
            "ssml refused": median_ms(refusing(parse_ssml, attacks), repeats)}


def pls_rows(repeats: int) -> dict[str, float]:
    from rumik_app.text.lexicon_io import read_lexicon

    laughs = ('<?xml version="1.0"?><!DOCTYPE lexicon [<!ENTITY lol "lol">'
              + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
                        for i in range(1, 10))
              + f']>{PLS_HEAD} xml:lang="en"><lexeme><grapheme>a</grapheme><alias>&lol9;</alias></lexeme></lexicon>')
    quadratic = '<!DOCTYPE lexicon [<!ENTITY a "' + "x" * 50_000 + '">]><lexicon>' + "&a;" * 10_000 + "</lexicon>"
    deepest = "<a>" * 140_000 + "</a>" * 140_000
    five_mb = (f'{PLS_HEAD} xml:lang="en">' + "<lexeme><grapheme>a</grapheme><alias>b</alias></lexeme>" * 95_000
               + "</lexicon>")
    return {"pls refused": median_ms(refusing(lambda doc: read_lexicon(doc, "pls"),
                                              [laughs, quadratic, deepest, five_mb]), repeats)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)

    from benchmarks.normalize_speed import DENSE, fit
    from rumik_app.text.normalize import normalize_text

    text = fit(DENSE, TEXT_CHARS)
    normalize_text(text)  # imports and CLDR data before timing
    reference = median_ms(lambda: normalize_text(text), args.repeats)
    rows = {**lexicon_rows(args.repeats), **ssml_rows(args.repeats), **pls_rows(args.repeats)}
    print(f"reference: normalize_text on {TEXT_CHARS:,} characters of dense mixed text, {reference:.2f} ms "
          f"(median of {args.repeats})")
    print(f"{'row':16} {'ms':>9} {'x reference':>12}")
    verdict = True
    for name, ms in rows.items():
        ratio = ms / reference
        verdict &= ratio <= GOAL_RATIO
        print(f"{name:16} {ms:9.2f} {ratio:11.2f}x")
    print(f"goal: every row <= {GOAL_RATIO:.0f}x the reference -> {'PASS' if verdict else 'FAIL'}")
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
