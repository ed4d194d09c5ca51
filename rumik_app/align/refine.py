"""Word boundaries snapped to the audio's own pauses, after an aligner (docs/ARCHITECTURE.md §16).

    from rumik_app.align.refine import refine_boundaries, pauses
    spans = aligner.align(samples, 24000, words, "en")
    spans = refine_boundaries(samples, 24000, spans)   # [(start_s, end_s), ...], same count and order
    pauses(samples, 24000)                             # [(start_s, end_s), ...] of the clear pauses

An aligner's boundaries are only as fine as its frames (10 ms for pocketsphinx, 80 ms for
IndicConformer), and it often gives a word's weak ending (a released stop, a fading vowel) to the
silence after it, or ends a word at a stop's closure. Where the audio has a clear pause, its edges
are the truth. A pause is a run of at least MIN_PAUSE_S whose FRAME_S frames all lie FLOOR_DB
below the clip's peak (the clip's leading and trailing quiet count at any length).

A word's end moves to the start of a pause, and its start to the end of one, when that pause edge
lies within REACH_S of the aligner's boundary, counting only the audible frames in between (a
pause behind a quiet stop closure is still in reach; one behind a second of speech the aligner
left unassigned is not). Among the pauses in reach the longest wins: a closure inside a word is a
short pause near the boundary too. So:

- between two words the aligner separated, the first word's end and the second's start snap,
  to one pause (the gap) or to two (speech neither word owns lies between them);
- words the aligner made abut snap only to one pause in reach of both (then it is their gap);
  words that abut in the audio, with no pause between them, keep the aligner's boundary;
- the first word's start snaps to the leading silence, the last word's end to the trailing one.
A boundary with no pause in reach stays where the aligner put it. Spans never reorder or overlap,
and none is emptied: a snap that would do so is skipped.

Numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FRAME_S = 0.005  # energy frame (seconds)
FLOOR_DB = -40.0  # quiet: a frame's RMS this far below the clip's sample peak
MIN_PAUSE_S = 0.030  # shorter quiet runs (inside a word, between two close words) are not pauses
REACH_S = 0.150  # audible seconds between the aligner's boundary and a pause edge it may snap to
LONG_PAUSE_S = 0.100  # pauses at least this long are all between words: the nearest of them wins
SLACK_S = 0.020  # an aligner's boundary this far inside a pause still counts as in it (its frames are 10-80 ms)

Span = tuple[float, float]


class Quiet:
    """A clip's quiet frames and its pauses (see the module docstring).

    quiet: bool [n] per FRAME_S frame; audible: cumulative count of audible frames [n + 1];
    pauses: (start_s, end_s) of each pause, in order."""

    def __init__(self, samples: np.ndarray, sample_rate: int, floor_db: float = FLOOR_DB,
                 min_pause_s: float = MIN_PAUSE_S) -> None:
        x = np.asarray(samples, dtype=np.float64)
        self.frame = max(1, round(FRAME_S * sample_rate))
        self.frame_s = self.frame / sample_rate
        n = -(-len(x) // self.frame)
        padded = np.zeros(n * self.frame)
        padded[: len(x)] = x
        rms = np.sqrt((padded.reshape(n, self.frame) ** 2).mean(axis=1))
        peak = float(np.max(np.abs(x))) if x.size else 0.0
        self.quiet = rms <= peak * 10 ** (floor_db / 20) if peak > 0 else np.zeros(n, dtype=bool)
        self.audible = np.concatenate(([0], np.cumsum(~self.quiet)))
        edges = np.flatnonzero(np.diff(np.concatenate(([0], self.quiet.astype(np.int8), [0]))))
        self.pauses: list[Span] = []
        for a, b in zip(edges[::2], edges[1::2], strict=True):
            start, end = a * self.frame_s, min(b * self.frame, len(x)) / sample_rate
            if end - start >= min_pause_s or a == 0 or b == n:
                self.pauses.append((float(start), float(end)))

    def audible_between(self, a: float, b: float) -> float:
        """Seconds of audible (not quiet) frames between times a and b (either order)."""
        lo, hi = sorted((a, b))
        n = len(self.quiet)
        i, j = (min(n, max(0, round(t / self.frame_s))) for t in (lo, hi))
        return float(self.audible[j] - self.audible[i]) * self.frame_s


def pauses(samples: np.ndarray, sample_rate: int, floor_db: float = FLOOR_DB,
           min_pause_s: float = MIN_PAUSE_S) -> list[Span]:
    """The clear pauses of a clip [N] (float, mono) as (start_s, end_s), in order: runs of
    FRAME_S frames with RMS `floor_db` below the sample peak, at least `min_pause_s` long
    (the runs touching the clip's start or end at any length). [] for a silent clip."""
    quiet = Quiet(samples, sample_rate, floor_db, min_pause_s)
    return [] if quiet.quiet.all() else quiet.pauses


def _best(quiet: Quiet, candidates: list[Span], edge: int, t: float) -> Span | None:
    """The pause to snap to: the longest (lengths past LONG_PAUSE_S all count as equal), then the
    one whose `edge` (0: start, 1: end) has the least audio between it and the boundary t."""
    if not candidates:
        return None
    return max(candidates, key=lambda p: (min(p[1] - p[0], LONG_PAUSE_S), -quiet.audible_between(p[edge], t)))


def _end_pause(quiet: Quiet, word: Span) -> Span | None:
    """The pause a word's end snaps to (its start), or None: one that begins after the word's
    end, or holds it (the aligner gave the word some of the pause), within reach."""
    start, end = word
    return _best(quiet, [p for p in quiet.pauses if p[0] > start and p[1] >= end - SLACK_S
                         and quiet.audible_between(end, p[0]) <= REACH_S], 0, end)


def _start_pause(quiet: Quiet, word: Span) -> Span | None:
    """The pause a word's start snaps to (its end), or None: one that ends before the word's
    start, or holds it, within reach."""
    start, end = word
    return _best(quiet, [p for p in quiet.pauses if p[1] < end and p[0] <= start + SLACK_S
                         and quiet.audible_between(p[1], start) <= REACH_S], 1, start)


def refine_boundaries(samples: np.ndarray, sample_rate: int, spans: Sequence[Span]) -> list[Span]:
    """`spans` (seconds, in order, non-overlapping: an aligner's, one per word) with each boundary
    snapped to a clear pause of `samples` [N] within reach (see the module docstring)."""
    out = [(float(a), float(b)) for a, b in spans]
    quiet = Quiet(samples, sample_rate)
    if not out or quiet.quiet.all():
        return out
    lead = _start_pause(quiet, out[0])
    if lead is not None:
        out[0] = (lead[1], out[0][1])
    for i in range(len(out) - 1):
        left, right = out[i], out[i + 1]
        end, start = _end_pause(quiet, left), _start_pause(quiet, right)
        if right[0] <= left[1] and end != start:
            continue  # the aligner made them abut and no one pause lies between them: keep its boundary
        new_end = end[0] if end is not None else left[1]
        new_start = start[1] if start is not None else right[0]
        if left[0] < new_end <= new_start < right[1]:
            out[i], out[i + 1] = (left[0], new_end), (new_start, right[1])
    trail = _end_pause(quiet, out[-1])
    if trail is not None:
        out[-1] = (out[-1][0], trail[0])
    return out
