"""NoVA: did the system render the requested vocalisation at the requested word? (docs/ARCHITECTURE.md §8)

Command lines (kept stable; outside checks call them exactly)::

    python -m evaluation.nova score --prompts PROMPTS.jsonl --transcripts T.jsonl \\
        --out VERDICTS.jsonl [--spellings MAP.json]
    python -m evaluation.nova aggregate --system NAME \\
        --listener NAME=VERDICTS.jsonl[,VERDICTS_r2.jsonl,...] [--listener ...] \\
        [--unsupported sigh] [--spellings MAP.json] [--csv OUT.csv]

Python API: `score_prompt(prompt, transcript, spellings=None) -> dict`,
`score_records(prompts, transcripts, spellings=None) -> list[dict]`,
`aggregate(system, {listener: [run_verdicts, ...]}, unsupported=()) -> NovaAggregate`.

Inputs. A prompt has `id, text, text_with_mark, nvv, requested_index, n_words`; the one tag
in `text_with_mark` (any `<...>` or `[...]` span) marks the request, `nvv` gives its class.
A transcript line has `id` and either `hyp` (text with inline tags; null = listener error)
or `hyp_tags` (a verifier-style list of `{cls, index}`). A prompt without a transcript
line is a listener error too: no verdict, and left out of every rate.

Scoring a transcript (`hyp`):
1. Tokens: tag spellings become single class tokens via the spelling map (case-insensitive;
   `DEFAULT_SPELLINGS` plus `--spellings`). Unknown `<...>`/`[...]` spans are dropped;
   unknown `(...)` spans are ordinary words. Words are lower-cased with every character
   that is not a letter, digit or combining mark removed; empty tokens are dropped. The
   requested position = number of request words before the tag (recomputed this way; the
   prompt's `requested_index` field is not trusted).
2. Weighted edit-distance alignment of request and transcript tokens: word ins/del 1.0,
   tag ins/del 0.9, word-word substitution 1.0 (0 if equal), tag-tag 0.9 (0 if same class),
   tag-word 3.0. A transcript tag's position = request words consumed before it. Ties keep
   substitutions first, then put unmatched request words before inserted transcript tokens.
3. Coverage = share of request words aligned to an equal or near word (difflib ratio >= 0.8).
   Under 50 % -> verdict not_rendered (both views). The gate only overrides the verdict: the
   tag the ungated verdict would use is still consumed, so a garbled clip that laughs where
   asked is not also charged with an unrequested sound.
4. Verdict, first match wins: rendered (requested class at the requested position),
   wrong_class (another class there), misplaced (requested class elsewhere), not_rendered.
   The tag used is consumed; every other tag is unrequested
   (`spurious_*` = their count), so a duplicate at the position counts once each way.
5. Views: 3-class (laugh, chuckle, sigh) and 2-class (laugh + chuckle = laughter).

Verifier-style `hyp_tags` skip steps 1-3 (coverage null). `cls` is a class name or a
spelling; `index` is the position. Index -1 (heard, position unknown) can never be at the
requested position: such a tag can only be misplaced (requested class) or unrequested.

Aggregation: rendered rate per (listener, class, run) over requests with a verdict; table =
mean over runs; S = (R(laughter) + R(sigh)) / 2; score = mean S over listeners; unrequested
= share of clips with at least one unrequested tag (2-class view; 3-class in the CSV).
A class the system cannot be asked for counts 0. It is unsupported when named with
`--unsupported`, when a `--spellings` map has no spelling for it, or when no verdict file
requests it. Laughter is unsupported only if both laugh and chuckle are.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

import regex

from evaluation.report import markdown_table, read_jsonl, write_csv, write_jsonl
from rumik_app.errors import RumikError, report_user_error

CLASSES = ("laugh", "chuckle", "sigh")
LAUGHTER = "laughter"
TWO_CLASS = {"laugh": LAUGHTER, "chuckle": LAUGHTER, "sigh": "sigh"}
THREE_CLASS = {c: c for c in CLASSES}
VERDICTS = ("rendered", "wrong_class", "misplaced", "not_rendered")
UNKNOWN_INDEX = -1
NEAR_SPELLING_RATIO = 0.8
MIN_COVERAGE = 0.5
# Alignment costs x10 so the DP runs on exact integers (0.9 + 0.9 == 1.8 without rounding).
WORD_INDEL, TAG_INDEL, WORD_SUB, TAG_SUB, TAG_WORD_SUB = 10, 9, 10, 9, 30

# Words naming each class. In any bracket they are default transcript spellings (`<laughs>`,
# `[laughter]`, `(sighing)`); bare, they are accepted for a prompt's `nvv` and a verifier's `cls`.
CLASS_WORDS = {
    "laugh": ("laugh", "laughs", "laughing", "laughter"),
    "chuckle": ("chuckle", "chuckles", "chuckling"),
    "sigh": ("sigh", "sighs", "sighing"),
}
CLASS_ALIASES = {word: cls for cls, words in CLASS_WORDS.items() for word in words}
DEFAULT_SPELLINGS: dict[str, str] = {
    f"{left}{word}{right}": cls for word, cls in CLASS_ALIASES.items() for left, right in ("<>", "[]", "()")
}
CANONICAL_SPELLINGS = {f"<{c}>": c for c in CLASSES}
TAG_SPAN = regex.compile(r"<[^<>\n]{1,40}>|\[[^\[\]\n]{1,40}\]|\([^()\n]{1,40}\)")
NOT_WORD_CHAR = regex.compile(r"[^\p{L}\p{N}\p{M}]+")

Token = tuple[str, str]  # ("w", word) or ("t", class)


def _key(spelling: str) -> str:
    return " ".join(spelling.lower().split())


def load_spellings(
    path: str | Path | None = None, extra: Mapping[str, str | None] | None = None
) -> dict[str, str | None]:
    """The spelling map: `DEFAULT_SPELLINGS` if no file/mapping is given, else the canonical
    `<laugh>`/`<chuckle>`/`<sigh>` plus the given map. A value of null marks a spelling to ignore."""
    given = dict(extra or {})
    if path is not None:
        given.update(json.loads(Path(path).read_text(encoding="utf-8")))
    base = DEFAULT_SPELLINGS if path is None and extra is None else CANONICAL_SPELLINGS
    out: dict[str, str | None] = {_key(k): v for k, v in base.items()}
    for spelling, cls in given.items():
        if cls is not None and cls not in CLASSES:
            raise ValueError(f"Spelling {spelling!r} maps to {cls!r}; classes are {', '.join(CLASSES)} (or null).")
        out[_key(spelling)] = cls
    return out


def supported_classes(spellings: Mapping[str, str | None]) -> frozenset[str]:
    """Classes a system can be asked for, judged from its own spelling map (file contents)."""
    return frozenset(c for c in spellings.values() if c is not None)


def to_class(name: str, spellings: Mapping[str, str | None]) -> str | None:
    """Class of a class name, alias or spelling (`"Laugh"`, `"sighs"`, `"[laughs]"`); None if unknown."""
    key = _key(name)
    return key if key in CLASSES else CLASS_ALIASES.get(key) or spellings.get(key)


def _words(text: str) -> list[Token]:
    return [("w", w) for w in (NOT_WORD_CHAR.sub("", piece) for piece in text.lower().split()) if w]


def tokenize(text: str, spellings: Mapping[str, str | None], mark_class: str | None = None) -> list[Token]:
    """Step 1. With `mark_class`, every `<...>`/`[...]` span is the request mark of that class."""
    text = unicodedata.normalize("NFC", text)
    tokens: list[Token] = []
    pos = 0
    for m in TAG_SPAN.finditer(text):
        tokens += _words(text[pos : m.start()])
        span, pos = m.group(0), m.end()
        key, paren = _key(span), span.startswith("(")
        cls = spellings.get(key)
        if mark_class is not None and (not paren or cls is not None):
            tokens.append(("t", mark_class))
        elif cls is not None:
            tokens.append(("t", cls))
        elif paren and key not in spellings:
            tokens += _words(span)
        # else: an unknown <...>/[...] span, or a spelling mapped to null: dropped
    return tokens + _words(text[pos:])


def _sub_cost(a: Token, b: Token) -> int:
    if a[0] != b[0]:
        return TAG_WORD_SUB
    if a[1] == b[1]:
        return 0
    return WORD_SUB if a[0] == "w" else TAG_SUB


def _indel(t: Token) -> int:
    return WORD_INDEL if t[0] == "w" else TAG_INDEL


def align(req: Sequence[Token], hyp: Sequence[Token]) -> list[tuple[int | None, int | None]]:
    """Step 2: weighted edit-distance alignment as (request index, transcript index) pairs;
    None on one side = deletion/insertion. Forward order."""
    n, m = len(req), len(hyp)
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        d[i][0] = d[i - 1][0] + _indel(req[i - 1])
    for j in range(1, m + 1):
        d[0][j] = d[0][j - 1] + _indel(hyp[j - 1])
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i][j] = min(
                d[i - 1][j - 1] + _sub_cost(req[i - 1], hyp[j - 1]),
                d[i - 1][j] + _indel(req[i - 1]),
                d[i][j - 1] + _indel(hyp[j - 1]),
            )
    pairs: list[tuple[int | None, int | None]] = []
    i, j = n, m
    while i or j:  # backwards: substitution, then insertion (so deletions end up first going forward)
        if i and j and d[i][j] == d[i - 1][j - 1] + _sub_cost(req[i - 1], hyp[j - 1]):
            i, j = i - 1, j - 1
            pairs.append((i, j))
        elif j and d[i][j] == d[i][j - 1] + _indel(hyp[j - 1]):
            j -= 1
            pairs.append((None, j))
        else:
            i -= 1
            pairs.append((i, None))
    return pairs[::-1]


def place_tags(req: Sequence[Token], hyp: Sequence[Token]) -> tuple[list[tuple[str, int]], float]:
    """Steps 2-3: (class, position) of every transcript tag, and the coverage."""
    tags: list[tuple[str, int]] = []
    consumed = spoken = 0
    for i, j in align(req, hyp):
        if j is not None and hyp[j][0] == "t":
            tags.append((hyp[j][1], consumed))
        if i is not None and req[i][0] == "w":
            consumed += 1
            if j is not None and hyp[j][0] == "w":
                a, b = req[i][1], hyp[j][1]
                spoken += a == b or difflib.SequenceMatcher(None, a, b).ratio() >= NEAR_SPELLING_RATIO
    n_words = sum(t[0] == "w" for t in req)
    return tags, (spoken / n_words if n_words else 1.0)


def verdict(tags: Sequence[tuple[str, int]], cls: str, index: int, fold: Mapping[str, str]) -> tuple[str, int]:
    """Step 4 in one view: (verdict, number of unrequested tags)."""
    view = [(fold[c], p) for c, p in tags]
    want = fold[cls]
    for name, hit in (
        ("rendered", lambda c, p: c == want and p == index),
        ("wrong_class", lambda c, p: p == index),
    ):
        if any(hit(c, p) for c, p in view):
            return name, len(view) - 1
    if any(c == want for c, _ in view):
        return "misplaced", len(view) - 1
    return "not_rendered", len(view)


def _prompt_request(prompt: Mapping, spellings: Mapping[str, str | None]) -> tuple[list[Token], str, int]:
    cls = to_class(str(prompt["nvv"]), spellings)
    if cls is None:
        raise ValueError(
            f"Prompt {prompt.get('id')!r}: unknown nvv {prompt['nvv']!r}; classes are {', '.join(CLASSES)}."
        )
    marked = prompt.get("text_with_mark")
    if marked:
        req = tokenize(marked, spellings, mark_class=cls)
        tag_at = [k for k, t in enumerate(req) if t[0] == "t"]
        if len(tag_at) != 1:
            raise ValueError(f"Prompt {prompt.get('id')!r}: text_with_mark needs exactly one tag, found {len(tag_at)}.")
        return req, cls, sum(t[0] == "w" for t in req[: tag_at[0]])
    words = _words(str(prompt["text"]))
    index = int(prompt["requested_index"])
    return words[:index] + [("t", cls)] + words[index:], cls, index


def _verifier_tags(raw: Iterable[Mapping], spellings: Mapping[str, str | None], pid: object) -> list[tuple[str, int]]:
    tags = []
    for item in raw:
        cls, index = to_class(str(item["cls"]), spellings), item.get("index", UNKNOWN_INDEX)
        if cls is None or isinstance(index, bool) or not isinstance(index, int) or index < UNKNOWN_INDEX:
            raise ValueError(f"Transcript {pid!r}: bad hyp_tags entry {dict(item)!r}.")
        tags.append((cls, index))
    return tags


def score_prompt(
    prompt: Mapping, transcript: Mapping | None, spellings: Mapping[str, str | None] | None = None
) -> dict:
    """Verdict line for one prompt. `transcript` None, or with null `hyp`/`hyp_tags`, = listener error."""
    spellings = load_spellings() if spellings is None else spellings
    req, cls, index = _prompt_request(prompt, spellings)
    transcript = transcript or {}
    if transcript.get("hyp_tags") is not None:
        tags, coverage = _verifier_tags(transcript["hyp_tags"], spellings, prompt["id"]), None
    elif transcript.get("hyp") is not None:
        tags, coverage = place_tags(req, tokenize(str(transcript["hyp"]), spellings))
    else:
        tags, coverage = None, None
    out: dict = {
        "id": prompt["id"],
        "nvv": cls,
        "requested_index": index,
        "coverage": coverage,
        "listener_error": tags is None,
    }
    views = {"3class": THREE_CLASS, "2class": TWO_CLASS}
    results = {
        view: verdict(tags, cls, index, fold) if tags is not None else (None, None) for view, fold in views.items()
    }
    gated = coverage is not None and coverage < MIN_COVERAGE
    for view, (name, _) in results.items():
        out[f"verdict_{view}"] = "not_rendered" if gated and name else name
    for view, (_, spurious) in results.items():
        out[f"spurious_{view}"] = spurious
    out["hyp_tags"] = None if tags is None else [{"cls": c, "index": p} for c, p in tags]
    return out


def score_records(
    prompts: Iterable[Mapping], transcripts: Iterable[Mapping], spellings: Mapping[str, str | None] | None = None
) -> list[dict]:
    """Verdicts for every prompt, in prompt order; transcripts are matched by `id`."""
    spellings = load_spellings() if spellings is None else spellings
    by_id: dict[object, Mapping] = {}
    for t in transcripts:
        if t["id"] in by_id:
            raise ValueError(f"Duplicate transcript id {t['id']!r}.")
        by_id[t["id"]] = t
    return [score_prompt(p, by_id.get(p["id"]), spellings) for p in prompts]


# ----------------------------------------------------------------------------- aggregation


@dataclass(frozen=True)
class ListenerSummary:
    """One listener's rates for one system, each the mean over runs."""

    listener: str
    runs: int
    clips: float  # scored clips per run
    listener_errors: int  # summed over runs
    laughter: float
    sigh: float
    s: float
    rendered: dict[str, float]  # 3-class rendered rate per class
    split: dict[str, dict[str, float | None]]  # 3-class verdict shares per requested class; None: no requests
    requests: dict[str, float]  # scored requests per class per run
    unrequested: float  # 2-class view
    unrequested_3class: float


