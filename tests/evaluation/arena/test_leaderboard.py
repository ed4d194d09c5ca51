"""`rumik arena leaderboard` from a vote export alone, the export's checks, and the pair sampler."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from evaluation.arena.bradley_terry import Battles
from evaluation.arena.leaderboard import main as leaderboard_main
from evaluation.arena.sampling import FLOOR, PairSampler, next_language
from evaluation.arena.simulate import Truth
from evaluation.arena.votes import Vote, VoteFileError, read_votes, write_votes
from rumik_app.cli import main as rumik_main

TRUTH = Truth(("rumik-oss-1", "espeak", "tiny"), np.array([0.8, 0.0, -0.8]))
VOTE_OF = {1.0: "a", 0.0: "b", 0.5: "tie"}


def exported(count: int, seed: int = 0) -> list[Vote]:
    rng = np.random.default_rng(seed)
    return [Vote(f"battle-{k}", "नमस्ते" if k % 3 == 0 else "Hello there.", "hi" if k % 3 == 0 else "en", a, b,
                 "a" * 64, "b" * 64, VOTE_OF[outcome], "2026-12-03T10:00:00Z", "2026-12-03T10:00:20Z",
                 f"session-{k % 40}")
            for k, (a, b, outcome) in enumerate(TRUTH.votes(count, rng))]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_the_leaderboard_is_reproducible_from_the_export_alone(tmp_path, suffix, capsys):
    votes = exported(600)
    votes[5] = replace(votes[5], screened=True, vote="b")
    path = write_votes(tmp_path / f"votes{suffix}", votes + [replace(votes[7], vote="b")])  # a repeated battle id
    first = leaderboard_main([str(path), "--rounds", "300", "--systems", "unheard", "--out", str(tmp_path / "out")])
    assert first["counted"] == 599 and first["screened"] == 1 and first["repeats"] == 1
    overall = first["boards"]["all"]
    assert [row["system"] for row in overall] == ["rumik-oss-1", "espeak", "tiny", "unheard"]
    assert overall[-1]["rank"] is None and set(first["boards"]) == {"all", "en", "hi"}
    text = capsys.readouterr().out
    assert "599 battles counted; left out: 1 from screened sessions, 1 repeated battle ids" in text
    assert "| - | unheard | unranked |" in text and "## hi" in text
    assert leaderboard_main([str(path), "--rounds", "300", "--systems", "unheard"])["boards"] == first["boards"]
    out = tmp_path / "out"
    assert (out / "leaderboard.md").read_text(encoding="utf-8") == text
    assert json.loads((out / "leaderboard.json").read_text())["all"][0]["system"] == "rumik-oss-1"
    assert (out / "leaderboard.csv").read_text().splitlines()[0] == ("language,rank,system,rating,ci_low,ci_high,"
                                                                     "battles,win_rate")
    for picture in ("win_rate.png", "battles.png"):
        assert Image.open(out / picture).size[0] > 300


def test_the_rumik_command_runs_it_and_a_bad_file_is_one_line(tmp_path, capsys):
    path = write_votes(tmp_path / "votes.jsonl", exported(60))
    assert rumik_main(["arena", "leaderboard", str(path), "--rounds", "100"]) == 0
    assert "| 1 | rumik-oss-1 |" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**json.loads(path.read_text().splitlines()[0]), "vote": "maybe"}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        leaderboard_main([str(bad)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "bad.jsonl line 1: vote is one of a, b, tie, both_bad" in err
    assert "Traceback" not in err


def test_the_export_refuses_rows_it_cannot_trust(tmp_path):
    good = json.loads(write_votes(tmp_path / "v.jsonl", exported(1)).read_text())
    cases = {"missing": {k: v for k, v in good.items() if k != "system_b"},
             "same": {**good, "system_b": good["system_a"]},
             "screened": {**good, "screened": "maybe"}, "long": {**good, "prompt": "x" * 5000}}
    for name, row in cases.items():
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
        with pytest.raises(VoteFileError):
            read_votes(tmp_path / f"{name}.jsonl")
    (tmp_path / "array.jsonl").write_text("[1, 2]\n")
    with pytest.raises(VoteFileError, match="not a JSON object"):
        read_votes(tmp_path / "array.jsonl")


def test_the_sampler_favours_unresolved_close_pairs_and_keeps_every_pair_possible():
    truth = Truth(("a", "b", "c", "d"), np.array([2.0, 1.9, -1.0, -3.0]))
    sampler = PairSampler(truth.systems, seed=0)
    assert np.allclose(sampler.weights()[np.triu_indices(4, 1)], sampler.weights()[0, 1])  # no votes: uniform
    sampler.update(Battles.of(truth.systems, truth.votes(2000, np.random.default_rng(0))))
    weights = sampler.weights()
    assert weights[0, 1] > 5 * weights[0, 3] and weights[0, 3] >= FLOOR and np.all(np.diag(weights) == 0)
    drawn = [frozenset(sampler.sample()) for _ in range(3000)]
    assert drawn.count(frozenset("ab")) > drawn.count(frozenset("ad")) > 0
    assert len(set(drawn)) == 6  # every pair came up


def test_a_new_system_with_few_votes_is_favoured():
    truth = Truth(("a", "b", "c", "new"), np.array([0.5, 0.0, -0.5, 0.0]))
    votes = [vote for vote in truth.votes(1500, np.random.default_rng(1)) if "new" not in vote[:2]]
    sampler = PairSampler(truth.systems, seed=1)
    sampler.update(Battles.of(truth.systems, votes))
    weights = sampler.weights()
    assert weights[1, 3] > weights[0, 1] and weights[0, 3] > weights[0, 2]


def test_the_next_language_is_the_least_played():
    assert next_language({"en": 40, "hi": 12}, ["en", "hi", "ta"]) == "ta"
    picks = {next_language({"en": 3, "hi": 3}, ["en", "hi"], np.random.default_rng(k)) for k in range(20)}
    assert picks == {"en", "hi"}
