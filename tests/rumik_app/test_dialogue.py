"""Dialogue scripts (rumik_app.text.dialogue) and scripts of parts (rumik_app.engine.script).

The parser's rules and one-line errors, then a three-speaker dialogue on the tiny checkpoint:
the turns share decode batches, each turn's tokens are those of the turn alone with the same
seed, its audio is that turn's audio (exactly when decoded alone; within Mimi's batch rounding
otherwise), pauses are exact silence, and the spans locate every turn.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rumik_app.engine.script import (
    MAX_PARTS,
    MAX_PAUSE_SECONDS,
    Part,
    dialogue_parts,
    plan_script,
    seeded_parts,
    synthesize_script,
)
from rumik_app.engine.stream import STREAM_ATOL
from rumik_app.errors import PromptError
from rumik_app.prompt import ACCENTS, PACES, TONES
from rumik_app.request import RequestLimits, SynthesisRequest
from rumik_app.text.dialogue import MAX_TURNS, Speaker, Turn, parse_dialogue

SCRIPT = """
Host: Welcome back to the show.

aisha (sad, slow): I am not so sure
  about that, honestly.
Guest (Hindi accent): Let us begin then! <laugh>
"""
SPEAKERS = {"Host": "Ira", "Guest": Speaker("zoya", tone="happy", pace="fast")}


# ---------------------------------------------------------------- parsing


def test_three_speakers_with_settings_continuations_and_mapping():
    turns = parse_dialogue(SCRIPT, speakers=SPEAKERS)
    assert [(t.speaker, t.voice, t.line) for t in turns] == [("Host", "Ira", 2), ("Aisha", "Aisha", 4),
                                                             ("Guest", "Zoya", 6)]
    assert turns[1].text == "I am not so sure about that, honestly."
    assert (turns[1].tone, turns[1].pace, turns[1].accent) == ("sad", "slow", None)
    # the bracket overrides the speaker's defaults field by field
    assert (turns[2].tone, turns[2].pace, turns[2].accent) == ("happy", "fast", "Hindi")
    assert turns[2].text == "Let us begin then! <laugh>"
    assert turns[0] == Turn("Host", "Ira", "Welcome back to the show.", line=2)


def test_every_prompt_word_is_a_bracket_word():
    for word, field in [*((w, "tone") for w in TONES), *((w, "pace") for w in PACES),
                        *((w, "accent") for w in ACCENTS)]:
        (turn,) = parse_dialogue(f"Ira ({word.upper()}): hi")
        assert getattr(turn, field) == word
    (turn,) = parse_dialogue("Siya (Indian English accent, steady pace , professional): hi")
    assert (turn.tone, turn.pace, turn.accent) == ("professional", "steady", "Indian English")


def test_a_colon_later_in_a_line_is_text():
    turns = parse_dialogue("Ira: The time is: five.\nNow that we are here, the plan is: wait.")
    assert turns == [Turn("Ira", "Ira", "The time is: five. Now that we are here, the plan is: wait.", line=1)]


def _error(script: str, **kwargs) -> str:
    with pytest.raises(PromptError) as caught:
        parse_dialogue(script, **kwargs)
    assert caught.value.field in ("text", "speakers")
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("script, expected", [
    ("Ira: hi\nBob: hello", ["line 2", "'Bob'", "Ira, Aisha, Siya, Zoya"]),
    ("Ira: hi\nAisha (sad, whisper): no", ["line 2", "'whisper'", "happy", "slow, steady, fast", "Hindi"]),
    ("Ira (slow, fast): hi", ["line 1", "two paces"]),
    ("hello there\nIra: hi", ["line 1", "start with a speaker"]),
    ("Ira: hi\n\nZoya:\n", ["line 3", "Zoya's turn has no text"]),
    ("Ira: hi\nZoya: <giggle> no", ["line 2", "Unknown tag <giggle>"]),
])
def test_parse_errors_name_the_line(script, expected):
    message = _error(script)
    assert message.startswith("Dialogue line")
    for part in expected:
        assert part in message


@pytest.mark.parametrize("script", ["", "   \n\n \t\n"])
def test_empty_script(script):
    assert "empty" in _error(script)


def test_bounds():
    many = "\n".join(f"Ira: turn {k}" for k in range(MAX_TURNS + 1))
    assert len(parse_dialogue("\n".join(many.splitlines()[:MAX_TURNS]))) == MAX_TURNS
    message = _error(many)
    assert f"line {MAX_TURNS + 1}" in message and f"more than {MAX_TURNS} turns" in message
    assert "limit is 20" in _error("Ira: " + "a" * 21, max_chars=20)  # one turn
    assert "limit is 30" in _error("Ira: " + "a" * 20 + "\nZoya: " + "b" * 20, max_chars=30)  # the sum
    assert "limit is 60" in _error("Ira: a" + "\n" * 60, max_chars=30)  # the script itself
    assert "line 2" in _error("Ira: a\nZoya: " + "b" * 10_000)  # a line


def test_speaker_mapping_errors():
    assert "'Zed'" in _error("Host: hi", speakers={"Host": "Zed"})
    assert "unknown pace 'sad'" in _error("Host: hi", speakers={"Host": {"voice": "Ira", "pace": "sad"}})
    assert "'colour'" in _error("Host: hi", speakers={"Host": {"voice": "Ira", "colour": "red"}})
    assert "not a name" in _error("Host: hi", speakers={"Host:1": "Ira"})
    turns = parse_dialogue("HOST: hi\nira: yes", speakers={"host": {"voice": "siya", "accent": "tamil"}})
    assert [(t.speaker, t.voice, t.accent) for t in turns] == [("host", "Siya", "Tamil"), ("Ira", "Ira", None)]


def test_checkpoint_voices():
    (turn,) = parse_dialogue("NEWVOICE: hi", voices=("Ira", "NewVoice"))
    assert turn.voice == "NewVoice"
    assert "Ira, NewVoice" in _error("Zoya: hi", voices=("Ira", "NewVoice"))


# ---------------------------------------------------------------- parts and seeds

BASE = SynthesisRequest("", max_new_tokens=40, seed=5)


def test_dialogue_parts_seeds_gaps_and_settings():
    turns = parse_dialogue(SCRIPT, speakers=SPEAKERS)
    parts = dialogue_parts(turns, BASE.with_(pace="steady"), gap_s=0.25)
    assert [p.request.seed for p in parts] == [5, 6, 7]
    assert [p.pause_after_s for p in parts] == [0.25, 0.25, 0.0]
    assert [p.request.pace for p in parts] == ["steady", "slow", "fast"]
    assert [p.request.voice for p in parts] == ["Ira", "Aisha", "Zoya"]
    assert parts[1].label == "Dialogue line 4 (Aisha)"
    described = dialogue_parts(turns, BASE.with_(description="a calm narrator"), base_seed=100)
    assert [p.request.description for p in described] == ["a calm narrator", None, None]
    assert [p.request.seed for p in described] == [100, 101, 102]


@pytest.mark.parametrize("base", [None, -1])
def test_random_base_seed_is_drawn_once(base):
    parts = seeded_parts([Part(BASE), Part(BASE), Part(BASE)], base)
    first = parts[0].request.seed
    assert [p.request.seed for p in parts] == [first, first + 1, first + 2]


@pytest.mark.parametrize("pause", [-0.1, MAX_PAUSE_SECONDS + 0.01, float("nan"), "1", True])
def test_pause_bounds(pause):
    with pytest.raises(PromptError, match="Pause"):
        Part(BASE, pause_after_s=pause)


# ---------------------------------------------------------------- synthesis on the tiny checkpoint


@pytest.fixture
def rows_per_call(tiny_engine, monkeypatch):
    """Every generate_batch call's chunk requests and its rollouts."""
    calls, real = [], tiny_engine.generate_batch

    def spy(requests, *args, **kwargs):
        rollouts = real(requests, *args, **kwargs)
        calls.append((list(requests), rollouts))
        return rollouts

    monkeypatch.setattr(tiny_engine, "generate_batch", spy)
    return calls