@dataclass(frozen=True)
class NovaAggregate:
    system: str
    listeners: list[ListenerSummary]
    score: float
    unsupported: frozenset[str] = field(default_factory=frozenset)  # declared or never requested
    never_requested: frozenset[str] = field(default_factory=frozenset)

    def _main_columns(self) -> list[tuple[str, str, Callable[[ListenerSummary], object]]]:
        """(markdown header, CSV header, value) for the main table."""
        return [
            ("listener", "listener", lambda x: x.listener),
            ("runs", "runs", lambda x: x.runs),
            ("clips/run", "clips_per_run", lambda x: x.clips),
            ("listener errors", "listener_errors", lambda x: x.listener_errors),
            ("laughter (union)", "laughter", lambda x: x.laughter),
            ("sigh", "sigh", lambda x: x.sigh),
            ("S", "S", lambda x: x.s),
            ("laugh", "laugh", lambda x: x.rendered["laugh"]),
            ("chuckle", "chuckle", lambda x: x.rendered["chuckle"]),
            ("unrequested", "unrequested", lambda x: x.unrequested),
        ]

    def markdown(self) -> str:
        cols = self._main_columns()
        rows = [[get(x) for _, _, get in cols] for x in self.listeners]
        split = [[x.listener, c, x.requests[c], *x.split[c].values()] for x in self.listeners for c in CLASSES]
        lines = [
            f"## NoVA: {self.system}",
            "",
            "Rendered rates at the requested word, mean over runs. S = (laughter + sigh) / 2.",
            "",
            markdown_table([head for head, _, _ in cols], rows),
            "",
            f"**Score (mean S over {len(self.listeners)} listener(s)): {self.score:.3f}**",
        ]
        declared = sorted(self.unsupported - self.never_requested)
        if declared:
            lines.append(f"Classes the system cannot be asked for (counted 0): {', '.join(declared)}")
        if self.never_requested:
            lines.append(f"Classes no verdict file requests (counted 0): {', '.join(sorted(self.never_requested))}")
        lines += ["", "### 3-class verdict split (share of scored requests, mean over runs)", ""]
        lines.append(markdown_table(["listener", "class", "requests/run", *VERDICTS], split))
        return "\n".join(lines)

    def csv_headers(self) -> list[str]:
        split = [f"{c}_{v}" for c in CLASSES for v in VERDICTS]
        return ["system", *(name for _, name, _ in self._main_columns()), "score", "unrequested_3class", *split]

    def csv_rows(self) -> list[list[object]]:
        return [
            [self.system, *(get(x) for _, _, get in self._main_columns()), self.score, x.unrequested_3class]
            + [x.split[c][v] for c in CLASSES for v in VERDICTS]
            for x in self.listeners
        ]


