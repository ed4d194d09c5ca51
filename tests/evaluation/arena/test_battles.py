"""evaluation.arena.battles.Arena: the pair sampler refits from votes counted by SQLite.

The systems here are tones of different pitches (the arena only needs audio back), the clock is
the test's, so a vote sooner than its clips could play (screening its whole session) needs no waiting.

Run: .venv/bin/python -m pytest tests/evaluation/arena/test_battles.py -q
"""

from __future__ import annotations

import itertools

import numpy as np
import soundfile as sf

from evaluation.arena.battles import Arena
from evaluation.arena.votes import to_battles
from rumik_app.audio import SAMPLE_RATE, Audio

SYSTEMS = ("low", "mid", "high")


class Tone:
    """A system that says every text as one second of its own pitch."""

    def __init__(self, hertz: float):
        self.hertz = hertz

    def synthesize(self, request) -> Audio:
        time = np.arange(SAMPLE_RATE) / SAMPLE_RATE
        return Audio((0.2 * np.sin(2 * np.pi * self.hertz * time)).astype(np.float32), SAMPLE_RATE)


def by_pair(battles) -> dict[tuple[str, str], list[float]]:
    """{(system, system): battles ending in each outcome, seen from the first}, whatever the pair order."""
    return {(battles.systems[i], battles.systems[j]): row.tolist()
            for (i, j), row in zip(battles.pairs, battles.counts(), strict=True)}


def test_the_counted_battles_are_the_leaderboards_votes_with_a_screened_session_left_out(tmp_path):
    clock = itertools.count(1_000_000.0, 5.0).__next__  # each call 5 s later: every vote comes after its clips
    counter = itertools.count()

    def write_clip(samples, rate):
        path = tmp_path / f"clip-{next(counter)}.wav"
        sf.write(path, samples, rate)
        return path

    arena = Arena({name: Tone(hertz) for name, hertz in zip(SYSTEMS, (220.0, 330.0, 440.0), strict=True)},
                  tmp_path / "arena.sqlite3", write_clip, seed=0, clock=clock)
    choices = ["a", "b", "tie", "both_bad", "a", "a", "b", "tie", "a"]
    for number, choice in enumerate(choices):
        session = f"visitor-{number % 3}"
        battle = arena.new_battle(f"Sentence {number}.", "en", session=session)
        arena.vote(battle.id, choice, session=session, played=(True, True))
    hasty = arena.new_battle("Too quick.", "en", session="hasty")
    arena.clock = lambda: 0.0  # before the battle was shown: the whole session is screened
    assert arena.vote(hasty.id, "a", session="hasty", played=(True, True))["screened"]
    votes = arena.votes()
    assert len(votes) == len(choices) + 1 and sum(vote.screened for vote in votes) == 1
    counted, expected = arena.counted_battles(), to_battles(votes, SYSTEMS)
    assert counted.systems == expected.systems == SYSTEMS
    assert by_pair(counted) == by_pair(expected) and len(counted.outcome_index) == len(choices)