def test_turns_share_batches_and_each_equals_the_turn_alone(tiny_engine, rows_per_call):
    parts = dialogue_parts(parse_dialogue(SCRIPT, speakers=SPEAKERS), BASE, gap_s=0.25)
    seen = []
    result = synthesize_script(tiny_engine, parts, progress=lambda done, total: seen.append((done, total)))
    assert [[r.voice for r in requests] for requests, _ in rows_per_call] == [["Ira", "Aisha", "Zoya"]]
    assert seen and seen[-1][0] == seen[-1][1] == 40
    (requests, rollouts), = rows_per_call
    for row, request in enumerate(requests):  # tokens: exactly the turn's own
        alone = tiny_engine.generate_batch([request])
        n = int(alone.lengths[0])
        assert int(rollouts.lengths[row]) == n and torch.equal(rollouts.token_ids[row, :n], alone.token_ids[0, :n])
    for k, part in enumerate(parts):  # audio: Mimi decodes a batch of 3 to float rounding of 1 alone
        alone = tiny_engine.synthesize(part.request)
        cut = result.part_samples(k)
        assert alone.seed == result.spans[k]["seed"] == 5 + k
        assert cut.dtype == np.float32 and len(cut) == len(alone.samples) > 0
        np.testing.assert_allclose(cut, alone.samples, rtol=0, atol=STREAM_ATOL)
    _check_timeline(result, parts)


def test_parts_decoded_alone_are_sample_exact(tiny_engine, rows_per_call):
    parts = dialogue_parts(parse_dialogue(SCRIPT, speakers=SPEAKERS), BASE, gap_s=0.1)
    result = synthesize_script(tiny_engine, parts, batch_size=1)
    assert len(rows_per_call) == 3
    for k, part in enumerate(parts):
        assert np.array_equal(result.part_samples(k), tiny_engine.synthesize(part.request).samples)
    _check_timeline(result, parts)


