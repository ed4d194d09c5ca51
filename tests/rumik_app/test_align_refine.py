"""Word boundaries snapped to pauses (rumik_app.align.refine) on planted tones and silences: each
tone is a "word" whose true edges are known to the sample, the aligner's spans are those edges
moved by what aligners get wrong.

Run: .venv/bin/python -m pytest tests/rumik_app/test_align_refine.py -q
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rumik_app.align.refine import FRAME_S, REACH_S, pauses, refine_boundaries

RATE = 24_000
TOL = FRAME_S + 1e-9  # a boundary lands on the 5 ms frame grid


def clip(*parts: tuple[str, float]) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Samples [N] of ("tone" | "quiet", seconds) parts, and the (start, end) of each tone."""
    out, tones, t = [], [], 0.0
    for i, (kind, seconds) in enumerate(parts):
        n = round(seconds * RATE)
        if kind == "tone":
            out.append(0.5 * np.sin(2 * np.pi * (220 + 40 * i) * np.arange(n) / RATE))
            tones.append((t, t + seconds))
        else:
            out.append(np.zeros(n))
        t += seconds
    return np.concatenate(out).astype(np.float32), tones


def close(got, want) -> bool:
    return all(abs(a - c) <= TOL and abs(b - d) <= TOL for (a, b), (c, d) in zip(got, want, strict=True))


def test_pauses_are_the_quiet_runs_long_enough():
    samples, _ = clip(("quiet", 0.2), ("tone", 0.3), ("quiet", 0.02), ("tone", 0.3), ("quiet", 0.1),
                      ("tone", 0.2), ("quiet", 0.01))
    found = pauses(samples, RATE)
    # the 20 ms gap is no pause; the clip's edges are, at any length
    assert close(found, [(0.0, 0.2), (0.82, 0.92), (1.12, 1.13)])
    assert pauses(np.zeros(RATE, np.float32), RATE) == []


def test_early_ends_and_late_starts_snap_to_the_pauses():
    samples, truth = clip(("quiet", 0.3), ("tone", 0.4), ("quiet", 0.25), ("tone", 0.5), ("quiet", 0.3),
                          ("tone", 0.3), ("quiet", 0.2))
    aligned = [(truth[0][0] + 0.06, truth[0][1] - 0.1),  # a weak ending given to the silence
               (truth[1][0] - 0.05, truth[1][1] + 0.12),  # the pause around the word given to it
               (truth[2][0] + 0.03, truth[2][1] + 0.2)]   # the trailing silence swallowed
    refined = refine_boundaries(samples, RATE, aligned)
    assert close(refined, truth)
    assert all(isinstance(v, float) for span in refined for v in span)


def test_the_longest_pause_in_reach_wins_over_a_stop_closure():
    # word 1 = tone, 40 ms closure, 60 ms release; the aligner ends it at the closure
    samples, tones = clip(("quiet", 0.2), ("tone", 0.3), ("quiet", 0.04), ("tone", 0.06), ("quiet", 0.2),
                          ("tone", 0.4), ("quiet", 0.2))
    word1, word2 = (tones[0][0], tones[1][1]), tones[2]
    refined = refine_boundaries(samples, RATE, [(word1[0], tones[0][1] + 0.01), (word2[0] - 0.1, word2[1])])
    assert close(refined, [word1, word2])


def test_abutting_words_and_boundaries_out_of_reach_stay():
    samples, tones = clip(("quiet", 0.2), ("tone", 0.4), ("quiet", 0.02), ("tone", 0.6), ("quiet", 0.2))
    middle = tones[0][1] + 0.05
    abut = [(tones[0][0], middle), (middle, tones[1][1])]
    assert close(refine_boundaries(samples, RATE, abut), abut)  # no pause between them (20 ms is none): kept
    samples, tones = clip(("quiet", 0.2), ("tone", 0.4), ("quiet", 0.1), ("tone", 0.6), ("quiet", 0.2))
    middle = tones[0][1] + 0.04
    abut = [(tones[0][0], middle), (middle, tones[1][1])]
    assert close(refine_boundaries(samples, RATE, abut), tones)  # the pause they share is their gap
    # an end 0.3 s of sound before the pause is out of reach; the start after it snaps
    far = [(tones[0][0], tones[0][1] - 0.3), (tones[1][0] + 0.05, tones[1][1])]
    refined = refine_boundaries(samples, RATE, far)
    assert refined[0] == far[0] and close(refined[1:], [tones[1]])
    assert REACH_S < 0.3


def test_speech_no_word_owns_keeps_each_word_at_its_own_pause():
    # word, pause, unassigned speech (a STAR the caller realigns), pause, word
    samples, tones = clip(("quiet", 0.2), ("tone", 0.4), ("quiet", 0.3), ("tone", 1.0), ("quiet", 0.4),
                          ("tone", 0.4), ("quiet", 0.2))
    aligned = [(tones[0][0], tones[0][1] - 0.05), (tones[2][0] + 0.04, tones[2][1])]
    assert close(refine_boundaries(samples, RATE, aligned), [tones[0], tones[2]])


def test_never_reorders_overlaps_or_empties_a_span():
    rng = np.random.default_rng(7)
    parts = [("quiet", 0.15)]
    for _ in range(8):
        parts += [("tone", float(rng.uniform(0.05, 0.4))), ("quiet", float(rng.uniform(0.005, 0.3)))]
    samples, tones = clip(*parts)
    for _ in range(50):
        edges = np.sort(np.concatenate([np.array(tones).ravel() + rng.normal(0, 0.08, 2 * len(tones))]))
        edges = np.clip(edges, 0, len(samples) / RATE)
        spans = [(float(a), float(b)) for a, b in edges.reshape(-1, 2)]
        refined = refine_boundaries(samples, RATE, spans)
        assert len(refined) == len(spans)
        assert all(a <= b for a, b in refined)
        assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(refined))
        assert all(b > a for (a, b), (c, d) in zip(refined, spans, strict=True) if d > c)


@pytest.mark.parametrize("spans", [[], [(0.1, 0.2)]])
def test_nothing_to_snap_in_silence_or_without_words(spans):
    assert refine_boundaries(np.zeros(RATE, np.float32), RATE, spans) == spans
