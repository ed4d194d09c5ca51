"""CTC forced alignment (rumik_app.align.ctc) against a brute force over every valid CTC path,
and what it refuses.

Run: .venv/bin/python -m pytest tests/rumik_app/test_align_ctc.py -q
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rumik_app.align import AlignmentError
from rumik_app.align.ctc import (
    STAR_LOG_PROB,
    forced_align,
    min_frames,
    path_score,
    token_spans,
    with_star,
    word_frames,
)


def collapse(path, blank: int) -> list[int]:
    """CTC's many-to-one map: merge repeats, then drop blanks."""
    return [int(k) for k, _ in itertools.groupby(path) if k != blank]


def brute_force_best(log_probs: np.ndarray, targets: list[int], blank: int) -> float:
    """The highest total log-probability over every length-T sequence that collapses to targets."""
    frames, vocab = log_probs.shape
    scores = [path_score(log_probs, p) for p in itertools.product(range(vocab), repeat=frames)
              if collapse(p, blank) == targets]
    return max(scores)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def random_cases(n: int):
    """(log_probs [T, V], targets, blank): T <= 7, L <= 3, V <= 4, repeats included, blank anywhere."""
    rng = np.random.default_rng(36)
    cases = []
    while len(cases) < n:
        vocab = int(rng.integers(2, 5))
        blank = int(rng.integers(0, vocab))
        tokens = [v for v in range(vocab) if v != blank]
        targets = [int(rng.choice(tokens)) for _ in range(int(rng.integers(1, 4)))]
        frames = int(rng.integers(min_frames(targets), 8))
        cases.append((log_softmax(3 * rng.standard_normal((frames, vocab))), targets, blank))
    return cases


@pytest.mark.parametrize("case", random_cases(60), ids=lambda c: f"T{c[0].shape[0]}V{c[0].shape[1]}L{len(c[1])}")
def test_the_path_is_the_best_valid_ctc_path(case):
    log_probs, targets, blank = case
    path = forced_align(log_probs, targets, blank)
    assert len(path) == log_probs.shape[0]
    assert collapse(path, blank) == targets  # a valid path for these targets
    assert path_score(log_probs, path) == pytest.approx(brute_force_best(log_probs, targets, blank), abs=1e-9)
    spans = token_spans(path, targets, blank)
    assert len(spans) == len(targets) and all(a < b for a, b in spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(spans))
    assert all(path[t] == tok for (a, b), tok in zip(spans, targets, strict=True) for t in range(a, b))


def test_repeated_tokens_need_a_blank_between():
    blank, a = 0, 1
    scores = np.full((2, 2), np.log(0.5))
    with pytest.raises(AlignmentError, match="at least 3"):
        forced_align(scores, [a, a], blank)  # "a a" cannot fit in 2 frames: it would collapse to "a"
    scores = log_softmax(np.array([[0.0, 5.0], [0.0, 5.0], [0.0, 5.0]]))  # every frame prefers "a"
    path = forced_align(scores, [a, a], blank)
    assert list(path) == [a, blank, a]  # the blank is forced even though "a" scores higher there
    assert token_spans(path, [a, a], blank) == [(0, 1), (2, 3)]


def test_too_few_frames_are_refused_with_the_count():
    with pytest.raises(AlignmentError, match="has 2 frames but the 3 tokens need at least 3"):
        forced_align(np.zeros((2, 4)), [1, 2, 3], 0)


def test_bad_targets_are_refused():
    with pytest.raises(AlignmentError, match="not the blank"):
        forced_align(np.zeros((5, 3)), [1, 0], 0)
    with pytest.raises(AlignmentError, match="not the blank"):
        forced_align(np.zeros((5, 3)), [3], 0)
    with pytest.raises(AlignmentError, match="at least one target"):
        forced_align(np.zeros((5, 3)), [], 0)
    with pytest.raises(AlignmentError, match=r"\[T, V\]"):
        forced_align(np.zeros(5), [1], 0)


def test_spans_follow_the_frames_and_group_into_words():
    blank = 0
    path = [0, 1, 1, 0, 2, 0, 0, 3, 3, 3, 0]
    spans = token_spans(path, [1, 2, 3], blank)
    assert spans == [(1, 3), (4, 5), (7, 10)]
    assert word_frames(spans, [2, 1]) == [(1, 5), (7, 10)]
    with pytest.raises(AlignmentError, match="cannot be split"):
        word_frames(spans, [2, 2])
    with pytest.raises(AlignmentError, match="spells 3 tokens"):
        token_spans(path, [1, 2], blank)


def test_a_star_word_takes_the_frames_its_neighbours_cannot_explain():
    # vocabulary: blank 0, "a" 1, "b" 2, "x" 3 (a token no target uses); the speech is a x x x b
    blank, low, high = 0, -12.0, -0.01
    frames = [1, 3, 3, 3, 0, 2]
    scores = np.full((len(frames), 4), low)
    scores[np.arange(len(frames)), frames] = high
    scores, star = with_star(scores)
    assert scores.shape == (6, 5) and star == 4 and np.all(scores[:, star] == STAR_LOG_PROB)
    path = forced_align(scores, [1, star, 2], blank)
    assert list(path) == [1, star, star, star, blank, 2]
    assert word_frames(token_spans(path, [1, star, 2], blank), [1, 1, 1]) == [(0, 1), (1, 4), (5, 6)]


def test_a_long_clip_aligns_quickly():
    import time

    rng = np.random.default_rng(0)
    scores = log_softmax(rng.standard_normal((3000, 40)))
    targets = [int(t) for t in rng.integers(1, 40, 600)]
    start = time.perf_counter()
    path = forced_align(scores, targets, 0)
    assert collapse(path, 0) == targets
    assert time.perf_counter() - start < 5.0  # 60 s of 20 ms frames, 600 characters