def _rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


def _mean_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return mean(known) if known else None


def _shares(requests: Sequence[Mapping]) -> dict[str, float | None]:
    """Share of each 3-class verdict among `requests`; None for every verdict if there are none."""
    return {
        v: (sum(x["verdict_3class"] == v for x in requests) / len(requests) if requests else None) for v in VERDICTS
    }


def _run_stats(verdicts: Sequence[Mapping], unsupported: frozenset[str]) -> dict:
    scored = [v for v in verdicts if not v.get("listener_error")]
    by_cls = {c: [v for v in scored if v["nvv"] == c] for c in CLASSES}
    laughs = by_cls["laugh"] + by_cls["chuckle"]
    stats = {
        "clips": len(scored),
        "errors": len(verdicts) - len(scored),
        "requests": {c: len(by_cls[c]) for c in CLASSES},
        "split": {c: _shares(by_cls[c]) for c in CLASSES},
        "laughter": _rate(sum(x["verdict_2class"] == "rendered" for x in laughs), len(laughs)),
        "unrequested": _rate(sum(bool(x["spurious_2class"]) for x in scored), len(scored)),
        "unrequested_3class": _rate(sum(bool(x["spurious_3class"]) for x in scored), len(scored)),
    }
    stats["rendered"] = {c: 0.0 if c in unsupported else stats["split"][c]["rendered"] or 0.0 for c in CLASSES}
    if {"laugh", "chuckle"} <= unsupported:
        stats["laughter"] = 0.0
    return stats


