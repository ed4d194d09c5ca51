"""Text normalisation speed: `normalize_text` on 2,000 characters of mixed Indic + English text.

    python benchmarks/normalize_speed.py              # 200 repeats per text
    python benchmarks/normalize_speed.py --repeats 50

Times `rumik_app.normalize.normalize_text` (what every synthesis request runs before its
prompt is built) on two 2,000-character texts:

  dense   numbers everywhere: money with paise, dates, times, phone numbers, units,
          ordinals, native digits, code-switched Hindi/English, tags; 13 languages;
  prose   everyday sentences in 13 languages with a few numbers (the common case).

Warm runs (after the first call has loaded the library and the CLDR data) are reported as
median and best milliseconds, next to `evaluation.text.normalize` (the scoring normaliser: one
NFC + a few regex passes) on the same text in the same run as a machine-independent
reference. The cold first call is reported separately. Goal: dense text under 20 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_MS = 20.0
LENGTH = 2000
DENSE = (
    "कल meeting 3 बजे है, ₹2,50,000 का payment 15/08/2026 तक करना है। Call +91 98765 43210 at 10:30 am. "
    "তাপমাত্রা ৩৫°C, ৫০% বৃষ্টি। சென்னை 10-12 km தூரம், 5ஆவது நாள். Dr. Rao paid $4.99 on 1st Jan 2024. "
    "ఈ రోజు 22:15 కి ₹1,200.50 చెల్లించాను. <laugh> ಡಾ. ರಾಜ್ 5ನೇ ತರಗತಿ. ഓണം 26/08/2026 നാണ്. "
    "اس کتاب کی قیمت ₹450 ہے۔ ਮੇਰੀ ਉਡਾਣ 05/09/2025 ਨੂੰ ਸਵੇਰੇ 8:15 ਵਜੇ ਹੈ। આ ચોપડીની કિંમત ₹275 છે. "
)
PROSE = (
    "नमस्ते! आज मौसम बहुत सुहाना है, चलो बाहर टहलने चलते हैं। शुभ सकाल! आज আবহাওয়াটা খুব সুন্দর। "
    "Good morning! The tea is ready, come and sit with us for a while. வணக்கம்! இன்று வானிலை அருமை. "
    "నమస్కారం! ఈ రోజు వాతావరణం చాలా బాగుంది. ನಮಸ್ಕಾರ! ಇಂದು ಹವಾಮಾನ ಚೆನ್ನಾಗಿದೆ. <sigh> ട്രെയിൻ 3 മണിക്കാണ്. "
    "السلام علیکم! آج موسم بہت خوشگوار ہے۔ ਅੱਜ ਮੌਸਮ ਬਹੁਤ ਵਧੀਆ ਹੈ। આજે હવામાન ખૂબ સરસ છે. We leave at 7. "
)


def fit(text: str, length: int = LENGTH) -> str:
    return (text * (length // len(text) + 1))[:length]


def timed(fn, text: str, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(text)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args(argv)

    start = time.perf_counter()
    from rumik_app.text.normalize import normalize_text

    normalize_text(fit(DENSE))
    cold_ms = (time.perf_counter() - start) * 1000
    from evaluation.text import normalize as scoring_normalize

    print(f"normalize_text, {LENGTH} characters, {args.repeats} warm runs each (cold first call incl. "
          f"imports and CLDR data: {cold_ms:.0f} ms)")
    verdict = True
    for name, text in (("dense", fit(DENSE)), ("prose", fit(PROSE))):
        ours = timed(normalize_text, text, args.repeats)
        ref = timed(scoring_normalize, text, args.repeats)
        median, best = statistics.median(ours), min(ours)
        ratio = median / statistics.median(ref)
        print(f"  {name:5}  median {median:6.2f} ms  best {best:6.2f} ms  "
              f"({ratio:.1f}x evaluation.text.normalize on the same text: {statistics.median(ref):.2f} ms)")
        if name == "dense":
            verdict = median < GOAL_MS
    print(f"goal: dense text under {GOAL_MS:.0f} ms (median) -> {'PASS' if verdict else 'FAIL'}")
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
