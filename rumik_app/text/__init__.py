"""The text front end (docs/ARCHITECTURE.md §3, §5, §11), torch-free.

    from rumik_app.text import normalize_text
    normalize_text("₹2,50,000 on 15/08/2026")    # numbers, money, dates as words
    from rumik_app.text.chunking import split_text
    split_text("पहला वाक्य। दूसरा वाक्य!", max_seconds=16.0)

Modules: `normalize` (normalise_text and its CLI), `rules` (the patterns and how each is
read), `numwords` (number words, indic-numtowords repaired), `data` (every other word:
CLDR and verified tables), `languages` (the 23 languages, scripts, speaking rates),
`chunking` (long text into sentence chunks of bounded expected speech).
"""

from rumik_app.text.normalize import normalize_text

__all__ = ["normalize_text"]