def aggregate(
    system: str, listeners: Mapping[str, Sequence[Sequence[Mapping]]], unsupported: Iterable[str] = ()
) -> NovaAggregate:
    """Aggregate verdict lines: `listeners` maps a listener name to its runs (lists of verdicts)."""
    if not listeners:
        raise ValueError("aggregate needs at least one listener with one run")
    off = set()
    for name in unsupported:
        key = _key(name)
        if key not in (*CLASSES, LAUGHTER):
            raise ValueError(f"Unknown class {name!r} in unsupported; use {', '.join((*CLASSES, LAUGHTER))}.")
        off |= {"laugh", "chuckle"} if key == LAUGHTER else {key}
    every = [v for runs in listeners.values() for run in runs for v in run]
    never = frozenset(c for c in CLASSES if not any(v.get("nvv") == c for v in every))
    off_set = frozenset(off) | never
    summaries = []
    for name, runs in listeners.items():
        if not runs:
            raise ValueError(f"Listener {name!r} has no runs.")
        st = [_run_stats(run, off_set) for run in runs]
        avg = lambda key, sub=None, st=st: mean(s[key][sub] if sub else s[key] for s in st)  # noqa: E731
        laughter, sigh = avg("laughter"), avg("rendered", "sigh")
        summaries.append(
            ListenerSummary(
                listener=name,
                runs=len(runs),
                clips=float(avg("clips")),
                listener_errors=sum(s["errors"] for s in st),
                laughter=laughter,
                sigh=sigh,
                s=(laughter + sigh) / 2,
                rendered={c: avg("rendered", c) for c in CLASSES},
                split={c: {v: _mean_known(s["split"][c][v] for s in st) for v in VERDICTS} for c in CLASSES},
                requests={c: float(mean(s["requests"][c] for s in st)) for c in CLASSES},
                unrequested=avg("unrequested"),
                unrequested_3class=avg("unrequested_3class"),
            )
        )
    return NovaAggregate(system, summaries, mean(x.s for x in summaries), off_set, never)