def _check_timeline(result, parts, chunks=None):
    """Spans in order, back to back with their pauses; pauses exact zeros of round(s * rate)."""
    rate, position = result.sample_rate, 0
    for k, (span, part) in enumerate(zip(result.spans, parts, strict=True)):
        gap = round(part.pause_after_s * rate)
        assert span["index"] == k and span["speaker"] == part.speaker
        assert span["text"] == (part.request.text if part.request else "")
        assert span["start_sample"] == position <= span["end_sample"]
        assert (span["start_sample"] < span["end_sample"]) == (part.request is not None)
        assert span["start"] == position / rate and span["end"] == span["end_sample"] / rate
        assert span["pause_after"] == gap / rate
        silence = result.samples[span["end_sample"] : span["end_sample"] + gap]
        assert len(silence) == gap and silence.dtype == np.float32 and not silence.any()
        position = span["end_sample"] + gap
    assert position == len(result.samples) and result.samples.dtype == np.float32
    audio = result.audio()
    assert audio.info["parts"] == result.spans and np.array_equal(audio.samples, result.samples)
    assert result.info["parts"] == len(parts) and result.info["chunks"] == (chunks or len(parts))


def test_silence_only_parts(tiny_engine):
    """A part without a request is silence (SSML's leading <break/>); it takes no seed or row."""
    parts = seeded_parts([Part(None, pause_after_s=0.5), Part(BASE.with_(text="after the break"), "Ira", 0.2),
                          Part(None, pause_after_s=0.1)], 9)
    result = synthesize_script(tiny_engine, parts)
    assert [span["seed"] for span in result.spans] == [None, 9, None] and result.audio().seed == 9  # spoken: base
    assert result.spans[0]["end_sample"] == 0 and len(result.part_samples(0)) == 0
    np.testing.assert_allclose(result.part_samples(1), tiny_engine.synthesize(parts[1].request).samples,
                               rtol=0, atol=STREAM_ATOL)
    _check_timeline(result, parts, chunks=1)
    with pytest.raises(PromptError, match="only pauses"):
        synthesize_script(tiny_engine, [Part(None, pause_after_s=1.0)])


# ---------------------------------------------------------------- script bounds (planned only)


def test_script_limits_are_summed_over_parts(tiny_engine, rows_per_call):
    parts = [Part(BASE.with_(text="one two three four"), "Ira"), Part(BASE.with_(text="five six seven"), "Zoya")]
    plan_script(tiny_engine.layout, parts, RequestLimits(32, 64))  # each part and the sum fit
    with pytest.raises(PromptError, match="Part 1 \\(Ira\\): Text is 18 characters; the limit is 10"):
        plan_script(tiny_engine.layout, parts, RequestLimits(10, 40))
    with pytest.raises(PromptError, match="32 characters of text; the limit is 30"):
        plan_script(tiny_engine.layout, parts, RequestLimits(30, 60))
    money = [Part(BASE.with_(text=f"₹99,99,999 {k}")) for k in range(2)]
    spoken = sum(len(tiny_engine.plan(part.request)[0].text) for part in money)
    plan_script(tiny_engine.layout, money, RequestLimits(100, spoken))
    with pytest.raises(PromptError, match=f"reads as {spoken} characters"):
        plan_script(tiny_engine.layout, money, RequestLimits(100, spoken - 1))
    seconds = 40 / tiny_engine.layout.tokens_per_second  # one part's budget
    plan_script(tiny_engine.layout, parts, RequestLimits(100, 200, 2 * seconds))
    with pytest.raises(PromptError, match="pauses"):
        plan_script(tiny_engine.layout, [parts[0], Part(parts[1].request, pause_after_s=1.0)],
                    RequestLimits(100, 200, 2 * seconds + 0.5))
    with pytest.raises(PromptError, match="empty"):
        synthesize_script(tiny_engine, [])
    with pytest.raises(PromptError, match=f"limit is {MAX_PARTS}"):
        synthesize_script(tiny_engine, [Part(BASE.with_(text="x"))] * (MAX_PARTS + 1))
    assert rows_per_call == []  # nothing was generated for a script over its limits


def test_script_module_is_light():
    import subprocess
    import sys

    code = "import sys, rumik_app.engine.script, rumik_app.text.dialogue; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_unseeded_parts_draw_seeds_that_are_reported(tiny_engine):
    parts = [Part(BASE.with_(text="first", seed=None)), Part(BASE.with_(text="second", seed=None))]
    seeded, _ = plan_script(tiny_engine.layout, parts)
    assert all(isinstance(p.request.seed, int) for p in seeded)


def test_a_continuation_line_with_a_time_in_it_is_not_a_speaker():
    turns = parse_dialogue("Ira: The show\nstarts at 10:30 sharp.\nAisha: Great.")
    assert [(turn.voice, turn.text) for turn in turns] == [("Ira", "The show starts at 10:30 sharp."),
                                                           ("Aisha", "Great.")]