# ----------------------------------------------------------------------------- command line


def _parse_listener(spec: str) -> tuple[str, list[str]]:
    name, sep, files = spec.partition("=")
    paths = [p for p in files.split(",") if p]
    if not sep or not name or not paths:
        raise argparse.ArgumentTypeError(f"--listener wants NAME=FILE[,FILE...], got {spec!r}")
    return name, paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.nova", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sc = sub.add_parser("score", help="verdict per prompt from listener transcripts")
    sc.add_argument("--prompts", required=True, help="NoVA prompts JSONL")
    sc.add_argument("--transcripts", required=True, help="listener transcripts JSONL (hyp or hyp_tags)")
    sc.add_argument("--out", required=True, help="verdicts JSONL to write")
    sc.add_argument("--spellings", help="JSON map of tag spellings to laugh/chuckle/sigh")
    ag = sub.add_parser("aggregate", help="rates, S and score from verdict files")
    ag.add_argument("--system", required=True)
    listener_help = "NAME=VERDICTS.jsonl[,RUN2.jsonl,...]"
    ag.add_argument("--listener", required=True, action="extend", nargs="+", type=_parse_listener, help=listener_help)
    classes = [*CLASSES, LAUGHTER]
    ag.add_argument("--unsupported", action="extend", nargs="+", default=[], choices=classes, help="count these as 0")
    ag.add_argument("--spellings", help="the system's spelling map; classes it lacks count 0")
    ag.add_argument("--csv", help="also write the table as CSV")
    args = parser.parse_args(argv)
    try:
        if args.command == "score":
            spellings = load_spellings(args.spellings) if args.spellings else None
            transcripts = read_jsonl(args.transcripts)
            prompts = read_jsonl(args.prompts)
            unknown = {t["id"] for t in transcripts} - {p["id"] for p in prompts}
            if unknown:
                print(f"warning: {len(unknown)} transcript id(s) match no prompt and are ignored", file=sys.stderr)
            verdicts = score_records(prompts, transcripts, spellings)
            write_jsonl(args.out, verdicts)
            errors = sum(v["listener_error"] for v in verdicts)
            print(f"{len(verdicts)} verdicts ({errors} listener errors) -> {args.out}")
            return 0
        listeners: dict[str, list[list[dict]]] = {}
        for name, paths in args.listener:
            if name in listeners:
                raise ValueError(f"Listener {name!r} given twice; list its runs comma-separated.")
            listeners[name] = [read_jsonl(p) for p in paths]
        unsupported = list(args.unsupported)
        if args.spellings:
            spellings = json.loads(Path(args.spellings).read_text(encoding="utf-8"))
            unsupported += [c for c in CLASSES if c not in supported_classes(spellings)]
        result = aggregate(args.system, listeners, unsupported)
        print(result.markdown())
        if args.csv:
            write_csv(args.csv, result.csv_headers(), result.csv_rows())
        return 0
    except (RumikError, OSError, ValueError, KeyError) as exc:
        return report_user_error(exc)


if __name__ == "__main__":
    sys.exit(main())
